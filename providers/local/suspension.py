"""The suspend protocol on the status record: whether a suspend may be tried now, what
a finished stop-for-suspend means (Suspended, or SuspendFailed and back to Running,
retried later up to the configured number of tries), and resuming.

A run "saved" its state when it exited 0 or died of our SIGTERM; any other end during
the save window (another exit code, or SIGKILL after the grace period) is a failed save.
A stop for the cost cap suspends whatever the runs did: billing must stop.
"""

from __future__ import annotations

from typing import Any

from nodus_gitops.floor.phases import FIXES, Phase, Reason
from nodus_gitops.providers.local import jobstate
from nodus_gitops.providers.local.runs import Exit


def allowed(st: dict[str, Any], settings: dict[str, Any], now: float) -> bool:
    if st["suspendFailures"] >= int(settings["suspendMaxTries"]):
        return False
    return st["nextSuspendTry"] is None or now >= st["nextSuspendTry"]


def conclude(st: dict[str, Any], settings: dict[str, Any], exits: list[Exit],
             reason: str | None, message: str | None, now: float) -> tuple[bool, str]:
    """Update `st` after every run stopped for a suspend. Returns (suspended, message)."""
    saved = all(e.saved for e in exits)
    if not saved and reason is None:
        st["suspendFailures"] += 1
        tries = int(settings["suspendMaxTries"])
        retry_in = float(settings["suspendRetrySeconds"])
        retry = st["suspendFailures"] < tries
        st["nextSuspendTry"] = now + retry_in if retry else None
        bad = next(e for e in exits if not e.saved)
        msg = f"the command {bad.describe()} instead of saving its state; " + (
            f"trying again in {retry_in:g}s" if retry
            else f"gave up after {tries} tries; the Job keeps running")
        jobstate.set_condition(st, "Suspended", False, Reason.SUSPEND_FAILED.value, msg, now)
        st["phase"] = Phase.RUNNING.value
        return False, msg
    msg = message or "suspended"
    if not saved:
        msg += " (a run did not save its state before it was stopped)"
    st.update(phase=Phase.SUSPENDED.value, reason=reason, message=msg,
              fix=FIXES.get(reason) if reason else None, suspendedSince=now)
    jobstate.set_condition(st, "Suspended", True, reason or "Requested", msg, now)
    return True, msg


def resume(st: dict[str, Any], now: float) -> None:
    """Suspended -> Queued: the time suspended stops counting and the queue wait starts."""
    st["suspendedSeconds"] += now - (st["suspendedSince"] or now)
    st.update(suspendedSince=None, phase=Phase.QUEUED.value, queuedSince=now, reason=None,
              message=None, fix=None)
    jobstate.set_condition(st, "Suspended", False, "Resumed", "resumed", now)
