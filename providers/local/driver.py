"""One Job's state machine, driven by its supervisor process one `tick()` at a time.

Each pass reads control.json, reaps finished runs, accrues cost, enforces the desired
state, timeout, queue timeout, cost cap and disk cap, starts runs (completions,
parallelism, GPU slots, free disk space), settles finished stops and success
(outputs), and writes status.json when something changed, or every second while runs
are active, as a heartbeat. Between passes the supervisor pumps the runs' output into
their logs (`log_pipes`).

Before its first run the Job gets its files (`attach`): its own filesystem (`runfs`)
or a plain directory, registered with what it may still write so that the Jobs
together leave minFreeBytes free (`diskuse`). When the Job is finished the supervisor
unmounts it (`close`).
"""

from __future__ import annotations

import bisect
import os
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

from nodus_gitops.floor.phases import Phase, Reason, is_terminal
from nodus_gitops.providers import budget_holds
from nodus_gitops.providers.jsonfiles import read_json, write_json
from nodus_gitops.providers.local import (
    diskuse,
    gang,
    gangspace,
    jobstate,
    launch,
    limits,
    procs,
    provisioning,
    runfs,
    runs,
    suspension,
    usernet,
)
from nodus_gitops.providers.local.config import RateCard
from nodus_gitops.providers.local.cost import run_rate
from nodus_gitops.providers.local.placement import Placement
from nodus_gitops.providers.local.rundir import KEPT_ATTEMPTS, RunDir
from nodus_gitops.providers.local.sandbox import Sandbox, checkpoint_points
from nodus_gitops.providers.local.spec import STATE_MOUNT, compact_indexes, parse_job

HEARTBEAT_SECONDS = 1.0
# What a program prints when a write found no space: in a run's own filesystem, the
# cap (the space it had may be free again once the run ended and closed its files).
NO_SPACE = ("No space left on device", "[Errno 28]", "ENOSPC")
_STOP_PHASE = {"suspend": Phase.SUSPENDING, "cancel": Phase.CANCELLING}


class JobDriver:
    """The Job's state machine; `tick(now)` is one pass, the supervisor's loop calls it."""

    def __init__(self, run: RunDir, now: float):
        self.run = run
        doc = read_json(run.manifest)
        self.uid = doc["uid"]
        self.settings: dict[str, Any] = read_json(run.settings)
        self.spec = parse_job(doc["manifest"])
        self.rate = float(doc["ratePerSecond"])  # one running index, from the rate card
        # The rate card the Job was created with, to price the GPU slots each run gets.
        self.rates = RateCard.from_dict(doc["rates"]) if doc.get("rates") else None
        self.grace = float(self.settings["graceSeconds"])
        parent = self.settings.get("cgroupParent")
        self.cgroup_parent = Path(parent) if parent else None
        self.st: dict[str, Any] = read_json(run.status) or jobstate.initial(now)
        self.completed: set[int] = set(self.st["completedIndexes"])
        self.pending = [i for i in range(self.spec.completions) if i not in self.completed]
        self.active: dict[int, runs.Run] = {}
        self.ending_nets: list[usernet.Slirp] = []  # of ended runs, released, not reaped yet
        self.gang = gang.Gang(self) if self.spec.distributed else None  # ranks, not indexes
        self.stop: dict[str, Any] | None = None
        self.stop_exits: list[runs.Exit] = []
        self.place: Placement | None = None
        self.sandbox = Sandbox.from_dict(self.settings["sandbox"])
        self.max_output = int(self.settings["maxOutputBytes"])
        self.root = Path(self.settings["root"])
        self.disk: dict[str, Any] = self.settings.get("disk") or {
            "type": "polled", "problem": "the Job was created before Jobs had filesystems"}
        self.own_fs = self.disk["type"] == "filesystem"
        self.attached = False
        self.usable = 0  # what the Job's own filesystem holds for it
        self.inodes = 0  # the inodes it used when it was new
        self.fs_dev: int | None = None  # its device, once mounted
        self.meter = diskuse.Meter(self._job_dirs(), self._fs_used if self.own_fs else None,
                                   cap=self.max_output)
        self.desired = self.spec.state
        self.timeout = self.spec.timeout
        self.max_cost = self.spec.max_cost
        self.budget = budget_holds.Watch(run.path.parent)  # the project's budget hold
        self.control_sig: tuple | None = None
        self.last_accrual = now
        self.last_write = 0.0
        self.dirty = True
        self.gpu_wait_noted = False
        self.gone = False  # its run directory was removed under it
        if self.st["phase"] == Phase.RECOVERING:
            self._recovered(now)
        if self.cgroup_parent is not None:  # groups left by a supervisor that was killed
            for stale in self.cgroup_parent.glob(f"{self.uid}-*"):
                limits.remove_cgroup(stale)

    # -- helpers -----------------------------------------------------------------
    def event(self, reason: str, message: str, warning: bool = False) -> None:
        self.run.event(reason, message, "Warning" if warning else "Normal")

    def _job_dirs(self) -> list[Path]:
        """What the Job writes, as the disk cap counts it."""
        run = self.run
        return [run.outputs, run.run_outputs, run.state, run.work, run.units, run.source,
                run.gang_shm]

    @property
    def checkpoints(self) -> int:
        return len(self.spec.recovery.checkpoint_paths)

    def _clear_state(self, indexes: list[int]) -> None:
        for i in indexes:
            for path in self.run.checkpoint_dirs(i, self.checkpoints):
                jobstate.remove_tree(path)

    def _drop_run_outputs(self, index: int) -> None:
        """What runs of `index` that did not succeed wrote: never stored."""
        for path in self.run.run_outputs.glob(f"{index}-*"):
            jobstate.remove_tree(path)

    def _store_outputs(self, run: runs.Run) -> None:
        """A succeeded run's outputs join the Job's."""
        from nodus_gitops.providers.local.outputs import merge

        replaced = merge(self.run.run_outputs_for(run.index, run.attempt), self.run.outputs)
        if replaced:
            shown = ", ".join(replaced[:5]) + (" ..." if len(replaced) > 5 else "")
            self.event("OutputReplaced", f"index {run.index} (attempt {run.attempt}) wrote "
                       f"outputs an earlier index had stored, and replaced them: {shown}",
                       warning=True)

    def _recovered(self, now: float) -> None:
        lost = self.st.pop("lostIndexes", [])
        counts = self.st.setdefault("indexRecoveries", {})
        for i in lost:  # each lost index used up one of its recovery.maxAttempts
            counts[str(i)] = counts.get(str(i), 0) + 1
        if self.spec.recovery.continuity == "Restartable":
            self._clear_state(lost)
        restart = self.spec.recovery.continuity == "Restartable"
        where = "from the beginning" if restart else "from the last saved state"
        self.event("Recovering", f"capacity was lost; resuming indexes {lost or 'none'} {where}")
        self.st["runs"] = {}

    def _fail(self, reason: Reason, message: str, now: float) -> None:
        if self.active:
            self.begin_stop("fail", now, reason, message)
        else:
            self._finish(Phase.FAILED, now, reason, message)

    def _over_cap(self, used: int) -> str:
        held = self.meter.deleted if not self.own_fs else 0
        return (f"the Job wrote {used} bytes to its outputs, state and work directories"
                + (f" ({held} of them in {self.meter.deleted_files} files its processes "
                   "deleted while still open)" if held else "")
                + f", more than the local backend's maxOutputBytes ({self.max_output})")

    def _fs_used(self) -> int:
        if not self.attached:
            return 0
        try:
            return runfs.used(self.run.files, self.usable, self.inodes)
        except OSError:
            return 0

    def _ran_out_of_space(self, run: runs.Run) -> bool:
        """A run of a Job with its own filesystem said a write found no space."""
        if not self.own_fs:
            return False
        tail = runs.log_tail(run.log.path)
        return any(marker in tail for marker in NO_SPACE)

    def _finish(self, phase: Phase, now: float, reason: str | None = None,
                message: str | None = None) -> None:
        jobstate.finish(self.st, phase, now, reason, message)
        if self.gang:
            self.gang.empty_shm()
        self.pending = []
        self.dirty = True
        self.event(phase.value, message or phase.value, warning=phase is Phase.FAILED)

    @property
    def gpus(self):  # noqa: ANN201 - the gpus module, imported only by Jobs that use GPUs
        from nodus_gitops.providers.local import gpus

        return gpus

    @property
    def slots(self) -> list:
        return [self.gpus.Slot.from_dict(s) for s in self.settings["slots"]]

    @property
    def phase(self) -> str:
        return self.st["phase"]

    def capped(self) -> bool:
        return self.max_cost is not None and Decimal(str(self.st["cost"])) >= self.max_cost

    def budget_held(self) -> bool:
        """The Job's project spent its budget (the reconciler placed a hold)."""
        return self.budget.current().exceeded

    def hold_for_budget(self, now: float) -> None:
        """Save and suspend as at the cost cap, with reason BudgetExceeded; the runs are
        stopped by status.stopByTime (the end of the grace period), saved or not."""
        self.begin_stop("suspend", now, Reason.BUDGET_EXCEEDED, self.budget.current().message)
        assert self.stop is not None
        self.st["stopByTime"] = self.stop["deadline"]

    # -- one pass ------------------------------------------------------------------
    def tick(self, now: float) -> None:
        self.read_control()
        if self.gone:
            return
        self.reap(now)
        self.reap_networks()
        if not is_terminal(self.phase):
            self.accrue(now)
            self.enforce(now)
        if not is_terminal(self.phase):
            self.schedule(now)
        if not is_terminal(self.phase):
            self.settle(now)
        self.flush(now)

    def _stop_preparing(self) -> tuple[Phase, str | None, str] | None:
        """Why the Job must stop while it is prepared (a fetch can take minutes): it was
        cancelled, or its timeout (counted from its first Provisioning) passed."""
        now = time.time()
        self.read_control()
        if self.desired == Phase.CANCELLED:
            return Phase.CANCELLED, None, "cancelled: spec.state is Cancelled"
        deadline = jobstate.timeout_time(self.st, self.timeout, now)
        if deadline is not None and now >= deadline:
            return (Phase.FAILED, Reason.DEADLINE_EXCEEDED,
                    f"the Job ran longer than its timeout of {self.timeout:g}s")
        return None

    def read_control(self) -> None:
        try:
            s = os.stat(self.run.control)
        except FileNotFoundError:
            # the run directory was removed by hand (rm -r, a test's cleanup): the Job is gone
            self.gone = not self.run.manifest.exists()
            return
        sig = (s.st_mtime_ns, s.st_ino, s.st_size)
        if sig == self.control_sig:
            return
        self.control_sig = sig
        ctl = read_json(self.run.control) or {}
        previous = self.desired
        self.desired = ctl.get("state", self.desired)
        self.timeout = ctl.get("timeout", self.timeout)
        cap = ctl.get("maxCostUSD", None if self.max_cost is None else str(self.max_cost))
        self.max_cost = Decimal(cap) if cap is not None else None
        if self.desired == Phase.SUSPENDED and previous != Phase.SUSPENDED:
            self.st["suspendFailures"], self.st["nextSuspendTry"] = 0, None
        if self.desired == Phase.RUNNING:
            self.st["nextSuspendTry"] = None
        self.st["generation"] = ctl.get("generation", 0)
        self.dirty = True

    def reap(self, now: float) -> None:
        for index, run in list(self.active.items()):
            if run.poll() is None:
                continue
            self.st["units"] += run.count_units()
            ex = run.finish()
            del self.active[index]
            if run.slirp is not None:
                self.ending_nets.append(run.slirp)
            self.dirty = True
            if self.attached:  # its log is on the disk now: only the running ones may grow
                diskuse.note_logs(self.root, self.uid, diskuse.log_bytes(
                    len(self.active), int(self.settings["maxLogBytes"])))
            if not ex.whole:
                self.event("RunNotEnded", f"index {index} (attempt {run.attempt}): processes of "
                           "the run were still there after SIGKILL", warning=True)
            if self.gang and self.gang.reaped(run, ex, now):
                continue
            if run.stopping:
                self.stop_exits.append(ex)
                self._drop_run_outputs(index)
                bisect.insort(self.pending, index)
                continue
            if ex.ok:
                self._store_outputs(run)
                self.completed.add(index)
                self.st["succeeded"] += 1
                continue
            self.st["failed"] += 1
            self._drop_run_outputs(index)
            what = f"{self._run_name(index)} (attempt {run.attempt}) {ex.describe()}"
            self.event("RunFailed", what, warning=True)
            used = self.meter.measure(now)
            if used > self.max_output:  # it failed writing past the cap (a file is capped)
                self._fail(Reason.OUTPUT_LIMIT_EXCEEDED, self._over_cap(used), now)
            elif self._ran_out_of_space(run):
                self._fail(Reason.OUTPUT_LIMIT_EXCEEDED,
                           f"{what}: a write found no space left; the Job's filesystem holds "
                           f"its outputs, state and work directories up to the local "
                           f"backend's maxOutputBytes ({self.max_output}) (a full /tmp, at "
                           "most resources.memory, says the same)", now)
            elif ex.oom:
                limit = self.spec.memory_limit or 0
                self._fail(Reason.OOM_KILLED, f"{what}: resources.memory is {limit >> 20}Mi", now)
            elif self.st["failed"] > self.spec.backoff_limit:
                self._fail(Reason.BACKOFF_LIMIT_EXCEEDED,
                           f"{self.st['failed']} runs failed, more than backoffLimit "
                           f"{self.spec.backoff_limit}; the last: {what}", now)
            else:  # a retried index starts fresh: no checkpoint of the failed run
                self._clear_state([index])
                bisect.insort(self.pending, index)
            if self.gang:
                self.gang.failed(run, now)

    def _rate_of(self, lease: runs.Lease | None) -> float:
        """One run's USD per second: its GPUs cost what the slots it was placed on cost,
        so a request that names no type pays for the type it got."""
        if lease is None or self.rates is None:
            return self.rate
        return run_rate(self.spec, self.rates, [slot.type for slot in lease.slots])

    def accrue(self, now: float) -> None:
        dt, self.last_accrual = max(0.0, now - self.last_accrual), now
        if self.active and dt:
            self.st["cost"] += dt * sum(run.rate for run in self.active.values())
            self.st["costUSD"] = jobstate.format_usd(round(self.st["cost"], 6))

    def enforce(self, now: float) -> None:
        st = self.st
        if self.stop and now >= self.stop["deadline"]:
            for run in self.active.values():
                if not run.killed:
                    run.kill()
        elif self.stop:
            for run in self.active.values():
                run.pass_on_term()
        if self.desired == Phase.CANCELLED:
            if not self.stop or self.stop["kind"] != "cancel":
                self.begin_stop("cancel", now, message="cancelled: spec.state is Cancelled")
            return
        if self.phase == Phase.SUSPENDED:
            if self.desired != Phase.SUSPENDED and not self.capped() and not self.budget_held():
                self.resume(now)
            return
        deadline = jobstate.timeout_time(st, self.timeout, now)
        stoppable = not self.stop or self.stop["kind"] == "suspend"
        if deadline is not None and now >= deadline and stoppable:
            self.begin_stop("timeout", now, Reason.DEADLINE_EXCEEDED,
                            f"the Job ran longer than its timeout of {self.timeout:g}s")
            return
        qt = self.spec.queue_timeout
        waiting = self.phase == Phase.QUEUED and not self.active and self.pending
        if waiting and qt is not None and now - st["queuedSince"] >= qt:
            self._finish(Phase.FAILED, now, Reason.CAPACITY_UNAVAILABLE,
                         self._queue_timeout_message(qt))
            return
        if self.active and not self.stop and self.meter.due(now):
            used = self.meter.measure(now)
            if not self.own_fs:
                diskuse.note_used(self.root, self.uid, used)
            if used > self.max_output:
                self.begin_stop("fail", now, Reason.OUTPUT_LIMIT_EXCEEDED, self._over_cap(used))
                return
        if self.stop:
            return
        if self.capped() and (self.active or self.pending):
            self.begin_stop("suspend", now, Reason.MAX_COST_REACHED,
                            f"costUSD {st['costUSD']} reached maxCostUSD {self.max_cost}")
        elif self.budget_held() and (self.active or self.pending):
            self.hold_for_budget(now)
        elif self.desired == Phase.SUSPENDED and suspension.allowed(self.st, self.settings, now):
            self.begin_stop("suspend", now, message="suspended: spec.state is Suspended")

    def begin_stop(self, kind: str, now: float, reason: str | None = None,
                   message: str | None = None) -> None:
        deadline = now + self.grace
        if self.stop:
            deadline = min(deadline, self.stop["deadline"])
        self.stop = {"kind": kind, "reason": reason, "message": message, "deadline": deadline}
        if kind in _STOP_PHASE:
            self.st["phase"] = _STOP_PHASE[kind].value
        for run in self.active.values():
            run.terminate(kind, now)
        if kind == "suspend" and reason and self.spec.recovery.continuity == "Ephemeral":
            self.event("StateLost", "recovery.continuity is Ephemeral: the Job keeps no state "
                       "and restarts from the beginning when resumed", warning=True)
        self.dirty = True

    def resume(self, now: float) -> None:
        suspension.resume(self.st, now)
        self.st["stopByTime"] = None
        if self.spec.recovery.continuity in ("Restartable", "Ephemeral"):
            self._clear_state(self.pending)
        self.event("Resumed", f"resuming indexes {compact_indexes(self.pending)}")
        self.dirty = True

    def schedule(self, now: float) -> None:
        if self.stop or self.phase in (Phase.SUSPENDED, Phase.SUSPENDING) or self.capped() \
                or self.budget_held():
            return
        if self.gang:
            self.gang.schedule(now)
            return
        while self.pending and len(self.active) < self.spec.parallelism:
            if not self._disk_allows(now):
                return
            lease = None
            if self.spec.gpu:
                lease = self.gpus.try_acquire(Path(self.settings["locksDir"]), self.slots,
                                              self.spec.gpu)
                if lease is None:
                    self._wait_for_gpu(now)
                    return
            if not self.attached and not self.attach(now):
                if lease:
                    lease.release()
                return
            if self.place is None and not self.prepare(now):
                if lease:
                    lease.release()
                return
            self.spawn(self.pending.pop(0), lease, now)

    def _still_writable(self) -> int:
        """What this Job may still write to the host's disk."""
        if self.own_fs:
            if self.run.image.exists():
                return runfs.growth(self.run.image)
            return int(self.disk["imageBytes"])
        return max(0, self.max_output - (self.meter.last if self.attached else 0))

    def _queue_timeout_message(self, qt: float) -> str:
        """What the Job waited for when placement.queueTimeout ran out: room on the disk
        (DiskPressure), else a GPU slot."""
        low = next((c for c in self.st["conditions"] if c["type"] == "DiskPressure"
                    and c["status"] == "True"), None)
        if low is not None:
            return (f"the disk had no room for a new run within placement.queueTimeout "
                    f"{qt:g}s ({low.get('message')})")
        wanted = self.spec.gpu.describe() if self.spec.gpu else "the request"
        wanted = self.gang.wanted() if self.gang else wanted
        slots = ", ".join(s.type for s in self.slots) or "none"
        return (f"no GPU slot here fits {wanted} within placement.queueTimeout {qt:g}s "
                f"(slots: {slots})")

    def _disk_allows(self, now: float) -> bool:
        """New runs wait while the runs' file system, less what the unfinished Jobs and
        this one may still write, would have less free space than the floor, so that
        the state database never competes with Job files for the last bytes."""
        logs = diskuse.log_bytes(len(self.active) + 1, int(self.settings["maxLogBytes"]))
        allowed, changed, began = diskuse.floor_condition(
            self.st, self.run.path, int(self.settings["minFreeBytes"]), now,
            diskuse.reserved(self.root, exclude=self.uid), self._still_writable() + logs)
        if allowed and self.attached:
            diskuse.note_logs(self.root, self.uid, logs)
        if began:
            self.event("WaitingForDisk", began, warning=True)
        if not allowed and not self.active and self.phase != Phase.QUEUED:
            self.st.update(phase=Phase.QUEUED.value, queuedSince=now)
            changed = True
        self.dirty = self.dirty or changed
        return allowed

    def _wait_for_gpu(self, now: float) -> None:
        unmet = self.gpus.unplaceable(self.slots, self.spec.gpu)
        if unmet and not self.active:  # no slot here will ever do: never a silent wait
            self._finish(Phase.FAILED, now, Reason.CAPACITY_UNAVAILABLE, unmet[0])
            self.st["fix"] = unmet[1]
            return
        if not self.active and self.phase != Phase.QUEUED:
            self.st.update(phase=Phase.QUEUED.value, queuedSince=now)
            self.dirty = True
        if not self.gpu_wait_noted:
            self.gpu_wait_noted = True
            self.event("WaitingForCapacity", f"waiting for {self.spec.gpu.describe()}")

    def attach(self, now: float) -> bool:
        """The Job's files, before its first run (once per supervisor): checked against
        the disk's room and registered under one lock, then made and mounted. False
        when the Job must wait (DiskPressure) or failed."""
        how = "mounted"
        with diskuse.reserving(self.root):
            if not self._disk_allows(now):
                return False
            if self.own_fs:
                try:
                    me = os.getpid()
                    how = runfs.prepare(self.run.disk, self.disk, self.root,
                                        (me, procs.start_ticks(me)))
                    if how != "mounted":
                        self.event("FilesystemCreated", runfs.describe(self.disk))
                    self.fs_dev = os.stat(self.run.files).st_dev
                    rec = runfs.record(self.run.disk) or {}
                    self.usable = int(rec.get("usableBytes", self.disk["usableBytes"]))
                    self.inodes = int(rec.get("inodesUsed", 0))
                except (OSError, runfs.RunFsError) as exc:
                    if self.run.image.exists():  # its files are in there: never lose them
                        self._finish(Phase.FAILED, now, Reason.STORAGE_UNAVAILABLE,
                                     f"cannot mount the Job's filesystem: {exc}")
                        return False
                    self.own_fs = False
                    self.meter = diskuse.Meter(self._job_dirs(), cap=self.max_output)
                    self.disk = {"type": "polled",
                                 "problem": f"its filesystem could not be made: {exc}"}
                    self.event("FilesystemUnavailable", runfs.describe(self.disk), True)
            self.attached = True
            if not (self.own_fs and how == "spare"):  # a spare's are made
                self.run.make_job_dirs(self.sandbox.user)
            diskuse.reserve(self.root, self.uid, self.run.path, self.max_output,
                            self.run.image if self.own_fs else None,
                            logs=diskuse.log_bytes(1, int(self.settings["maxLogBytes"])))
        self.st["disk"] = self.disk["type"]
        jobstate.set_condition(self.st, "DiskLimited", self.own_fs,
                               "OwnFilesystem" if self.own_fs else "Polled",
                               runfs.describe(self.disk), now)
        self.dirty = True
        return True

    def unmount(self) -> None:
        try:
            runfs.detach(self.run.files)
            if self.fs_dev is not None:  # its run directory moved away with the mount
                runfs.detach_device(self.fs_dev)
        except (OSError, runfs.RunFsError) as exc:
            try:
                self.event("FilesystemBusy", str(exc), True)
            except OSError:
                pass

    def close(self) -> None:
        """The Job is finished: unmount its filesystem (a read-only mount is made again
        when its outputs are read) and give back what it had registered."""
        if self.gang:
            self.gang.release_space()
        self.unmount()
        diskuse.release(self.root, self.uid)
        me = os.getpid()
        runfs.drop_spare(self.root, me, procs.start_ticks(me))  # made but not used

    def prepare(self, now: float) -> bool:
        """Provisioning, once per supervisor; False when the Job failed."""
        first = self.st["provisioningTime"] is None
        self.st["provisioningTime"] = self.st["provisioningTime"] or now
        self.st["phase"] = Phase.PROVISIONING.value
        self.dirty = True
        if self.spec.source:
            self.flush(now)  # show Provisioning while the source is fetched
        try:
            self.place = provisioning.provision(self.spec, self.run, self.settings, self.st,
                                                self.event, now, self._stop_preparing)
        except provisioning.ProvisionError as exc:
            self._finish(exc.phase, time.time(), exc.reason, exc.message)
            self.st["fix"] = exc.fix or self.st["fix"]
            return False
        if first:
            self._note_checkpoint_paths()
            self._note_not_honoured(now)
        return True

    def _note_checkpoint_paths(self) -> None:
        """Say which of recovery.checkpointPaths the runs cannot have where they asked."""
        paths = self.spec.recovery.checkpoint_paths
        assert self.place is not None
        if not self.place.sandbox.contained:
            if paths != (STATE_MOUNT,):
                self.event("CheckpointPathsApproximated", "without a sandbox the runs see the "
                           "host's paths: each index's NODUS_CHECKPOINT_DIR is its directory "
                           f"{self.run.state}/<index>, and the checkpoint paths "
                           f"{', '.join(paths)} are not made", warning=True)
            return
        points, refused = checkpoint_points(paths)
        if refused:
            self.event("CheckpointPathsRefused", "recovery.checkpointPaths: "
                       + "; ".join(refused) + f"; NODUS_CHECKPOINT_DIR is {points[0]}",
                       warning=True)

    def _note_not_honoured(self, now: float) -> None:
        """Say which of the fields the Job set this backend cannot honour, and how far."""
        from nodus_gitops.providers.local.honoured import not_honoured

        notes = not_honoured(self.spec, now)
        if notes:
            self.event("NotHonoured", "; ".join(notes), warning=True)

    def _run_name(self, index: int) -> str:
        return f"rank {index}" if self.gang else f"index {index}"

    def spawn(self, index: int, lease: runs.Lease | None, now: float,
              gang: dict[str, str] | None = None, count_attempt: bool = True,
              space: gangspace.Space | None = None) -> None:
        """Start a run of `index`; a gang's rank (`gang`, its environment) starts in
        its gang's `space` with the gang's /dev/shm."""
        st = self.st
        attempt = st["indexAttempts"].get(str(index), 0) + 1
        self._drop_run_outputs(index)  # left by a run lost with its supervisor
        self.run.make_run_dirs(index, attempt, self.checkpoints, self.sandbox.user)
        if self.run.prune_attempts(index, attempt):
            self.event("AttemptsPruned", f"only the last {KEPT_ATTEMPTS} attempts of "
                       "each index keep their log and records: older ones were removed")
        assert self.place is not None
        real_gpus = [s.index for s in lease.slots if not s.simulated] if lease else []
        started = launch.build(self.spec, self.run, self.place, index, attempt,
                               lease.visible_devices if lease else "", gpu_indexes=real_gpus,
                               pass_env=tuple(self.settings["passEnv"]), gang=gang,
                               share_net=True if space and space.network else None,
                               shm=str(self.run.gang_shm) if gang else None)
        run = runs.start(
            started, index=index, attempt=attempt, rate=self._rate_of(lease),
            log_path=self.run.log_for(index, attempt),
            units_path=self.run.units_for(index, attempt),
            status_path=self.run.sandbox_status_for(index, attempt), user=self.sandbox.user,
            lease=lease, cgroup_parent=self.cgroup_parent, memory_limit=self.spec.memory_limit,
            cgroup_name=f"{self.uid}-{index}-{attempt}",
            max_log_bytes=int(self.settings["maxLogBytes"]),
            max_file_bytes=self.max_output + 1,  # a file can pass the cap, not much more
            own_domain=not (space and space.domain))
        self.active[index] = run
        st["indexAttempts"][str(index)] = attempt
        st["attempts"] += 1 if count_attempt else 0
        st["startTime"] = st["startTime"] or run.started
        st["segmentStart"] = st["segmentStart"] or run.started
        st["phase"] = Phase.RUNNING.value
        if lease:
            st["gpus"] = [s.to_dict() for s in lease.slots]
        # what `get -o wide` shows: the capacity the run got and what an hour of it costs
        types = sorted({s.type for s in lease.slots}) if lease else []
        st["offering"] = "local/" + ("+".join(types) if types else "cpu")
        st["rateUSDPerHour"] = jobstate.format_usd(round(run.rate * 3600, 6))
        self.event("Started", f"{self._run_name(index)} attempt {attempt} (pid {run.pid})"
                   + (f" on GPU {lease.visible_devices}" if lease else ""))
        self.dirty = True

    def settle(self, now: float) -> None:
        if self.stop and not self.active:
            self.finalize_stop(now)
        elif not (self.stop or self.active or self.pending) and self.phase != Phase.SUSPENDED:
            from nodus_gitops.providers.local.outputs import (  # hashing
                OutputError,
                OutputTooLarge,
                collect,
            )

            used = self.meter.measure(now)
            if used > self.max_output:
                self._finish(Phase.FAILED, now, Reason.OUTPUT_LIMIT_EXCEEDED, self._over_cap(used))
                return
            try:
                declared = self.spec.outputs + (gang.ranked_outputs(
                    self.spec.outputs, self.spec.members) if self.gang else ())
                self.st["outputs"] = collect(self.run.outputs, declared, self.max_output)
            except OutputTooLarge as exc:
                self._finish(Phase.FAILED, now, Reason.OUTPUT_LIMIT_EXCEEDED, str(exc))
                return
            except OutputError as exc:
                self._finish(Phase.FAILED, now, Reason.INVALID_OUTPUT_PATH, str(exc))
                return
            self._finish(Phase.SUCCEEDED, now, message=self.gang.succeeded_message() if self.gang
                         else f"{len(self.completed)} of {self.spec.completions} indexes "
                         "succeeded")

    def finalize_stop(self, now: float) -> None:
        stop, exits = self.stop or {}, self.stop_exits
        self.stop, self.stop_exits = None, []
        kind, reason, message = stop["kind"], stop["reason"], stop["message"]
        if kind == "cancel":
            self._finish(Phase.CANCELLED, now, message=message)
            return
        if kind in ("timeout", "fail"):
            self._finish(Phase.FAILED, now, reason, message)
            return
        if self.spec.recovery.continuity == "Ephemeral":
            self._clear_state(self.pending)
        suspended, msg = suspension.conclude(self.st, self.settings, exits, reason, message, now)
        if suspended:
            self.event("Suspended", msg)
        else:
            self.event(Reason.SUSPEND_FAILED.value, msg, warning=True)
        self.dirty = True

    def flush(self, now: float) -> None:
        st = self.st
        if self.active and now - self.last_write >= HEARTBEAT_SECONDS:
            for run in self.active.values():
                st["units"] += run.count_units()
            self.dirty = True
        if not self.dirty:
            return
        jobstate.refresh(st, {str(i): r.record() for i, r in self.active.items()},
                         self.gang.completed_indexes() if self.gang else sorted(self.completed),
                         self.timeout, now)
        write_json(self.run.status, st)
        self.last_write, self.dirty = now, False

    def log_pipes(self) -> dict[int, runs.Run]:
        """The read ends of the active runs' output, for the supervisor's select."""
        return {r.pipe: r for r in self.active.values() if r.pipe is not None}

    def next_wait(self, now: float) -> float:
        wait = float(self.settings["pollSeconds"])
        if self.stop:
            wait = min(wait, max(0.0, self.stop["deadline"] - now))
        return max(wait, 0.002)

    def lost(self) -> None:
        """SIGTERM/SIGINT to the supervisor: the capacity is going away; stop the runs and
        leave the status as it is, for the provider to recover."""
        for run in self.active.values():
            run.kill()

    def reap_networks(self) -> None:
        """Reap the slirp4netns of ended runs: those that have exited while other runs
        still run (each takes about 20 ms, which the loop does not wait for between
        runs), and all of them once none runs, so that none outlives the phase recorded
        next."""
        if self.active:
            self.ending_nets = [s for s in self.ending_nets if not s.reaped()]
            return
        for slirp in self.ending_nets:
            slirp.stop()
        self.ending_nets = []

    def end_runs(self) -> None:
        """Kill the runs and wait until each has ended whole and been reaped, so the
        filesystem unmounted after this is no longer in use by them."""
        self.lost()
        for run in self.active.values():
            run.reap()
        for slirp in self.ending_nets:
            slirp.stop()
        self.ending_nets = []
