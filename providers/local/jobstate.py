"""The Job's status record as the supervisor keeps it and writes it to status.json,
with the helpers that move it between phases (conditions, terminal results, fixes).

Times are Unix seconds here; `observe` turns them into RFC 3339 for Observed.status.
"""

from __future__ import annotations

import shutil
from decimal import Decimal
from pathlib import Path
from typing import Any

from nodus_gitops.floor.phases import FIXES, Phase, is_terminal


def format_usd(value: float | Decimal) -> str:
    """Six decimals, trailing zeros dropped: 0.000125, 0.25, 0."""
    text = f"{Decimal(str(value)):.6f}".rstrip("0").rstrip(".")
    return text or "0"


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def initial(now: float) -> dict[str, Any]:
    return {
        "phase": Phase.QUEUED.value,
        "reason": None,
        "message": None,
        "fix": None,
        "conditions": [],
        "completedIndexes": [],
        "succeeded": 0,
        "failed": 0,
        "active": 0,
        "attempts": 0,
        "indexAttempts": {},
        "createdTime": now,
        "queuedSince": now,
        "startTime": None,
        "completionTime": None,
        "provisioningTime": None,
        "timeoutTime": None,
        "timeoutSeconds": None,
        "suspendedSeconds": 0.0,
        "suspendedSince": None,
        "cost": 0.0,
        "costUSD": "0",
        "outputs": {},
        "units": 0,
        "unitsPerSecond": None,
        "wallSeconds": 0.0,
        "suspendFailures": 0,
        "nextSuspendTry": None,
        "gpus": [],
        "source": None,
        "recoveries": 0,
        "shortRecoveries": 0,
        "segmentStart": None,
        "heartbeat": now,
        "runs": {},
        "generation": -1,
        "prepared": False,
    }


def set_condition(
    st: dict[str, Any], type_: str, status: bool, reason: str, message: str, now: float
) -> None:
    conds = [c for c in st.get("conditions", []) if c["type"] != type_]
    conds.append(
        {
            "type": type_,
            "status": "True" if status else "False",
            "reason": reason,
            "message": message,
            "lastTransitionTime": now,
        }
    )
    st["conditions"] = conds


def finish(
    st: dict[str, Any],
    phase: Phase,
    now: float,
    reason: str | None = None,
    message: str | None = None,
) -> None:
    """Move to a terminal phase: Failed always carries reason, message and fix."""
    assert is_terminal(phase)
    st["phase"] = phase.value
    st["reason"] = reason
    st["message"] = " ".join((message or "").split()) or None
    st["fix"] = FIXES.get(reason) if reason else None
    if phase is Phase.FAILED and st["fix"] is None:
        st["fix"] = "read the Job's events and logs"
    st["completionTime"] = now
    st["active"] = 0
    st["runs"] = {}
    if phase is Phase.SUCCEEDED:
        set_condition(st, "Complete", True, "Completed", message or "every index succeeded", now)
    elif phase is Phase.FAILED:
        set_condition(st, "Failed", True, reason or "Failed", st["message"] or "", now)
    else:
        set_condition(st, "Cancelled", True, "Cancelled", message or "cancelled", now)


def wall_seconds(st: dict[str, Any], now: float) -> float:
    """Time from the first start to the end (or now), less the time Suspended."""
    if st.get("startTime") is None:
        return 0.0
    end = st.get("completionTime") or now
    suspended = st.get("suspendedSeconds", 0.0)
    if st.get("suspendedSince") is not None:
        suspended += end - st["suspendedSince"]
    return max(0.0, end - st["startTime"] - suspended)


def timeout_time(st: dict[str, Any], timeout: float | None, now: float) -> float | None:
    """First Provisioning + timeout + time Suspended (a current suspension included)."""
    if timeout is None or st.get("provisioningTime") is None:
        return None
    suspended = st.get("suspendedSeconds", 0.0)
    if st.get("suspendedSince") is not None:
        suspended += now - st["suspendedSince"]
    return st["provisioningTime"] + timeout + suspended


def refresh(st: dict[str, Any], active: dict[str, dict[str, Any]], completed: list[int],
            timeout: float | None, now: float) -> None:
    """Bring the derived fields up to `now` before a write: the active runs' records,
    the completed indexes, timeoutTime, wall time, units per second and the heartbeat."""
    st["active"] = len(active)
    st["runs"] = active
    st["completedIndexes"] = completed
    st["timeoutSeconds"] = timeout
    st["timeoutTime"] = timeout_time(st, timeout, now)
    st["wallSeconds"] = wall = round(wall_seconds(st, now), 3)
    st["unitsPerSecond"] = round(st["units"] / wall, 3) if st["units"] and wall > 0 else None
    st["heartbeat"] = now
