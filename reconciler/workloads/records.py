"""What a controller remembers of one composite, in one JSON file written atomically:
its manifest, the children it started, what each finished child ended as, the share of
the cost cap each child runs with, and, once the composite's TTL removed it, a tombstone.

A finished child's result is kept here the moment it is first seen, so the composite's
view of it never depends on its Job still being there (its own TTL, a lost backend)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.providers.base import Observed
from nodus_gitops.providers.jsonfiles import exclusive_lock, write_json

# What a finished child's result keeps of its Job's status: what the composite's status
# and report read (times, wall time, units), nothing that grows with the Job.
KEPT_STATUS = ("startTime", "completionTime", "wallSeconds", "units", "unitsPerSecond",
               "attempts")


@dataclass
class Record:
    """A composite as its controller remembers it."""

    key: ResourceKey
    manifest: dict[str, Any]
    idempotency_key: str
    skipped: list[str] = field(default_factory=list)  # children that will never run
    capped: bool = False  # suspended by the controller at the cost cap
    cancelled: bool = False  # spec.state Cancelled was seen: stopped for good
    # Children whose Job was asked for; None: a record from before this was kept (every
    # child is read once to find out).
    started: list[str] | None = field(default_factory=list)
    results: dict[str, dict[str, Any]] = field(default_factory=dict)  # finished children
    leases: dict[str, str] = field(default_factory=dict)  # child -> its Job's maxCostUSD
    # When the composite finished, and how (frozen: later steps never change it).
    finished_at: float | None = None
    outcome: dict[str, Any] | None = None
    expired: bool = False  # removed by its TTL; the record stays as a tombstone

    def to_json(self) -> dict[str, Any]:
        return {"key": str(self.key), "manifest": self.manifest,
                "idempotencyKey": self.idempotency_key, "skipped": self.skipped,
                "capped": self.capped, "cancelled": self.cancelled, "started": self.started,
                "results": self.results, "leases": self.leases,
                "finishedAt": self.finished_at, "outcome": self.outcome,
                "expired": self.expired}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Record:
        started = data.get("started", None)
        return cls(ResourceKey.parse(data["key"]), data["manifest"], data["idempotencyKey"],
                   list(data.get("skipped", [])), bool(data.get("capped")),
                   bool(data.get("cancelled")), None if started is None else list(started),
                   dict(data.get("results") or {}), dict(data.get("leases") or {}),
                   data.get("finishedAt"), data.get("outcome"), bool(data.get("expired")))

    @property
    def spec(self) -> dict[str, Any]:
        return self.manifest.get("spec", {})

    @property
    def labels(self) -> dict[str, str]:
        return self.manifest.get("metadata", {}).get("labels", {})

    @property
    def annotations(self) -> dict[str, str]:
        return self.manifest.get("metadata", {}).get("annotations", {})


class RecordStore:
    """One JSON file per composite, written atomically, and a lock file beside it so
    that a status read and the TTL sweep never step one composite at once."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def _path(self, key: ResourceKey) -> Path:
        return self.root / key.project / key.kind / f"{key.name}.json"

    def load(self, key: ResourceKey) -> Record | None:
        try:
            return Record.from_json(json.loads(self._path(key).read_text()))
        except FileNotFoundError:
            return None

    def save(self, record: Record) -> None:
        path = self._path(record.key)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, record.to_json())

    def remove(self, key: ResourceKey) -> None:
        self._path(key).unlink(missing_ok=True)

    @contextmanager
    def locked(self, key: ResourceKey) -> Iterator[None]:
        lock = self._path(key).with_suffix(".lock")
        lock.parent.mkdir(parents=True, exist_ok=True)
        with exclusive_lock(lock):
            yield

    def keys(self, project: str, kind: str) -> list[ResourceKey]:
        folder = self.root / project / kind
        if not folder.is_dir():
            return []
        return [ResourceKey(kind, project, p.stem) for p in sorted(folder.glob("*.json"))]

    def all_keys(self, kind: str) -> list[ResourceKey]:
        if not self.root.is_dir():
            return []
        return [k for project in sorted(p.name for p in self.root.iterdir() if p.is_dir())
                for k in self.keys(project, kind)]


def result_of(o: Observed, now: float) -> dict[str, Any]:
    """A finished child's result, as its record keeps it."""
    return {"phase": o.phase, "reason": o.reason, "message": o.message, "fix": o.fix,
            "costUSD": o.cost_usd, "providerId": o.provider_id, "recordedAt": now,
            "status": {k: o.status[k] for k in KEPT_STATUS if k in o.status}}


def observed_from(key: ResourceKey, result: dict[str, Any]) -> Observed:
    """A recorded result read back as the child's Observed."""
    return Observed(key, provider_id=result.get("providerId") or "", phase=result["phase"],
                    reason=result.get("reason"), message=result.get("message"),
                    fix=result.get("fix"), cost_usd=result.get("costUSD") or "0",
                    status=dict(result.get("status") or {}))


def finished_time(result: dict[str, Any]) -> float:
    """When a child finished: its Job's completionTime, else when it was first seen
    finished."""
    text = (result.get("status") or {}).get("completionTime")
    if isinstance(text, str):
        try:
            return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
    return float(result.get("recordedAt") or 0.0)
