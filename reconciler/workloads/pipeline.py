"""The Pipeline controller: stages as Jobs named `<pipeline>-<stage>`, started when every
stage they depend on has succeeded, with the seeds' FailFast and RunIndependent rules."""

from __future__ import annotations

from typing import Any

from providers.base import Observed
from reconciler.composite import merge_defaults, stage_job_name
from reconciler.identity import LABEL_PIPELINE, ResourceKey
from reconciler.phases import Phase, Reason, is_terminal
from reconciler.workloads.base import Child, Controller, Record

SKIPPED = "Skipped"


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
            location = self.inner.output_location(source, inp["output"])  # type: ignore[attr-defined]
            inputs.append({"name": inp["name"], "path": str(location)})
        return inputs

    def on_failures(self, record: Record, children: list[Child],
                    phases: dict[str, str | None]) -> None:
        failed = {c.id for c in children if phases[c.id] in (Phase.FAILED, Phase.CANCELLED)
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
               observed: dict[str, Observed | None]) -> tuple[str, str | None, str | None,
                                                           dict[str, Any]]:
        stages = []
        for child in children:
            o = observed[child.id]
            phase = o.phase if o else None
            if child.id in record.skipped and (o is None or phase in (
                    Phase.CANCELLED, Phase.CANCELLING)):
                phase = SKIPPED if o is None else phase
            entry: dict[str, Any] = {"name": child.id, "job": child.job,
                                     "phase": phase or "Pending",
                                     "costUSD": o.cost_usd if o else "0"}
            if o is not None:
                entry["startTime"] = o.status.get("startTime")
                entry["completionTime"] = o.status.get("completionTime")
                if o.reason:
                    entry["reason"] = o.reason
            stages.append(entry)
        failed = [s["name"] for s in stages if s["phase"] == Phase.FAILED]
        unfinished = [s for s in stages if s["phase"] not in (
            Phase.SUCCEEDED, Phase.FAILED, Phase.CANCELLED, SKIPPED)]
        if record.spec.get("state") == "Cancelled" and not unfinished:
            phase, reason, message = Phase.CANCELLED, None, None
        elif failed and not unfinished:
            phase, reason = Phase.FAILED, Reason.STAGE_FAILED
            message = f"stage{'s' if len(failed) > 1 else ''} failed: {', '.join(failed)}"
        elif not unfinished:
            phase, reason, message = Phase.SUCCEEDED, None, None
        elif any(s["phase"] in (Phase.RUNNING, Phase.PROVISIONING, Phase.RECOVERING)
                 for s in stages):
            phase, reason, message = Phase.RUNNING, None, None
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
