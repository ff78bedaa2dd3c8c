"""job.json plus the runs and the last decision -> `Observed`, in the seeds' camelCase:
compact completed indexes (`0-2,5`), RFC 3339 times, cost from the rate card and the
time every run held its resources, throughput from `nodus.log.unit` calls."""

from __future__ import annotations

from typing import Any

from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.floor.phases import FIXES, Phase
from nodus_gitops.providers.base import Observed
from nodus_gitops.providers.local.jobstate import format_usd
from nodus_gitops.providers.local.observe import rfc3339
from nodus_gitops.providers.local.spec import compact_indexes, parse_job
from nodus_gitops.providers.slurm import submit
from nodus_gitops.providers.slurm.status import CANCELLED, Run


def first_start(runs: list[Run]) -> float | None:
    """When the Job's first run started (a pending index cancelled before it ran has a
    start time too, but ran for nothing)."""
    starts = [r.start for r in runs if r.start > 0 and r.state not in ("PENDING",)
              and not (r.kind == CANCELLED and r.seconds == 0)]
    return min(starts) if starts else None


def suspended_seconds(doc: dict[str, Any], now: float) -> float:
    since = doc.get("suspendedSince")
    return float(doc.get("suspendedSeconds") or 0.0) + (now - since if since else 0.0)


def wall_seconds(doc: dict[str, Any], runs: list[Run], now: float) -> float:
    start = first_start(runs)
    if start is None:
        return 0.0
    end = (doc.get("result") or {}).get("completionTime") or now
    return max(0.0, end - start - suspended_seconds(doc, end))


def cost(doc: dict[str, Any], runs: list[Run]) -> float:
    """The rate is one index's on one node; a distributed Job's run holds `nodes` nodes."""
    nodes = ((doc["manifest"].get("spec") or {}).get("distributed") or {}).get("nodes") or 1
    return float(doc.get("ratePerSecond") or 0.0) * sum(r.seconds for r in runs) * nodes


def fix_for(phase: str, reason: str | None) -> str | None:
    if reason:
        return FIXES.get(reason) or ("read the Job's logs" if phase == Phase.FAILED else None)
    return "read the Job's logs" if phase == Phase.FAILED else None


def status(doc: dict[str, Any], runs: list[Run], completed: list[int],
           failures: int, recoveries: int, units: int, now: float) -> dict[str, Any]:
    result = doc.get("result") or {}
    wall = wall_seconds(doc, runs, now)
    start = first_start(runs)
    subs = doc.get("submissions") or []
    return {
        "completedIndexes": compact_indexes(completed),
        "succeeded": len(completed),
        "failed": failures,
        "active": sum(1 for r in runs if r.state in ("RUNNING", "COMPLETING", "CONFIGURING")),
        "attempts": len(subs),
        "recoveries": recoveries,
        "startTime": rfc3339(start),
        "completionTime": rfc3339(result.get("completionTime")),
        "wallSeconds": round(wall, 3),
        "costUSD": format_usd(round(cost(doc, runs), 6)),
        "outputs": result.get("outputs") or {},
        "units": units,
        "unitsPerSecond": round(units / wall, 3) if units and wall > 0 else None,
        "slurm": {"jobName": doc.get("name"), "jobIds": [s["jobId"] for s in subs],
                  "partition": doc.get("partition")},
        **offering(doc),
        **not_honoured(doc),
    }


def offering(doc: dict[str, Any]) -> dict[str, Any]:
    """What `get -o wide` shows: the partition the Job queues in, and what an hour of one
    run costs there (every node of a gang)."""
    nodes = ((doc["manifest"].get("spec") or {}).get("distributed") or {}).get("nodes") or 1
    rate = float(doc.get("ratePerSecond") or 0.0) * 3600 * nodes
    return {"offering": f"slurm/{doc.get('partition') or 'default'}",
            "rateUSDPerHour": format_usd(round(rate, 6))}


def not_honoured(doc: dict[str, Any]) -> dict[str, Any]:
    """`notHonoured`, the fields this backend cannot honour, when the Job set any (so
    `describe` shows them)."""
    notes = submit.not_honoured(parse_job(doc["manifest"]))
    return {"notHonoured": notes} if notes else {}


def to_observed(key: ResourceKey, doc: dict[str, Any], phase: str, reason: str | None,
                message: str | None, st: dict[str, Any]) -> Observed:
    meta = doc["manifest"].get("metadata") or {}
    subs = doc.get("submissions") or []
    return Observed(
        key=key,
        provider_id="slurm:" + (",".join(str(s["jobId"]) for s in subs) or doc["uid"]),
        phase=phase,
        reason=reason,
        message=message,
        fix=(doc.get("result") or {}).get("fix") or fix_for(phase, reason),
        cost_usd=st.get("costUSD") or "0",
        status=st,
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        manifest=doc["manifest"],
    )
