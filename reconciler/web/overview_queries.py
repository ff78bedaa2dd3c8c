"""What the Overview (and `/api/v1/repos`) says of each binding, as Argo CD's application
list does, each value derived from what the store and the Git mirror hold:

- its sync status, from the head commit's own latest sync (`sync_status`);
- its health, rolled up from its resources' phases (`health`), and why it is Degraded:
  the commonest reason among its failed resources, with one of them (`failures`);
- its head and applied commits as Git has them (`CommitReader`);
- what its project spent of its budget this period (`budget_spent`).

Every store read is one SQL aggregate or one indexed lookup per page, never the whole
inventory loaded; the phase counts and spend come from `queries.totals`, the one grouped
scan the Overview, its health and /metrics share; the failures read only the failed
resources' rows, found by the phase's index.
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
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.floor.phases import Phase, Reason
from nodus_gitops.floor.results import SyncResult
from nodus_gitops.source import CommitInfo, GitSource
from nodus_gitops.state.models import EventType, InventoryItem, Sync
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


# -- why it is degraded ------------------------------------------------------------------


class Cause(StrEnum):
    """Whose problem a failure reason is, as far as the reason alone tells."""

    HOST = "host"  # the host that runs the backend cannot run anything: not the manifests
    BACKEND = "backend"  # the backend could not give or refused what the resource asks for
    RESOURCE = "resource"  # the resource's own run: its command, its limits, its children


# Reasons of the floor's (floor.phases.Reason) that are not the resource's own doing.
# SandboxUnavailable: the local backend's host cannot contain runs (bubblewrap, user
# namespaces, slirp4netns), whatever the manifest says. The others are the backend's
# answer to what the manifest asks for: its set-up (images, storage, capacity, quota) is
# as likely the cause as the manifest (an image it does not map, a GPU it does not have).
REASON_CAUSE: dict[str, Cause] = {
    Reason.SANDBOX_UNAVAILABLE: Cause.HOST,
    Reason.IMAGE_PULL_FAILED: Cause.BACKEND, Reason.STORAGE_UNAVAILABLE: Cause.BACKEND,
    Reason.CAPACITY_UNAVAILABLE: Cause.BACKEND, Reason.CREATE_FAILED: Cause.BACKEND,
}
# Reasons that only point at other resources (a Pipeline's stages, a Sweep's cells): a
# resource's own reason, when there is one, says more.
ROLL_UPS = frozenset({Reason.STAGE_FAILED, Reason.CELLS_FAILED})
FAILED_PHASES = tuple(p for p, h in PHASE_HEALTH.items() if h is Health.DEGRADED)
_CAUSE_ORDER = (Cause.HOST, Cause.BACKEND, Cause.RESOURCE)


def cause_of(reason: str | None) -> Cause:
    return REASON_CAUSE.get(reason or "", Cause.RESOURCE)


@dataclass(frozen=True)
class Failures:
    """Why one binding is Degraded, from its live resources in a failed phase."""

    failed: int  # how many
    reason: str | None  # their commonest reason (None: their backend recorded none)
    count: int  # how many of them have it
    others: tuple[tuple[str | None, int], ...]  # the other reasons, commonest first
    resource: ResourceKey  # one with `reason`: the first recorded
    provider: str | None  # its backend
    message: str | None  # its message, else its latest warning event's; None if neither
    fix: str | None  # the fix its backend recorded
    cause: Cause


def _rank(item: tuple[str | None, tuple[int, int]]) -> tuple[int, int, int, str]:
    """Commonest first among the resources' own reasons; a roll-up only when none has
    one, and no reason at all last; a tie goes to the host, then the backend, then by
    name."""
    reason, (n, _first) = item
    own = 2 if reason is None else 1 if reason in ROLL_UPS else 0
    return own, -n, _CAUSE_ORDER.index(cause_of(reason)), reason or ""


def failures(store: Store) -> dict[str, Failures]:
    """binding -> why its failed resources failed, for the bindings that have any.

    One grouped query over the failed resources (found by the phase's index, so the
    rows of the rest are never read), one lookup of the chosen resources by id, and for
    a chosen resource that recorded no message, its latest warning event."""
    # The failed ids from the phase's index alone, then those rows by id: asked in one
    # WHERE, SQLite would rather walk the rollup index over every resource to group by
    # binding, fetching rows as it goes.
    failed_ids = select(_R.c.id).where(_R.c.phase.in_([str(p) for p in FAILED_PHASES]))
    grouped = (select(_R.c.binding_id, _R.c.reason, func.count(), func.min(_R.c.id))
               .where(_R.c.id.in_(failed_ids.scalar_subquery()), _R.c.deleted == false())
               .group_by(_R.c.binding_id, _R.c.reason))
    with store._engine.connect() as conn:
        by_binding: dict[str, dict[str | None, tuple[int, int]]] = {}
        for binding, reason, n, first in conn.execute(grouped):
            by_binding.setdefault(binding, {})[reason] = (int(n), int(first))
        if not by_binding:
            return {}
        chosen = {b: min(reasons.items(), key=_rank) for b, reasons in by_binding.items()}
        ids = [first for _reason, (_n, first) in chosen.values()]
        rows = {row.id: row for row in conn.execute(
            select(_R.c.id, _R.c.kind, _R.c.project, _R.c.name, _R.c.provider,
                   _R.c.message, _R.c.fix).where(_R.c.id.in_(ids)))}
    out = {}
    for binding, (reason, (n, first)) in sorted(chosen.items()):
        row = rows[first]
        key = ResourceKey(row.kind, row.project, row.name)
        others = sorted(((r, c) for r, (c, _f) in by_binding[binding].items() if r != reason),
                        key=lambda rc: (-rc[1], rc[0] or "~"))
        out[binding] = Failures(
            failed=sum(c for c, _f in by_binding[binding].values()), reason=reason,
            count=n, others=tuple(others), resource=key, provider=row.provider,
            message=row.message or _warning(store, key), fix=row.fix or None,
            cause=cause_of(reason))
    return out


def _warning(store: Store, key: ResourceKey) -> str | None:
    """The message of `key`'s latest warning event, if it has one."""
    for event in store.list_events(key, limit=20):
        if event.type == EventType.WARNING and event.message:
            return event.message
    return None


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
