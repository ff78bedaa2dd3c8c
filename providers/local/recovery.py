"""What to do when a Job's supervisor is gone (killed, or the machine's capacity lost)
before the Job finished: a pure decision from the last status, the spec and the
desired state, following recovery.continuity, maxAttempts and minProgressDuration."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nodus_gitops.floor.phases import Phase, Reason
from nodus_gitops.providers.local.spec import JobSpec

# Restarts of a supervisor that died while nothing ran before the Job is failed.
MAX_IDLE_RESTARTS = 5
# Phases in which compute was held, so that losing the supervisor lost running work.
_HOLDING = {Phase.PROVISIONING, Phase.RUNNING, Phase.RECOVERING, Phase.SUSPENDING, Phase.CANCELLING}


@dataclass(frozen=True)
class Decision:
    action: str  # "restart" (nothing was lost), "recover", "fail", "cancel"
    reason: str | None = None
    message: str | None = None
    recoveries: int = 0
    short_recoveries: int = 0
    lost_indexes: tuple[int, ...] = ()


def decide(st: dict[str, Any], spec: JobSpec, desired: str) -> Decision:
    lost = tuple(sorted(int(i) for i in (st.get("runs") or {})))
    if desired == Phase.CANCELLED:
        return Decision("cancel", message="cancelled: spec.state is Cancelled")
    # Recovering without runs: the supervisor recovering the Job was gone before it
    # started one, so nothing more was lost.
    idle = st.get("phase") not in _HOLDING or st.get("phase") == Phase.RECOVERING
    if not lost and idle:
        if st.get("restarts", 0) >= MAX_IDLE_RESTARTS:
            return Decision("fail", Reason.RECOVERY_LIMIT_EXCEEDED.value,
                            f"the Job's supervisor exited {MAX_IDLE_RESTARTS} times without "
                            "finishing; supervisor.log in its run directory says why")
        return Decision("restart")
    rec = spec.recovery
    if rec.on_interruption == "Fail":
        return Decision(
            "fail",
            Reason.RECOVERY_LIMIT_EXCEEDED.value,
            "capacity was lost and recovery.onInterruption is Fail",
            lost_indexes=lost,
        )
    if rec.continuity == "Ephemeral":
        return Decision(
            "fail",
            Reason.RECOVERY_LIMIT_EXCEEDED.value,
            "capacity was lost and recovery.continuity is Ephemeral: nothing is kept",
            lost_indexes=lost,
        )
    segment = 0.0
    if st.get("segmentStart") is not None and st.get("heartbeat") is not None:
        segment = max(0.0, st["heartbeat"] - st["segmentStart"])
    # Only a run that was itself a recovery counts towards NoProgress, never the first.
    was_recovery = st.get("recoveries", 0) > 0
    short = (was_recovery and rec.min_progress_seconds is not None
             and segment < rec.min_progress_seconds)
    short_count = st.get("shortRecoveries", 0) + 1 if short else 0
    recoveries = st.get("recoveries", 0) + 1
    if short_count >= 2:
        return Decision(
            "fail",
            Reason.NO_PROGRESS.value,
            f"two recoveries in a row each ran less than recovery.minProgressDuration "
            f"({rec.min_progress_seconds:g}s; the last ran {segment:.1f}s)",
            recoveries,
            short_count,
            lost,
        )
    # Each index has recovery.maxAttempts attempts across capacity losses; this loss
    # used up one more of every lost index's (the driver counts them in indexRecoveries).
    earlier = st.get("indexRecoveries") or {}
    used = {i: earlier.get(str(i), 0) + 1 for i in lost}
    spent = [i for i in lost if used[i] >= rec.max_attempts]
    if spent:
        i = spent[0]
        return Decision(
            "fail",
            Reason.RECOVERY_LIMIT_EXCEEDED.value,
            f"index {i} lost its capacity on {used[i]} attempt{'s' * (used[i] != 1)}, all "
            f"that recovery.maxAttempts ({rec.max_attempts}) allows",
            recoveries,
            short_count,
            lost,
        )
    return Decision(
        "recover", message=_capacity_lost(used, rec.max_attempts), recoveries=recoveries,
        short_recoveries=short_count, lost_indexes=lost,
    )


def _capacity_lost(used: dict[int, int], max_attempts: int) -> str:
    """What a recovery tells: each lost index against its own recovery.maxAttempts."""
    if not used:
        return "the supervisor is gone while no index was running; none used an attempt"
    counts = "; ".join(f"index {i} has lost {n} of its {max_attempts} attempts"
                       for i, n in sorted(used.items()))
    return f"the supervisor is gone; {counts} (recovery.maxAttempts)"
