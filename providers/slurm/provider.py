"""`SlurmProvider`: the Provider protocol over slurmrestd, scontrol and a shared directory.

A Job is one batch job, an Indexed Job one job array (`--array=0-(n-1)%parallelism`).
create writes the Job's directory and record first (an intent), then submits; the job's
name carries a hash of the idempotency key, so a create after a crash or a lost response
finds the job it already submitted (GET /jobs, by name and comment) instead of submitting
twice. Every get() is one control step under the Job's lock: read the runs, decide
(`status.decide`), act (resubmit failed indexes up to backoffLimit, cancel, suspend,
hold, resume), and once the Job is finished record its outputs with their SHA-256 and
keep the result, so a finished Job costs no more requests. A finished Job whose
ttlSecondsAfterFinished has passed is removed, directory and all (outputs, logs), by
`expire_finished()`, which the service calls on every status tick, or by a get() that
finds it due; its record stays as a tombstone, so the same create again returns it. The
get() that finds a Job finished never removes it: the reconciler records the Job's final
status from it.
"""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

from nodus_gitops.floor.errors import NotFoundError, PermanentError, ProviderError
from nodus_gitops.floor.identity import (
    ResourceKey,
)
from nodus_gitops.floor.phases import Phase, Reason
from nodus_gitops.providers import budget_holds
from nodus_gitops.providers.base import (
    Estimates,
    ExpiresFinished,
    HasLogs,
    HasOutputs,
    HoldsBudgets,
    LogInfo,
    Observed,
    Suspends,
    Workload,
)
from nodus_gitops.providers.jsonfiles import owned_records
from nodus_gitops.providers.local.cost import estimate, run_rate
from nodus_gitops.providers.local.observe import rfc3339
from nodus_gitops.providers.local.outputs import OutputError, collect, copy_recorded
from nodus_gitops.providers.local.spec import JobSpec, Output, parse_workload
from nodus_gitops.providers.logfiles import attempts, read_log
from nodus_gitops.providers.slurm import gangfit, gpus, observe, runs, submit
from nodus_gitops.providers.slurm.client import SlurmClient, SlurmRequestError
from nodus_gitops.providers.slurm.config import SlurmConfig
from nodus_gitops.providers.slurm.jobdir import JobDir, read_json, write_json
from nodus_gitops.providers.slurm.scontrol import Scontrol
from nodus_gitops.providers.slurm.status import Decision, decide

PATCHABLE = frozenset({"state", "timeout", "activeDeadlineSeconds", "maxCostUSD",
                       "ttlSecondsAfterFinished", "expectedDuration", "completeByTime"})
SHIM_SOURCE = Path(__file__).resolve().parent.parent / "local" / "shim" / "nodus"
# In the directory of a finished Job with a TTL: when it passes (`expiresAt`), for
# `expire_finished` to find without reading every Job's record.
EXPIRY = "expiry.json"


class SlurmProvider(Estimates, HasLogs, HasOutputs, Suspends, ExpiresFinished, HoldsBudgets):
    """Runs Jobs on a Slurm cluster through slurmrestd (v0.0.36 to v0.0.38)."""

    name = "slurm"
    native_kinds = frozenset({"Job"})

    def __init__(self, config: SlurmConfig, *, client: SlurmClient | None = None,
                 scontrol: Scontrol | None = None, clock: Callable[[], float] = time.time):
        self.config = config
        self.root = Path(config.root).resolve()
        self.client = client or SlurmClient(config)
        self.scontrol = scontrol or Scontrol(config.scontrol, config.slurm_conf)
        self._clock = clock
        self._shim: Path | None = None

    def can_suspend(self) -> bool:
        """Suspend and resume (and a changed timeout) need scontrol on this host."""
        return self.scontrol.available

    def close(self) -> None:
        self.client.close()

    def hold_budget(self, project: str, exceeded: bool, message: str) -> None:
        """Record the project's hold beside its Jobs' directories; each get() of one of
        its Jobs then suspends its runs and holds its pending ones (as spec.state:
        Suspended does, reason BudgetExceeded) until the hold is lifted."""
        some_job = ResourceKey("Job", project, "budget")  # checks the project's name
        project_dir = JobDir.for_key(self.root, some_job).path.parent
        budget_holds.write(project_dir, exceeded, message)

    # -- helpers -------------------------------------------------------------------
    def _dir(self, key: ResourceKey) -> JobDir:
        if key.kind != "Job":
            raise PermanentError(f"the slurm backend runs Jobs; {key.short} is driven as Jobs "
                                 "by the reconciler's controllers")
        return JobDir.for_key(self.root, key)

    def _shim_dir(self) -> Path:
        """The `nodus` SDK stand-in, copied once onto the shared filesystem."""
        if self._shim is None:
            dest = self.root / ".nodus" / "shim"
            target = dest / "nodus"
            target.mkdir(parents=True, exist_ok=True)
            for src in SHIM_SOURCE.glob("*.py"):
                if not (target / src.name).exists() or \
                        (target / src.name).read_bytes() != src.read_bytes():
                    shutil.copyfile(src, target / src.name)
            self._shim = dest
        return self._shim

    # -- Provider protocol -----------------------------------------------------------
    def create(self, workload: Workload, idempotency_key: str) -> Observed:
        key = workload.key
        jd = self._dir(key)
        with jd.locked():
            doc = jd.read()
            if doc is not None:
                if doc.get("idempotencyKey") != idempotency_key:
                    raise PermanentError(f"{key.short} already exists (created with another "
                                         "idempotency key); delete it before creating it again")
                return self._step(key, jd, doc) or self._observe_result(key, doc)
            stone = read_json(jd.tombstone())
            if stone and stone.get("idempotencyKey") == idempotency_key:
                return self._observe_result(key, stone)
            spec = parse_workload(workload.manifest)
            now = self._clock()
            doc = {
                "key": str(key), "uid": uuid.uuid4().hex[:12],
                "idempotencyKey": idempotency_key, "specHash": workload.spec_hash,
                "manifest": workload.manifest, "createdAt": now,
                "name": submit.job_name(key, idempotency_key),
                "ratePerSecond": run_rate(spec, self.config.rates),
                "state": spec.state, "submissions": [], "runs": {}, "result": None,
                "intent": {"attempt": 0, "indexes": list(range(spec.completions))},
            }
            try:
                doc["partition"] = submit.partition(workload.manifest.get("spec") or {},
                                                    self.config.partitions,
                                                    self.config.default_partition)
                placed = gpus.placed(spec, self.config.gpu_memory)  # the GRES type it gets
                doc["ratePerSecond"] = run_rate(placed, self.config.rates)
            except submit.Unplaceable as exc:
                doc["intent"] = None
                self._finish(doc, Phase.FAILED, Reason.CAPACITY_UNAVAILABLE, str(exc), now)
                doc["result"]["fix"] = exc.fix
            if spec.state == Phase.CANCELLED:
                doc["intent"] = None
                self._finish(doc, Phase.CANCELLED, None, "created with spec.state Cancelled", now)
            wrapper = submit.script(spec, jd.path, self.config.sandbox)
            jd.prepare(wrapper, self.config.job_user)
            jd.tombstone().unlink(missing_ok=True)
            jd.write(doc)
            return self._step(key, jd, doc) or self._observe_result(key, doc)

    def patch(self, workload: Workload, changes: dict[str, Any]) -> Observed:
        key = workload.key
        jd = self._dir(key)
        spec = parse_workload(workload.manifest)
        fixed = sorted(set(changes.get("spec") or {}) - PATCHABLE)
        if fixed:
            raise PermanentError(f"{key.short}: spec.{', spec.'.join(fixed)} cannot change on a "
                                 "created Job; it must be replaced")
        if not jd.exists():
            raise NotFoundError(f"{key.short} does not exist")
        with jd.locked():
            doc = jd.read()
            if doc is None:
                raise NotFoundError(f"{key.short} does not exist")
            old = parse_workload(doc["manifest"])
            if spec.state == Phase.SUSPENDED and old.state != Phase.SUSPENDED \
                    and not self.scontrol.available and not doc.get("result"):
                raise PermanentError(f"{key.short}: this slurm backend cannot suspend (no "
                                     "scontrol on the reconciler's host; set the provider's "
                                     "scontrol); cancel it or leave it running")
            if old.max_cost is not None and spec.max_cost is not None \
                    and spec.max_cost < old.max_cost:
                raise PermanentError(f"{key.short}: spec.maxCostUSD can only be raised (from "
                                     f"{old.max_cost} to {spec.max_cost})")
            if spec.state != doc["state"]:
                doc["scontrolError"] = None  # a new request; its own failure is reported
            doc.update(manifest=workload.manifest, specHash=workload.spec_hash,
                       state=spec.state)
            if spec.timeout != old.timeout and spec.timeout is not None:
                self._move_time_limits(doc, spec)
            jd.write(doc)
            return self._step(key, jd, doc) or self._observe_result(key, doc)

    def delete(self, key: ResourceKey) -> None:
        jd = self._dir(key)
        jd.tombstone().unlink(missing_ok=True)
        if not jd.path.exists():
            return
        with jd.locked():
            doc = jd.read() or {}
            for sub in doc.get("submissions") or []:
                if sub.get("open"):
                    self.client.cancel(sub["jobId"])
            if (doc.get("intent") or {}).get("tried"):
                self._adopt(doc)
                for sub in doc.get("submissions") or []:
                    self.client.cancel(sub["jobId"])
        jd.remove()

    def get(self, key: ResourceKey) -> Observed | None:
        jd = self._dir(key)
        if not jd.exists():
            return None
        with jd.locked():
            doc = jd.read()
            return None if doc is None else self._step(key, jd, doc)

    def list_owned(self, project: str, instance: str) -> list[Observed]:
        records = owned_records(self.root / project, "job.json", instance,
                                unreadable_is_missing=True)
        return [observed for doc in records
                if (observed := self.get(ResourceKey.parse(doc["key"]))) is not None]

    # -- optional capabilities (read-only: the CLI, the dashboard, the controllers) ----
    def estimate(self, manifest: dict[str, Any]) -> str:
        return estimate(manifest, self.config.rates)

    def output_location(self, key: ResourceKey, output_name: str) -> Path:
        """Where a succeeded Job's declared output is on the shared filesystem."""
        jd = self._dir(key)
        doc = jd.read() or {}
        record = ((doc.get("result") or {}).get("outputs") or {}).get(output_name)
        if record is None:
            raise NotFoundError(f"{key.short} has no stored output {output_name!r}")
        rel = Output(output_name, record["path"]).relative
        return jd.outputs / rel if rel else jd.outputs

    def copy_output(self, key: ResourceKey, output_name: str,
                    dest: Path | str) -> tuple[Path, int, str]:
        """Copy a succeeded Job's output from the shared filesystem to `dest`, checked
        against the SHA-256 recorded when it finished."""
        doc = self._found(key)
        outputs = (doc.get("result") or {}).get("outputs") or {}
        return copy_recorded(self._dir(key).outputs, key, output_name, outputs, dest)

    def logs(self, key: ResourceKey, index: int | None = None,
             follow: bool = False) -> Iterator[str]:
        """What the command of one index's newest attempt wrote: the wrapper sends its
        output to `logs/<index>-<attempt>.log` (`submit.script`). Following ends when
        the attempt recorded its exit status, or the Job its result."""
        self._found(key)
        jd = self._dir(key)
        index = 0 if index is None else index

        def finished(attempt: int | None) -> bool:
            doc = jd.read()
            return doc is None or bool(doc.get("result")) or (
                attempt is not None and jd.exit_status(index, attempt) is not None)

        return read_log(jd.logs, index, follow=follow, finished=finished)

    def log_info(self, key: ResourceKey, index: int = 0) -> LogInfo:
        doc = self._found(key)
        completions = ((doc.get("manifest") or {}).get("spec") or {}).get("completions")
        result = doc.get("result") or {}
        return LogInfo(completions if isinstance(completions, int) and completions > 0 else 1,
                       tuple(attempts(self._dir(key).logs, index)), result.get("phase"))

    def _found(self, key: ResourceKey) -> dict[str, Any]:
        """The Job's record; NotFoundError when it was never created here (or is gone)."""
        try:
            doc = self._dir(key).read()
        except PermanentError as exc:
            raise NotFoundError(str(exc)) from None
        if doc is None:
            raise NotFoundError(f"{key.short} has not run on this slurm backend")
        return doc

    # -- the control step --------------------------------------------------------------
    def _adopt(self, doc: dict[str, Any]) -> bool:
        """A submission that may have happened (crash, lost response): find it by name and
        comment and record it. True when found."""
        intent = doc["intent"]
        key = ResourceKey.parse(doc["key"])
        note = submit.comment(key, doc["idempotencyKey"], doc["uid"], intent["attempt"])
        mine = [t for t in self.client.jobs() if t.name == doc["name"] and t.comment == note]
        if not mine:
            return False
        job_id = min(t.array_job_id or t.job_id for t in mine)
        self._record_submission(doc, intent, job_id)
        return True

    def _record_submission(self, doc: dict[str, Any], intent: dict[str, Any],
                           job_id: int) -> None:
        spec = parse_workload(doc["manifest"])
        doc["submissions"].append({
            "attempt": intent["attempt"], "jobId": job_id, "indexes": intent["indexes"],
            "open": intent["indexes"], "array": spec.completions > 1, "time": self._clock()})
        doc["intent"] = None

    def _submit_intent(self, key: ResourceKey, jd: JobDir, doc: dict[str, Any]) -> None:
        intent = doc["intent"]
        if intent.get("tried") and self._adopt(doc):
            jd.write(doc)
            return
        now = self._clock()
        try:
            spec = gpus.placed(parse_workload(doc["manifest"]), self.config.gpu_memory)
        except submit.Unplaceable as exc:  # gpuMemory changed since the Job was created
            doc["intent"] = None
            self._finish(doc, Phase.FAILED, Reason.CAPACITY_UNAVAILABLE, str(exc), now)
            jd.write(doc)
            return
        remaining = None
        if spec.timeout is not None:
            start = observe.first_start([runs.Run(**r) for r in doc["runs"].values()])
            used = 0.0 if start is None else now - start - observe.suspended_seconds(doc, now)
            remaining = max(1.0, spec.timeout - used)
        body = submit.job_body(
            spec, doc["manifest"].get("spec") or {}, name=doc["name"],
            note=submit.comment(key, doc["idempotencyKey"], doc["uid"], intent["attempt"]),
            job_dir=jd.path, shim=self._shim_dir(), attempt=intent["attempt"],
            indexes=intent["indexes"], partitions=self.config.partitions,
            default_partition=self.config.default_partition, time_limit=remaining)
        intent["tried"] = True
        jd.write(doc)  # a crash from here on is resolved by _adopt, never by a second job
        try:
            job_id = self.client.submit(jd.wrapper.read_text(), body)
        except SlurmRequestError as exc:
            if self._adopt(doc):  # slurmctld made the job and failed it at once
                self.client.cancel(doc["submissions"][-1]["jobId"])
            doc["intent"] = None
            if spec.distributed:  # the platform's words for a gang that cannot be placed
                message, fix = gangfit.refusal(spec, body.get("partition"),
                                               self._partitions())
                self._finish(doc, Phase.FAILED, Reason.CAPACITY_UNAVAILABLE, message, now)
                doc["result"].update(fix=fix, slurm=str(exc))
            else:
                self._finish(doc, Phase.FAILED, Reason.CAPACITY_UNAVAILABLE,
                             f"the cluster cannot run this Job: {exc}", now)
            jd.write(doc)
            return
        self._record_submission(doc, intent, job_id)
        jd.write(doc)

    def _step(self, key: ResourceKey, jd: JobDir, doc: dict[str, Any]) -> Observed | None:
        if doc.get("result"):
            return self._expire_or_observe(key, jd, doc)
        if doc.get("intent"):
            self._submit_intent(key, jd, doc)
            if doc.get("result"):
                self._note_expiry(jd, doc)
                return self._observe_result(key, doc)
        spec = parse_workload(doc["manifest"])
        now = self._clock()
        before = repr(doc)
        all_runs = runs.collect(self.client, jd, doc, now)
        start = observe.first_start(all_runs)
        active = None if start is None else now - start - observe.suspended_seconds(doc, now)
        spent = observe.cost(doc, all_runs)
        capped = spec.max_cost is not None and Decimal(str(round(spent, 6))) >= spec.max_cost
        held = budget_holds.read(jd.path.parent)
        d = decide(spec, all_runs, desired=doc["state"], now=now, active_seconds=active,
                   capped=(capped or held.exceeded) and self.scontrol.available,
                   cancel_requested=bool(doc.get("cancelled")))
        self._for_budget(doc, d, held, capped, now)
        self._act(key, jd, doc, d, spec, now)
        self._track_suspension(doc, d.phase, now)
        if d.terminal:
            phase, reason, message = d.phase, d.reason, d.message
            if phase == Phase.SUCCEEDED:
                try:
                    doc["outputs"] = collect(jd.outputs, spec.outputs)
                except OutputError as exc:
                    phase, reason, message = Phase.FAILED, Reason.INVALID_OUTPUT_PATH, str(exc)
            ends = [r.end for r in all_runs if r.end > 0]
            self._finish(doc, phase, reason, message, max(ends) if ends else now)
        st = observe.status(doc, all_runs, d.completed, d.failures, d.recoveries,
                            jd.unit_count(), now)
        if doc.get("budgetStopTime") and not d.terminal:
            st["stopByTime"] = rfc3339(doc["budgetStopTime"])
        if doc.get("result"):
            doc["result"]["status"] = st
        if repr(doc) != before:
            jd.write(doc)
        if doc.get("result"):
            self._note_expiry(jd, doc)
            return self._observe_result(key, doc)
        reason, message = d.reason, d.message
        if doc.get("scontrolError"):
            reason, message = Reason.SUSPEND_FAILED, doc["scontrolError"]
        return observe.to_observed(key, doc, d.phase, reason, message, st)

    def _act(self, key: ResourceKey, jd: JobDir, doc: dict[str, Any], d: Decision,
             spec: JobSpec, now: float) -> None:
        if d.cancel:
            doc["cancelled"] = True
            for sub in doc["submissions"]:
                if sub.get("open"):
                    self.client.cancel(sub["jobId"])
        if self.scontrol.available and (d.suspend or d.hold or d.resume or d.release):
            try:
                self.scontrol.suspend(d.suspend)
                self.scontrol.hold(d.hold)
                self.scontrol.resume(d.resume)
                self.scontrol.release(d.release)
                doc["scontrolError"] = None
            except ProviderError as exc:  # reported on the Job (SuspendFailed), tried again
                doc["scontrolError"] = str(exc)
        if d.resubmit and not d.terminal:
            for index in d.resubmit:  # a retried index starts fresh; a lost one per continuity
                if index not in d.recovered or spec.recovery.continuity == "Restartable":
                    jd.clear_state(index)
            doc["intent"] = {"attempt": len(doc["submissions"]), "indexes": d.resubmit}
            self._submit_intent(key, jd, doc)

    @staticmethod
    def _for_budget(doc: dict[str, Any], d: Decision, held: budget_holds.Hold, capped: bool,
                    now: float) -> None:
        """A stop for the project's budget (not for the Job's own cap) says so. scontrol
        suspend stops the runs at once, so they are stopped by the time the hold was
        first acted on (status.stopByTime)."""
        if held.exceeded and not capped and d.reason == Reason.MAX_COST_REACHED:
            d.reason, d.message = Reason.BUDGET_EXCEEDED, held.message
            doc["budgetStopTime"] = doc.get("budgetStopTime") or now
        elif not held.exceeded:
            doc.pop("budgetStopTime", None)

    @staticmethod
    def _track_suspension(doc: dict[str, Any], phase: str, now: float) -> None:
        if phase == Phase.SUSPENDED and not doc.get("suspendedSince"):
            doc["suspendedSince"] = now
        elif phase not in (Phase.SUSPENDED, Phase.SUSPENDING) and doc.get("suspendedSince"):
            doc["suspendedSeconds"] = observe.suspended_seconds(doc, now)
            doc["suspendedSince"] = None

    def _partitions(self) -> list[dict[str, Any]]:
        """The cluster's partitions, or none where it cannot say now."""
        try:
            return self.client.partitions()
        except ProviderError:
            return []

    def _finish(self, doc: dict[str, Any], phase: str, reason: str | None,
                message: str | None, when: float) -> None:
        doc["result"] = {"phase": str(phase), "reason": str(reason) if reason else None,
                         "message": message, "completionTime": when,
                         "outputs": doc.pop("outputs", {}), "status": {}}

    def _observe_result(self, key: ResourceKey, doc: dict[str, Any]) -> Observed:
        res = doc["result"]
        st = res.get("status") or observe.status(doc, [], [], 0, 0, 0, res["completionTime"])
        return observe.to_observed(key, doc, res["phase"], res.get("reason"),
                                   res.get("message"), st)

    def expire_finished(self) -> list[ResourceKey]:
        """Remove every finished Job whose ttlSecondsAfterFinished has passed; returns
        their keys. The service calls this on every status tick: nothing reads a Job once
        it finished. Reads only the Job directories' small expiry notes, no Slurm API."""
        removed = []
        now = self._clock()
        for marker in sorted(self.root.glob(f"*/*/{EXPIRY}")):
            due = (read_json(marker) or {}).get("expiresAt")
            jd = JobDir(marker.parent)
            if due is None or now < due or not jd.exists():
                continue
            with jd.locked():
                doc = jd.read()
                if not doc or not doc.get("result"):
                    continue
                key = ResourceKey.parse(doc["key"])
                if self._expire_or_observe(key, jd, doc) is None:
                    removed.append(key)
        return removed

    @staticmethod
    def _expires_at(doc: dict[str, Any]) -> float | None:
        """When a finished Job's TTL passes; None without one."""
        ttl = (doc["manifest"].get("spec") or {}).get("ttlSecondsAfterFinished")
        done = (doc.get("result") or {}).get("completionTime")
        return None if ttl is None or done is None else done + float(ttl)

    def _note_expiry(self, jd: JobDir, doc: dict[str, Any]) -> None:
        """A finished Job with a TTL: note when it passes, once."""
        due = self._expires_at(doc)
        if due is not None and not (jd.path / EXPIRY).exists():
            write_json(jd.path / EXPIRY, {"expiresAt": due})

    def _expire_or_observe(self, key: ResourceKey, jd: JobDir, doc: dict[str, Any]
                           ) -> Observed | None:
        """A finished Job (called under its lock): removed, leaving its tombstone, when
        its TTL has passed; else its result."""
        due = self._expires_at(doc)
        if due is not None and self._clock() >= due:
            stone = jd.tombstone()
            stone.parent.mkdir(parents=True, exist_ok=True)
            write_json(stone, doc)
            jd.remove()
            return None
        self._note_expiry(jd, doc)  # a Job finished as it was created has none yet
        return self._observe_result(key, doc)

    def _move_time_limits(self, doc: dict[str, Any], spec: JobSpec) -> None:
        """A changed timeout moves Slurm's limit of every unfinished submission too."""
        if not self.scontrol.available or spec.timeout is None:
            return
        minutes = submit.time_limit_minutes(spec.timeout)
        for sub in doc.get("submissions") or []:
            if sub.get("open") and minutes:
                self.scontrol.set_time_limit(sub["jobId"], minutes)
