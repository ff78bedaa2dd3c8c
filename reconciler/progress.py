"""What `reconcile` says while it waits: a line each time a resource's phase changes,
with the time since the wait began and what the resource has spent so far
(`12s  Job/train  Pending -> Running  $0.01`). Lines, not a redrawn table, so that a log
file and a terminal read the same."""

from __future__ import annotations

from collections.abc import Iterable

from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.output import money
from nodus_gitops.state.records import InventoryRecord


def elapsed(seconds: float) -> str:
    """`12s`, `3m05s`, `1h02m`: the duration grammar's units, the largest two."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


class PhaseChanges:
    """The phases last seen of every resource; `lines` says which changed since."""

    def __init__(self) -> None:
        self._seen: dict[ResourceKey, str] = {}

    def lines(self, records: Iterable[InventoryRecord], seconds: float) -> list[str]:
        out = []
        for r in records:
            phase = "Gone" if r.deleted else (r.phase or "-")
            before = self._seen.get(r.key)
            if before == phase:
                continue
            self._seen[r.key] = phase
            change = phase if before is None else f"{before} -> {phase}"
            out.append(f"{elapsed(seconds):>6}  {r.key.kind}/{r.key.name}  {change}  "
                       f"{money(r.cost_usd)}")
        return out
