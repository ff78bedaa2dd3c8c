"""From what Slurm reports for every run of a Job to the Job's phase, reason and the
next actions (resubmit failed or lost indexes, cancel, suspend, hold, resume): one pure
decision, so that the rules are tested without a cluster.

A run is one attempt of one index: a plain batch job, or one task of a job array.
Slurm states map as the seeds' phases: PENDING -> Queued, CONFIGURING -> Provisioning,
RUNNING/COMPLETING -> Running, SUSPENDED -> Suspended, COMPLETED -> Succeeded, FAILED ->
retried until backoffLimit (BackoffLimitExceeded), TIMEOUT/DEADLINE -> DeadlineExceeded,
OUT_OF_MEMORY -> OOMKilled, CANCELLED -> Cancelled, NODE_FAIL/PREEMPTED/BOOT_FAIL (and a
run slurmctld forgot without an exit status: LOST) -> Recovering per recovery.continuity.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from nodus_gitops.floor.phases import Phase, Reason
from nodus_gitops.providers.local.spec import JobSpec

LOST = "LOST"
OK, FAILED, DEADLINE, OOM, CANCELLED, GONE, ACTIVE = (
    "ok", "failed", "deadline", "oom", "cancelled", "lost", "active")
_KINDS = {
    "COMPLETED": OK, "FAILED": FAILED, "TIMEOUT": DEADLINE, "DEADLINE": DEADLINE,
    "OUT_OF_MEMORY": OOM, "CANCELLED": CANCELLED, "NODE_FAIL": GONE, "PREEMPTED": GONE,
    "BOOT_FAIL": GONE, LOST: GONE,
}
HELD = ("JobHeldUser", "JobHeldAdmin")


@dataclass(frozen=True)
class Run:
    index: int
    attempt: int
    job_id: int  # this run's own Slurm job id (an array task has one too)
    state: str
    exit_code: int = 0  # raw wait status
    start: float = 0.0
    end: float = 0.0
    seconds: float = 0.0  # run time, time suspended left out
    reason: str = ""
    array_job_id: int = 0  # the array's id (0 for a plain job)
    pending_part: bool = False  # an index of an array's not-yet-started part

    @property
    def kind(self) -> str:
        kind = _KINDS.get(self.state, ACTIVE)
        if kind == OK and self.exit_code != 0:
            return FAILED
        return kind

    @property
    def finished(self) -> bool:
        return self.kind != ACTIVE

    @property
    def target(self) -> str:
        """What scontrol names this run by: `<array>_<index>` for a started array task."""
        if self.array_job_id and not self.pending_part:
            return f"{self.array_job_id}_{self.index}"
        return str(self.job_id)

    def describe(self) -> str:
        if self.kind == GONE:
            return f"index {self.index} was lost ({self.state})"
        if os.WIFSIGNALED(self.exit_code) and self.exit_code & 0x7F:
            return f"index {self.index} was killed by signal {os.WTERMSIG(self.exit_code)}"
        return f"index {self.index} exited with code {os.WEXITSTATUS(self.exit_code)}"


@dataclass
class Decision:
    phase: str
    reason: str | None = None
    message: str | None = None
    resubmit: list[int] = field(default_factory=list)  # failed or lost indexes to run again
    recovered: list[int] = field(default_factory=list)  # of those, the lost ones
    cancel: bool = False  # cancel every live run
    suspend: list[str] = field(default_factory=list)  # scontrol suspend targets
    hold: list[int] = field(default_factory=list)  # pending jobs/arrays to hold
    resume: list[str] = field(default_factory=list)
    release: list[int] = field(default_factory=list)
    completed: list[int] = field(default_factory=list)
    failures: int = 0  # runs that ended in failure (status.failed)
    recoveries: int = 0

    @property
    def terminal(self) -> bool:
        return self.phase in (Phase.SUCCEEDED, Phase.FAILED, Phase.CANCELLED)


def latest(runs: list[Run]) -> dict[int, Run]:
    """The newest run of every index (a live run over a finished one of the same attempt)."""
    out: dict[int, Run] = {}
    for run in sorted(runs, key=lambda r: (r.attempt, r.finished)):
        out[run.index] = run
    return out


def lost_attempts(runs: list[Run], index: int) -> int:
    """How many of recovery.maxAttempts `index` used up: its runs lost with capacity."""
    return sum(1 for r in runs if r.index == index and r.kind == GONE)


def no_progress(spec: JobSpec, runs: list[Run], lost: list[int]) -> str | None:
    """Why the Job fails with NoProgress: a lost index whose last two runs were both
    recoveries (each started after its index lost the run before) and each ran less
    than recovery.minProgressDuration before losing capacity; None otherwise."""
    least = spec.recovery.min_progress_seconds
    if least is None:
        return None
    for index in lost:
        mine = sorted((r for r in runs if r.index == index), key=lambda r: r.attempt)
        short = 0
        for before, run in zip(mine, mine[1:], strict=False):
            recovery = before.kind == GONE
            short = short + 1 if recovery and run.kind == GONE and run.seconds < least else 0
        if short >= 2:
            return (f"two recoveries in a row each ran less than recovery.minProgressDuration "
                    f"({least:g}s; the last ran {mine[-1].seconds:.1f}s): index {index}")
    return None


def decide(spec: JobSpec, runs: list[Run], *, desired: str, now: float,
           active_seconds: float | None, capped: bool, cancel_requested: bool) -> Decision:
    """The Job's phase and what to do next. `active_seconds` is the time since the first
    run started, time Suspended left out (None before any start); `capped` says the cost
    reached maxCostUSD; `cancel_requested` that the provider cancelled it (spec.state)."""
    last = latest(runs)
    live = [r for r in runs if not r.finished]
    failures = sum(1 for r in runs if r.kind == FAILED)
    lost = sum(1 for r in runs if r.kind == GONE)
    done = sorted(i for i, r in last.items() if r.kind == OK)
    shown = sum(1 for r in runs if r.kind in (FAILED, OOM, DEADLINE))
    base = {"completed": done, "failures": shown, "recoveries": lost}

    def fail(reason: Reason, message: str) -> Decision:
        if live:  # stop the other indexes first; Failed once nothing runs
            return Decision(Phase.RUNNING, cancel=True, **base)
        return Decision(Phase.FAILED, reason, message, **base)

    if desired == Phase.CANCELLED:
        if live:
            return Decision(Phase.CANCELLING, cancel=True, **base)
        return Decision(Phase.CANCELLED, message="cancelled: spec.state is Cancelled", **base)
    for kind, reason, what in ((OOM, Reason.OOM_KILLED, "ran out of memory"),
                               (DEADLINE, Reason.DEADLINE_EXCEEDED, "reached its time limit")):
        hit = [r for r in last.values() if r.kind == kind]
        if hit:
            limit = f" (timeout {spec.timeout:g}s)" if kind == DEADLINE and spec.timeout else ""
            return fail(reason, f"index {hit[0].index} {what}{limit}")
    if spec.timeout is not None and active_seconds is not None and active_seconds > spec.timeout:
        return fail(Reason.DEADLINE_EXCEEDED, f"the Job ran longer than its timeout "
                                              f"({spec.timeout:g}s)")
    failed_last = [r for r in last.values() if r.kind == FAILED]
    if failures > spec.backoff_limit:
        what = failed_last[0].describe() if failed_last else "a run failed"
        return fail(Reason.BACKOFF_LIMIT_EXCEEDED,
                    f"{failures} runs failed, more than backoffLimit {spec.backoff_limit}; "
                    f"the last: {what}")
    lost_last = [r for r in last.values() if r.kind == GONE]
    if lost_last:
        rec = spec.recovery
        why = None
        stalled = no_progress(spec, runs, [r.index for r in lost_last])
        spent = [r for r in lost_last if lost_attempts(runs, r.index) >= rec.max_attempts]
        if rec.on_interruption == "Fail":
            why = "capacity was lost and recovery.onInterruption is Fail"
        elif rec.continuity == "Ephemeral":
            why = "capacity was lost and recovery.continuity is Ephemeral: nothing is kept"
        elif stalled is not None:
            return fail(Reason.NO_PROGRESS, stalled)
        elif spent:
            n = lost_attempts(runs, spent[0].index)
            why = (f"index {spent[0].index} lost its capacity on {n} attempt{'s' * (n != 1)}, "
                   f"all that recovery.maxAttempts ({rec.max_attempts}) allows")
        if why:
            return fail(Reason.RECOVERY_LIMIT_EXCEEDED, f"{why} ({lost_last[0].describe()})")
    stray = [r for r in last.values() if r.kind == CANCELLED]
    if stray and not cancel_requested:
        if live:
            return Decision(Phase.CANCELLING, cancel=True, **base)
        return Decision(Phase.CANCELLED, message=f"index {stray[0].index} was cancelled on "
                        "the cluster (scancel)", **base)
    if len(done) == spec.completions:
        return Decision(Phase.SUCCEEDED, **base)

    d = Decision(Phase.QUEUED, **base)
    hold = desired == Phase.SUSPENDED or capped
    if not hold:
        d.resubmit = sorted(r.index for r in failed_last + lost_last)
        d.recovered = sorted(r.index for r in lost_last)
    for r in live:
        held = r.reason in HELD
        if hold and r.state in ("RUNNING", "CONFIGURING"):
            d.suspend.append(r.target)
        elif hold and r.state == "PENDING" and not held:
            d.hold.append(r.array_job_id or r.job_id)
        elif not hold and r.state == "SUSPENDED":
            d.resume.append(r.target)
        elif not hold and r.state == "PENDING" and held:
            d.release.append(r.array_job_id or r.job_id)
    d.hold = sorted(set(d.hold))
    d.release = sorted(set(d.release))
    states = {r.state for r in live}
    if hold and live:
        d.phase = Phase.SUSPENDING if d.suspend else Phase.SUSPENDED
        d.reason = Reason.MAX_COST_REACHED if capped and desired != Phase.SUSPENDED else None
        d.message = "the cost reached spec.maxCostUSD" if d.reason else None
    elif hold:
        d.phase = Phase.SUSPENDED
    elif lost_last or (d.recovered and not states & {"RUNNING", "COMPLETING"}):
        d.phase = Phase.RECOVERING
    elif states & {"RUNNING", "COMPLETING", "SUSPENDED"} or done or d.resubmit:
        d.phase = Phase.RUNNING
    elif "CONFIGURING" in states:
        d.phase = Phase.PROVISIONING
    return d
