"""The Pipeline controller: stages as Jobs named `<pipeline>-<stage>`, started when every
stage they depend on has succeeded, with the seeds' FailFast and RunIndependent rules."""

from __future__ import annotations

from typing import Any

from nodus_gitops.composite import merge_defaults, stage_job_name
from nodus_gitops.floor.errors import PermanentError
from nodus_gitops.floor.identity import LABEL_PIPELINE, ResourceKey
from nodus_gitops.floor.phases import Phase, Reason, is_terminal
from nodus_gitops.providers.base import HasOutputs
from nodus_gitops.workloads.base import (
    SKIPPED,
    Child,
    Controller,
    Record,
    Views,
    held_by_budget,
)

FINISHED = (Phase.SUCCEEDED, Phase.FAILED, Phase.CANCELLED, SKIPPED)


class PipelineController(Controller):
    kind = "Pipeline"
    child_label = LABEL_PIPELINE

    def children(self, record: Record) -> list[Child]:
        spec = record.spec
        defaults = spec.get("defaults") or {}
        return [Child(s["name"], stage_job_name(record.key.name, s["name"]),
                      merge_defaults(defaults, s.get("template")),
                      tuple(s.get("dependsOn") or ()))
                for s in spec.get("stages") or []]

    def ready(self, record: Record, child: Child, phases: dict[str, str | None]) -> bool:
        return all(phases.get(dep) == Phase.SUCCEEDED for dep in child.depends_on)

    def child_inputs(self, record: Record, child: Child) -> list[dict[str, str]]:
        stage = next(s for s in record.spec["stages"] if s["name"] == child.id)
        inputs = []
        for inp in stage.get("inputs") or []:
            source = ResourceKey("Job", record.key.project,
                                 stage_job_name(record.key.name, inp["fromStage"]))
            if not isinstance(self.inner, HasOutputs):
                raise PermanentError(f"{record.key.short}: stage {child.id} takes stage "
                                     f"{inp['fromStage']}'s outputs, and the {self.inner.name} "
                                     "backend stores no outputs")
            location = self.inner.output_location(source, inp["output"])
            inputs.append({"name": inp["name"], "path": str(location)})
        return inputs

    def keeps_outputs(self, record: Record, child: Child, observed: Views) -> bool:
        """A stage's Job outlives its TTL while a stage that reads its outputs has not
        finished: deleting a Job deletes its outputs."""
        readers = {s["name"] for s in record.spec.get("stages") or []
                   if any(i.get("fromStage") == child.id for i in s.get("inputs") or [])}
        return any(self.child_phase(record, c, observed[c.id]) not in FINISHED
                   for c in self.children(record) if c.id in readers)

    def on_failures(self, record: Record, children: list[Child],
                    phases: dict[str, str | None]) -> None:
        # A stage cancelled by the Pipeline's own cancel did not fail.
        ends = (Phase.FAILED,) if record.cancelled else (Phase.FAILED, Phase.CANCELLED)
        failed = {c.id for c in children if phases[c.id] in ends
                  and c.id not in record.skipped}
        if not failed:
            return
        if record.spec.get("failurePolicy", "FailFast") == "FailFast":
            # Running stages are cancelled, those not started are skipped.
            doomed = [c.id for c in children if not is_terminal(phases[c.id])]
        else:
            doomed = sorted(_dependents(children, failed))
        for cid in doomed:
            if cid not in record.skipped and not is_terminal(phases[cid]):
                record.skipped.append(cid)

    def status(self, record: Record, children: list[Child],
               observed: Views) -> tuple[str, str | None, str | None, dict[str, Any]]:
        stages = []
        for child in children:
            o = observed[child.id]
            entry: dict[str, Any] = {"name": child.id, "job": child.job,
                                     "phase": self.child_phase(record, child, o),
                                     "costUSD": o.cost_usd if o else "0",
                                     "created": self.created(record, child)}
            if o is not None:
                entry["startTime"] = o.status.get("startTime")
                entry["completionTime"] = o.status.get("completionTime")
                if o.reason:
                    entry["reason"] = o.reason
            stages.append(entry)
        failed = [s["name"] for s in stages if s["phase"] == Phase.FAILED]
        unfinished = [s for s in stages if s["phase"] not in FINISHED]
        # Cancelled when the cancel stopped something: a Pipeline that finished before
        # the cancel was seen keeps its own ending.
        cancelled = any(s["phase"] == Phase.CANCELLED for s in stages)
        if record.cancelled and cancelled and not unfinished:
            phase, reason, message = Phase.CANCELLED, None, None
        elif failed and not unfinished:
            phase, reason = Phase.FAILED, Reason.STAGE_FAILED
            message = f"stage{'s' if len(failed) > 1 else ''} failed: {', '.join(failed)}"
        elif not unfinished:
            phase, reason, message = Phase.SUCCEEDED, None, None
        elif any(s["phase"] in (Phase.RUNNING, Phase.PROVISIONING, Phase.RECOVERING)
                 for s in stages):
            phase, reason, message = Phase.RUNNING, None, None
        elif (held := held_by_budget(stages, "stage")) is not None:
            phase, reason, message = held
        else:
            phase, reason, message = Phase.QUEUED, None, None
        done = sum(1 for s in stages if s["phase"] == Phase.SUCCEEDED)
        return phase, reason, message, {"stages": stages, "progress": f"{done}/{len(stages)}"}


def _dependents(children: list[Child], failed: set[str]) -> set[str]:
    """Every stage that depends, directly or not, on a failed one."""
    out: set[str] = set()
    changed = True
    while changed:
        changed = False
        for c in children:
            if c.id not in out and (set(c.depends_on) & (failed | out)):
                out.add(c.id)
                changed = True
    return out
