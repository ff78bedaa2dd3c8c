"""What the Overview (and `/api/v1/repos`) says of each binding, as Argo CD's application
list does, each value derived from what the store and the Git mirror hold:

- its sync status, from the head commit's own latest sync (`sync_status`);
- its health, rolled up from its resources' phases (`health`);
- its head and applied commits as Git has them (`CommitReader`);
- what its project spent of its budget this period (`budget_spent`).

Every store read is one SQL aggregate or one indexed lookup per page, never the whole
inventory loaded; the phase counts and spend come from `queries.totals`, the one grouped
scan the Overview, its health and /metrics share.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from typing import Any

from nodus_gitops.floor.budgets import Budget, period_start
from nodus_gitops.floor.errors import SourceError
from nodus_gitops.floor.phases import Phase
from nodus_gitops.floor.results import SyncResult
from nodus_gitops.source import CommitInfo, GitSource
from nodus_gitops.state.models import InventoryItem, Sync
from nodus_gitops.state.records import SyncRecord
from nodus_gitops.state.store import Store
from sqlalchemy import Numeric, Table, and_, cast, false, func, or_, select

_R: Table = InventoryItem.__table__  # type: ignore[attr-defined]
_S: Table = Sync.__table__  # type: ignore[attr-defined]

UNKNOWN_PHASE = "Unknown"  # a resource whose backend has not reported a phase yet


def _exact_cost() -> Any:
    return func.sum(cast(_R.c.cost_usd, Numeric(20, 6)))


# -- sync status -------------------------------------------------------------------------


class SyncStatus(StrEnum):
    SYNCED = "Synced"  # the head commit is applied and its sync carried it out
    OUT_OF_SYNC = "OutOfSync"  # the head is seen but not applied yet (pending, syncing)
    FAILED = "Failed"  # the head's latest sync errored or applied only part of it
    BLOCKED = "Blocked"  # the head is invalid, or a guard refused some of its changes
    UNKNOWN = "Unknown"  # no head seen yet: the branch was never read


@dataclass(frozen=True)
class SyncState:
    status: SyncStatus
    reason: str  # one line saying why, for the page and the API


_BY_RESULT = {
    SyncResult.ERROR: SyncStatus.FAILED, SyncResult.PARTIAL: SyncStatus.FAILED,
    SyncResult.INVALID: SyncStatus.BLOCKED, SyncResult.BLOCKED: SyncStatus.BLOCKED,
    SyncResult.PENDING: SyncStatus.OUT_OF_SYNC,
}


def sync_status(head: str | None, applied: str | None,
                head_sync: SyncRecord | None) -> SyncState:
    """The binding's sync status from its head commit's own latest sync: never from a
    later sync of another commit (a refresh of the applied commit that found nothing to
    do says nothing of a head that is blocked)."""
    if head is None:
        return SyncState(SyncStatus.UNKNOWN, "the branch has not been read yet")
    if head_sync is not None:
        result = SyncResult(head_sync.result)
        status = _BY_RESULT.get(result)
        if status is SyncStatus.OUT_OF_SYNC:
            return SyncState(status, "the head commit is syncing now")
        if status is not None:
            return SyncState(status, f"the head commit's sync: {result.value}: "
                                     f"{head_sync.message}".rstrip(": "))
        if head != applied:  # applied or noop, but the applied mark moved since
            return SyncState(SyncStatus.OUT_OF_SYNC, "the head commit is not the one applied")
        return SyncState(SyncStatus.SYNCED, f"the head commit is applied ({result.value})")
    if head == applied:  # marked applied by a sync this store no longer lists
        return SyncState(SyncStatus.SYNCED, "the head commit is applied")
    return SyncState(SyncStatus.OUT_OF_SYNC, "the head commit has not been synced yet")


def head_syncs(store: Store, heads: Mapping[str, str | None]) -> dict[str, SyncRecord]:
    """Each binding's latest sync of its head commit (`heads`: binding -> head SHA), in
    one query: the highest sync id per binding among the syncs of that commit."""
    pairs = [and_(_S.c.binding_id == b, _S.c.commit == sha) for b, sha in heads.items() if sha]
    if not pairs:
        return {}
    latest = select(func.max(_S.c.id)).where(or_(*pairs)).group_by(_S.c.binding_id)
    with store._engine.connect() as conn:
        rows = conn.execute(select(_S).where(_S.c.id.in_(latest.scalar_subquery()))).all()
    return {row.binding_id: SyncRecord(**row._asdict()) for row in rows}


# -- health ------------------------------------------------------------------------------


class Health(StrEnum):
    """A binding's resources rolled up, worst first: Degraded, Unknown, Progressing,
    Suspended, Healthy; Missing when it has none (or all are deleted)."""

    DEGRADED = "Degraded"
    UNKNOWN = "Unknown"
    PROGRESSING = "Progressing"
    SUSPENDED = "Suspended"
    HEALTHY = "Healthy"
    MISSING = "Missing"


# Each phase of the seeds' Job lifecycle (floor.phases) and what it says of health. A
# running Job is work in progress, not yet a result: Progressing, as Argo CD counts a
# Kubernetes Job. Cancelled is finished as a person asked (spec.state or `nodus cancel`):
# nothing is wrong and nothing runs. A phase not listed here (or none reported yet) is
# Unknown.
PHASE_HEALTH: dict[str, Health] = {
    Phase.FAILED: Health.DEGRADED, Phase.CREATE_FAILED: Health.DEGRADED,
    Phase.QUEUED: Health.PROGRESSING, Phase.PROVISIONING: Health.PROGRESSING,
    Phase.RUNNING: Health.PROGRESSING, Phase.RECOVERING: Health.PROGRESSING,
    Phase.SUSPENDING: Health.PROGRESSING, Phase.CANCELLING: Health.PROGRESSING,
    Phase.SUSPENDED: Health.SUSPENDED,
    Phase.SUCCEEDED: Health.HEALTHY, Phase.CANCELLED: Health.HEALTHY,
}
_WORST_FIRST = (Health.DEGRADED, Health.UNKNOWN, Health.PROGRESSING, Health.SUSPENDED,
                Health.HEALTHY)


@dataclass(frozen=True)
class HealthState:
    status: Health
    reason: str  # the phases that decided it: "2 Failed of 4 resources"


def health(phases: Mapping[str, int]) -> HealthState:
    """The roll-up of one binding's live resources (`phases`: phase -> how many)."""
    total = sum(phases.values())
    if total == 0:
        return HealthState(Health.MISSING, "no resources")
    by_health: dict[Health, list[str]] = {}
    for phase, n in sorted(phases.items()):
        if n:
            by_health.setdefault(PHASE_HEALTH.get(phase, Health.UNKNOWN), []).append(
                f"{n} {phase}")
    worst = next(h for h in _WORST_FIRST if h in by_health)
    noun = "resource" if total == 1 else "resources"
    return HealthState(worst, f"{', '.join(by_health[worst])} of {total} {noun}")


# -- spend and budgets -------------------------------------------------------------------


def _decimal(value: Any) -> Decimal:
    try:
        return Decimal(str(value or 0))
    except InvalidOperation:
        return Decimal(0)


def budget_spent(store: Store, budget: Budget, now: datetime) -> tuple[datetime, Decimal]:
    """The start of `budget`'s current period and what its project spent in it, counted
    as `spending.counts_in_period` counts (a finished run in the period it finished, one
    still going now, one deleted unfinished when it was last written), in one SQL sum."""
    start = period_start(now, budget.period)
    in_period = or_(_R.c.finished_at >= start,
                    and_(_R.c.finished_at.is_(None),
                         or_(_R.c.deleted == false(), _R.c.updated_at >= start)))
    query = select(_exact_cost()).where(_R.c.project == budget.project, in_period)
    with store._engine.connect() as conn:
        spent = conn.execute(query).scalar_one()
    return start, _decimal(spent).quantize(Decimal("0.000001"))


# -- commits -----------------------------------------------------------------------------


class CommitReader:
    """Commits' message, author and time from bindings' Git mirrors, read through each
    source's own `reader()` handle (the sync loop uses the binding's). Commits never
    change, so what was read once is kept (misses are not: a later fetch may bring the
    commit)."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, str], CommitInfo] = {}

    def read(self, source: GitSource | None, sha: str | None) -> CommitInfo | None:
        """The commit `sha` in `source`'s mirror; None when it is not there (not fetched
        yet, or the mirror does not exist)."""
        if source is None or not sha:
            return None
        key = (str(source.path), sha)
        if key in self._known:
            return self._known[key]
        try:
            info = source.reader().commit_info(sha)
        except SourceError:
            return None
        if len(self._known) > 10_000:  # commits of long-gone heads
            self._known.clear()
        self._known[key] = info
        return info

    def read_many(self, wanted: Iterable[tuple[GitSource | None, str | None]]
                  ) -> list[CommitInfo | None]:
        return [self.read(source, sha) for source, sha in wanted]


COMMITS = CommitReader()  # one per process: its entries are immutable facts
