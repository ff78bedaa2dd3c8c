"""status.json (the supervisor's record) -> `Observed`, in the seeds' camelCase:
compact completed indexes (`0-2,5`), RFC 3339 times, and no internal bookkeeping."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.floor.phases import is_terminal
from nodus_gitops.providers.base import Observed
from nodus_gitops.providers.local import jobstate
from nodus_gitops.providers.local.spec import compact_indexes

_TIMES = ("startTime", "completionTime", "timeoutTime", "provisioningTime", "createdTime")
_COPIED = (
    "succeeded",
    "failed",
    "active",
    "attempts",
    "outputs",
    "units",
    "unitsPerSecond",
    "wallSeconds",
    "suspendFailures",
    "gpus",
    "source",
    "recoveries",
    "costUSD",
    "sandbox",
    "disk",
    "network",
    "runAs",
    "image",
    "offering",
    "rateUSDPerHour",
)


def rfc3339(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def public_status(st: dict[str, Any], now: float) -> dict[str, Any]:
    """What Observed.status shows; times that move while a Job is not finished (its
    timeoutTime while Suspended, its wall time) are brought up to `now`."""
    st = dict(st)
    if not is_terminal(st.get("phase")):
        st["timeoutTime"] = jobstate.timeout_time(st, st.get("timeoutSeconds"), now)
        st["wallSeconds"] = round(jobstate.wall_seconds(st, now), 3)
    out: dict[str, Any] = {k: st.get(k) for k in _COPIED if k in st}
    out["completedIndexes"] = compact_indexes(st.get("completedIndexes", []))
    for k in _TIMES:
        out[k] = rfc3339(st.get(k))
    out["conditions"] = [
        {**c, "lastTransitionTime": rfc3339(c.get("lastTransitionTime"))}
        for c in st.get("conditions", [])
    ]
    if st.get("nextSuspendTry") is not None:
        out["nextSuspendTime"] = rfc3339(st["nextSuspendTry"])
    if st.get("stopByTime") is not None:  # a stop for the budget: stopped by then
        out["stopByTime"] = rfc3339(st["stopByTime"])
    return out


def to_observed(key: ResourceKey, doc: dict[str, Any], st: dict[str, Any], now: float) -> Observed:
    meta = doc["manifest"].get("metadata") or {}
    return Observed(
        key=key,
        provider_id=f"local:{key.project}/{key.name}/{doc['uid']}",
        phase=st["phase"],
        reason=st.get("reason"),
        message=st.get("message"),
        fix=st.get("fix"),
        cost_usd=st.get("costUSD") or "0",
        status=public_status(st, now),
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        manifest=doc["manifest"],
    )
