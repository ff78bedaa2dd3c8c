"""`LocalProvider`: the Provider protocol over run directories and detached supervisors.

create writes a complete run directory under a temporary name and renames it into
place (so a Job is never started twice, even by two reconcilers at once), then starts
its supervisor. patch and delete write control.json and wake the supervisor. get reads
status.json; when the supervisor is gone before the Job finished it recovers the Job
(`recovery.decide`). A finished Job whose ttlSecondsAfterFinished has passed is removed,
run directory and all (outputs, logs), by `expire_finished()`, which the service calls
on every status tick, or by a get() that finds it due; a small tombstone stays, so that
creating the same idempotency key again still returns the first Job. Only a Job whose
finish a get() has already reported goes: the reconciler records a Job's final status
from the get() that first shows it finished, so it never finds a Job missing whose end
it did not see.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import time
import uuid
import weakref
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from decimal import Decimal
from pathlib import Path
from typing import Any

from nodus_gitops.floor.errors import ConfigError, NotFoundError, PermanentError, TransientError
from nodus_gitops.floor.identity import (
    ResourceKey,
)
from nodus_gitops.floor.phases import Phase, is_terminal
from nodus_gitops.providers import budget_holds
from nodus_gitops.providers.base import (
    Estimates,
    ExpiresFinished,
    HasEvents,
    HasLogs,
    HasOutputs,
    HoldsBudgets,
    LogInfo,
    Observed,
    Suspends,
    Workload,
)
from nodus_gitops.providers.jsonfiles import exclusive_lock, owned_records, read_json, write_json
from nodus_gitops.providers.local import (
    diskuse,
    jobstate,
    launcher,
    limits,
    procs,
    recovery,
    runfs,
    settings,
)
from nodus_gitops.providers.local.config import LocalConfig
from nodus_gitops.providers.local.cost import estimate, run_rate
from nodus_gitops.providers.local.logs import iter_logs, log_info
from nodus_gitops.providers.local.observe import to_observed
from nodus_gitops.providers.local.outputs import copy_output, output_path
from nodus_gitops.providers.local.rundir import RunDir, check_name, tombstone_path
from nodus_gitops.providers.local.sandbox import Sandbox
from nodus_gitops.providers.local.spec import JobSpec, parse_workload

SUPERVISOR_EXIT_SECONDS = 5.0
# In the run directory of a finished Job with a TTL, once a get() has shown it finished:
# when the TTL passes (`expiresAt`), for `expire_finished` to find without reading Jobs.
EXPIRY = "expiry.json"
# spec fields a created Job can change in place; anything else needs a new Job.
PATCHABLE = frozenset(
    {
        "state",
        "timeout",
        "activeDeadlineSeconds",
        "maxCostUSD",
        "ttlSecondsAfterFinished",
        "expectedDuration",
        "completeByTime",
    }
)


def _retire_all(spares: list[subprocess.Popen]) -> None:
    while spares:
        spare = spares.pop()
        launcher.retire(spare)
        try:
            spare.wait(timeout=5)  # it exits at end of file: reap it
        except subprocess.TimeoutExpired:
            pass


class LocalProvider(Estimates, HasLogs, HasOutputs, HasEvents, Suspends, ExpiresFinished,
                    HoldsBudgets):
    """Runs Jobs as processes on this machine, one detached supervisor per Job."""

    name = "local"
    native_kinds = frozenset({"Job"})

    def __init__(
        self, root: Path, config: LocalConfig | None = None, clock: Callable[[], float] = time.time
    ):
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.config = config or LocalConfig()
        self._clock = clock
        self._settings: dict[str, Any] | None = None
        self._children: dict[str, subprocess.Popen] = {}
        self._spare: list[subprocess.Popen] = []  # at most one pre-started supervisor
        self._retired: list[subprocess.Popen] = []  # spares told to exit, to be reaped
        weakref.finalize(self, _retire_all, self._spare)

    # -- settings resolved once per provider -------------------------------------
    def settings(self) -> dict[str, Any]:
        """The resolved settings new run directories get (resolved once)."""
        if self._settings is None:
            try:
                self._settings = settings.resolve(self.config, self.root)
            except ValueError as exc:
                raise ConfigError(f"local backend: {exc}") from None
        return self._settings

    # -- helpers -----------------------------------------------------------------
    def _run(self, key: ResourceKey) -> RunDir:
        if key.kind != "Job":
            raise PermanentError(
                f"the local backend runs Jobs; {key.short} is driven as Jobs "
                "by the reconciler's controllers"
            )
        try:
            return RunDir.for_key(self.root, key)
        except ValueError as exc:
            raise PermanentError(str(exc)) from None

    def _tombstone(self, key: ResourceKey) -> Path:
        return tombstone_path(self.root, key)

    def _locked(self, run: RunDir) -> AbstractContextManager[None]:
        return exclusive_lock(run.provider_lock)

    def _reap(self) -> None:
        """Collect the exit status of every supervisor of ours that ended (and of retired
        spares), so that none stays a zombie."""
        for path, child in list(self._children.items()):
            if child.poll() is not None:
                del self._children[path]
        self._retired = [p for p in self._retired if p.poll() is None]

    def _reap_finished(self, run: RunDir) -> None:
        """A finished Job's supervisor exits right after its last write: wait for it, so
        that it is not left a zombie once nothing asks about the Job any more."""
        child = self._children.pop(str(run.path), None)
        if child is not None:
            try:
                child.wait(timeout=SUPERVISOR_EXIT_SECONDS)
            except subprocess.TimeoutExpired:
                self._children[str(run.path)] = child  # reaped by a later call

    def _spawn(self, run: RunDir) -> None:
        """Start the run's supervisor: hand it to the pre-started spare when there is one,
        then pre-start the next spare for the next Job."""
        self._reap()
        spare = self._spare.pop() if self._spare else None
        if spare is not None and launcher.hand_over(spare, run):
            proc = spare
        else:
            if spare is not None:
                launcher.retire(spare)
                self._retired.append(spare)
            proc = launcher.spawn(run, self.config.python, self.config.pass_env)
        self._children[str(run.path)] = proc
        if self.config.prestart_supervisor:
            self._spare.append(launcher.start_spare(self.config.python, self.root,
                                                    self.config.pass_env,
                                                    self.settings().get("disk")))

    def _alive(self, run: RunDir) -> bool:
        self._reap()
        return launcher.alive(run)

    # -- Provider protocol ---------------------------------------------------------
    def create(self, workload: Workload, idempotency_key: str) -> Observed:
        key = workload.key
        run = self._run(key)
        existing = self._existing(run, key, idempotency_key)
        if existing is not None:
            return existing
        spec = parse_workload(workload.manifest)
        now = self._clock()
        tmp = RunDir(run.path.parent / f".tmp-{key.name}-{uuid.uuid4().hex[:8]}")
        try:
            tmp.path.mkdir(parents=True)
            sandbox = Sandbox.from_dict(self.settings()["sandbox"])
            tmp.make_dirs()
            write_json(
                tmp.manifest,
                {
                    "key": str(key),
                    "uid": uuid.uuid4().hex[:12],
                    "idempotencyKey": idempotency_key,
                    "specHash": workload.spec_hash,
                    "manifest": workload.manifest,
                    "createdAt": now,
                    "ratePerSecond": run_rate(spec, self.config.rates),
                    "rates": dataclasses.asdict(self.config.rates),
                },
            )
            write_json(tmp.settings, self.settings())
            write_json(tmp.control, self._control(spec, 0))
            st = jobstate.initial(now)
            st.update(image=spec.image, sandbox=sandbox.type)
            write_json(tmp.status, st)
            tmp.event("Created", f"created with idempotency key {idempotency_key}", now=now)
            os.rename(tmp.path, run.path)
        except OSError as exc:
            shutil.rmtree(tmp.path, ignore_errors=True)
            if run.exists():  # another reconciler won the race
                existing = self._existing(run, key, idempotency_key)
                if existing is not None:
                    return existing
            raise TransientError(f"cannot create the run directory of {key.short}: {exc}") from None
        self._tombstone(key).unlink(missing_ok=True)
        self._spawn(run)
        return self._observe(run, key)

    def _existing(self, run: RunDir, key: ResourceKey, idempotency_key: str) -> Observed | None:
        if run.exists():
            doc = read_json(run.manifest)
            if doc.get("idempotencyKey") != idempotency_key:
                raise PermanentError(
                    f"{key.short} already exists (created with another "
                    "idempotency key); delete it before creating it again"
                )
            return self.get(key) or self._from_tombstone(key, idempotency_key)
        return self._from_tombstone(key, idempotency_key)

    def _from_tombstone(self, key: ResourceKey, idempotency_key: str) -> Observed | None:
        stone = read_json(self._tombstone(key))
        if stone and stone.get("idempotencyKey") == idempotency_key:
            return to_observed(key, stone["doc"], stone["status"], self._clock())
        return None

    @staticmethod
    def _control(spec: JobSpec, generation: int) -> dict[str, Any]:
        return {
            "generation": generation,
            "state": spec.state,
            "timeout": spec.timeout,
            "maxCostUSD": None if spec.max_cost is None else str(spec.max_cost),
        }

    def patch(self, workload: Workload, changes: dict[str, Any]) -> Observed:
        key = workload.key
        run = self._run(key)
        if not run.exists():
            raise NotFoundError(f"{key.short} does not exist")
        spec = parse_workload(workload.manifest)
        fixed = sorted(set(changes.get("spec") or {}) - PATCHABLE)
        if fixed:
            raise PermanentError(
                f"{key.short}: spec.{', spec.'.join(fixed)} cannot change on a "
                "created Job; it must be replaced"
            )
        with self._locked(run):
            control = read_json(run.control) or {}
            old_cap = control.get("maxCostUSD")
            if (
                old_cap is not None
                and spec.max_cost is not None
                and spec.max_cost < Decimal(old_cap)
            ):
                raise PermanentError(
                    f"{key.short}: spec.maxCostUSD can only be raised "
                    f"(from {old_cap} to {spec.max_cost})"
                )
            doc = read_json(run.manifest)
            doc.update(manifest=workload.manifest, specHash=workload.spec_hash)
            write_json(run.manifest, doc)
            generation = int(control.get("generation", 0)) + 1
            write_json(run.control, self._control(spec, generation))
            if spec.state != control.get("state"):
                run.event("StateRequested", f"spec.state is now {spec.state}")
                if spec.state == Phase.SUSPENDED and spec.recovery.continuity == "Ephemeral":
                    run.event(
                        "StateLost",
                        "recovery.continuity is Ephemeral: suspending restarts "
                        "the Job from the beginning when it resumes",
                        "Warning",
                    )
            if launcher.signal_supervisor(run, signal.SIGUSR1):
                self._await_ack(run, generation)
        return self.get(key) or self._observe(run, key)

    @staticmethod
    def _await_ack(run: RunDir, generation: int, timeout: float = 1.0) -> None:
        """Give the supervisor a moment to take the change, so that the Observed a patch
        returns already shows its effect (Suspending, a moved timeoutTime)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if (read_json(run.status) or {}).get("generation", -1) >= generation:
                return
            time.sleep(0.005)

    def delete(self, key: ResourceKey) -> None:
        run = self._run(key)
        self._tombstone(key).unlink(missing_ok=True)
        if not run.path.exists():
            return
        with self._locked(run):
            st = read_json(run.status) or {}
            if run.exists() and not is_terminal(st.get("phase")) and self._alive(run):
                control = read_json(run.control) or {}
                control.update(
                    state=Phase.CANCELLED.value, generation=int(control.get("generation", 0)) + 1
                )
                write_json(run.control, control)
                launcher.signal_supervisor(run, signal.SIGUSR1)
                deadline = time.monotonic() + self.config.suspend_grace_seconds + 5
                while self._alive(run) and time.monotonic() < deadline:
                    time.sleep(0.02)
                launcher.kill_supervisor(run)
            elif self._alive(run):
                self._await_exit(run)  # finished: it is unmounting the Job's filesystem
            self._kill_leftovers(read_json(run.status) or {})
            self._release_files(run)
        shutil.rmtree(run.path, ignore_errors=True)

    def _await_exit(self, run: RunDir) -> None:
        deadline = time.monotonic() + SUPERVISOR_EXIT_SECONDS
        while self._alive(run) and time.monotonic() < deadline:
            time.sleep(0.01)

    def _release_files(self, run: RunDir) -> None:
        """Before a run directory goes: unmount the Job's filesystem (every mount made
        to read it), and drop what it had registered of the disk."""
        runfs.detach(run.files)
        uid = (read_json(run.manifest) or {}).get("uid")
        if uid:
            diskuse.release(self.root, uid)

    def get(self, key: ResourceKey) -> Observed | None:
        self._reap()
        run = self._run(key)
        if not run.exists():
            return None
        st = read_json(run.status)
        if st is not None and is_terminal(st["phase"]):
            self._reap_finished(run)
            if self._expiry_reported(run, st) and self._expire(run, key):
                return None
            return self._observe(run, key, st)
        if self._alive(run):
            return self._observe(run, key, st)
        with self._locked(run):
            return self._revive(run, key)

    def list_owned(self, project: str, instance: str) -> list[Observed]:
        return [observed for doc in owned_records(self.root / project, "manifest.json", instance)
                if (observed := self.get(ResourceKey.parse(doc["key"]))) is not None]

    def close(self) -> None:
        """Stop the pre-started spare supervisor and reap the retired ones; the Jobs'
        own supervisors are detached and keep running."""
        _retire_all(self._spare)
        self._reap()

    # -- optional capabilities (read-only: the CLI, the dashboard, the controllers) ----
    def estimate(self, manifest: dict[str, Any]) -> str:
        """The cost estimate the plan shows: the rate card times expectedDuration or
        timeout ("unknown" without either)."""
        return estimate(manifest, self.config.rates)

    def output_location(self, key: ResourceKey, output_name: str) -> Path:
        """Where a finished Job's declared output is stored (a Pipeline stage's input)."""
        return output_path(self.root, key, output_name)

    def events(self, key: ResourceKey) -> list[dict[str, Any]]:
        return self._run(key).read_events()

    def logs(
        self, key: ResourceKey, index: int | None = None, follow: bool = False
    ) -> Iterator[str]:
        return iter_logs(self.root, key, index, follow)

    def log_info(self, key: ResourceKey, index: int = 0) -> LogInfo:
        return log_info(self.root, key, index)

    def copy_output(
        self, key: ResourceKey, output_name: str, dest: Path | str
    ) -> tuple[Path, int, str]:
        return copy_output(self.root, key, output_name, dest)

    def can_suspend(self) -> bool:
        return True  # the supervisor stops and resumes the Job's processes

    def hold_budget(self, project: str, exceeded: bool, message: str) -> None:
        """Record the project's hold where its Jobs' supervisors read it on every tick
        (they suspend with BudgetExceeded and start nothing while it lasts), and wake
        them when it changed, so that they act on it now."""
        try:
            project_dir = self.root / check_name(project, "project")
        except ValueError as exc:
            raise PermanentError(str(exc)) from None
        if not budget_holds.write(project_dir, exceeded, message):
            return
        for entry in sorted(project_dir.iterdir()):
            if not entry.name.startswith("."):
                launcher.signal_supervisor(RunDir(entry), signal.SIGUSR1)

    # -- status, recovery and expiry -----------------------------------------------
    def _observe(self, run: RunDir, key: ResourceKey, st: dict[str, Any] | None = None) -> Observed:
        doc = read_json(run.manifest)
        return to_observed(key, doc, st if st is not None else read_json(run.status), self._clock())

    def expire_finished(self) -> list[ResourceKey]:
        """Remove every finished Job whose ttlSecondsAfterFinished has passed (and whose
        finish a get() has shown); returns their keys. The service calls this on every
        status tick: nothing reads a Job once it finished."""
        removed = []
        now = self._clock()
        for marker in sorted(self.root.glob(f"*/*/{EXPIRY}")):
            due = (read_json(marker, unreadable_is_missing=True) or {}).get("expiresAt")
            if due is None or now < due:
                continue
            run = RunDir(marker.parent)
            doc = read_json(run.manifest, unreadable_is_missing=True)
            if doc and self._expire(run, ResourceKey.parse(doc["key"])):
                removed.append(ResourceKey.parse(doc["key"]))
        return removed

    @staticmethod
    def _expires_at(doc: dict[str, Any], st: dict[str, Any]) -> float | None:
        """When a finished Job's TTL passes; None without one."""
        ttl = ((doc.get("manifest") or {}).get("spec") or {}).get("ttlSecondsAfterFinished")
        done = st.get("completionTime")
        if ttl is None or done is None or not is_terminal(st.get("phase")):
            return None
        return done + float(ttl)

    def _expiry_reported(self, run: RunDir, st: dict[str, Any]) -> bool:
        """Whether an earlier get() already showed this finished Job with its TTL. The
        first one does not remove it, whatever its TTL: the reconciler takes the Job's
        final status from it. It leaves the marker that `expire_finished` looks for."""
        if run.path.joinpath(EXPIRY).exists():
            return True
        due = self._expires_at(read_json(run.manifest) or {}, st)
        if due is not None:
            try:
                write_json(run.path / EXPIRY, {"expiresAt": due})
            except FileNotFoundError:
                pass  # removed meanwhile
        return False

    def _expire(self, run: RunDir, key: ResourceKey) -> bool:
        """Remove the finished Job when its TTL has passed, leaving its tombstone; True
        when this call removed it."""
        try:
            with self._locked(run):  # not while a patch or a delete changes it
                doc = read_json(run.manifest)
                st = read_json(run.status) or {}
                due = None if doc is None else self._expires_at(doc, st)
                if due is None or self._clock() < due:
                    return False
                stone = self._tombstone(key)
                stone.parent.mkdir(parents=True, exist_ok=True)
                write_json(stone, {"idempotencyKey": doc.get("idempotencyKey"), "doc": doc,
                                   "status": st})
                self._await_exit(run)
                self._release_files(run)
                shutil.rmtree(run.path, ignore_errors=True)
        except FileNotFoundError:  # removed meanwhile (deleted, or by another reader)
            return False
        return True

    @staticmethod
    def _kill_leftovers(st: dict[str, Any]) -> None:
        for rec in (st.get("runs") or {}).values():
            procs.kill_recorded(rec.get("initPid"), rec.get("initTicks"))  # its namespace
            procs.kill_recorded(rec.get("pid"), rec.get("ticks"))
            if rec.get("cgroup"):
                limits.remove_cgroup(Path(rec["cgroup"]))

    def _revive(self, run: RunDir, key: ResourceKey) -> Observed:
        """The supervisor is gone and the Job is not finished (called under the lock)."""
        st = read_json(run.status)
        if is_terminal(st["phase"]) or self._alive(run) or not launcher.lock_free(run):
            return self._observe(run, key, st)
        doc = read_json(run.manifest)
        spec = parse_workload(doc["manifest"])
        control = read_json(run.control) or {}
        decision = recovery.decide(st, spec, control.get("state", spec.state))
        self._kill_leftovers(st)
        now = self._clock()
        if decision.action == "cancel":
            jobstate.finish(st, Phase.CANCELLED, now, message=decision.message)
        elif decision.action == "fail":
            st.update(recoveries=decision.recoveries or st.get("recoveries", 0))
            jobstate.finish(st, Phase.FAILED, now, decision.reason, decision.message)
            run.event("Failed", decision.message or "", "Warning", now=now)
        elif decision.action == "recover":
            st.update(
                phase=Phase.RECOVERING.value,
                recoveries=decision.recoveries,
                shortRecoveries=decision.short_recoveries,
                segmentStart=None,
                lostIndexes=list(decision.lost_indexes),
                runs={},
                active=0,
            )
            run.event("CapacityLost", decision.message or "", "Warning", now=now)
        else:
            st["restarts"] = st.get("restarts", 0) + 1
            run.event("SupervisorRestarted", "the supervisor is gone; nothing was running", now=now)
        if decision.action in ("cancel", "fail", "recover", "restart"):
            write_json(run.status, st)
        if decision.action in ("cancel", "fail"):  # finished here, without a supervisor
            runfs.detach(run.files)
            diskuse.release(self.root, doc["uid"])
        if decision.action in ("recover", "restart"):
            self._spawn(run)
        return self._observe(run, key, st)
