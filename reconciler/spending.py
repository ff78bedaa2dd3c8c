"""What a project spent of its budget (`floor.budgets`) in the current period.

Spend is what the state store records for the project's resources (`cost_usd` of each
inventory entry), counted in the period in which the run finished; a run still going
counts in the current period. The store keeps the cost of a resource's current run
only, so the spend of a run since replaced (a changed spec under
`nodus.dev/on-change: Replace`) is not counted.

`budget_left` is pure (records and the time in, a value out) and `project_budget` reads
the records through the store's public `list_inventory`: the plan review uses them.
`PeriodSpend` is the same count as the service sees it tick after tick, to hold
projects to their budgets: a resource still unfinished when a period begins brings the
cost it had then from the period before, so a Job suspended for the budget does not
count against the next period too (or it could never resume). It learns those costs by
watching; a service started after the period began counts them in full, as the review
does.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Protocol

from nodus_gitops.floor.budgets import Budget, is_amount, period_start
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.state.records import InventoryRecord


@dataclass(frozen=True)
class BudgetLeft:
    """A project's budget in the period that contains `now`."""

    budget: Budget
    start: datetime  # of the period, UTC
    spent: Decimal

    @property
    def left(self) -> Decimal:
        """Negative when the project spent more than its limit."""
        return self.budget.limit_usd - self.spent

    @property
    def exceeded(self) -> bool:
        """At the budget or past it: the project's Jobs must stop spending."""
        return self.left <= 0

    def describe(self) -> str:
        b = self.budget
        return (f"project {b.project} spent ${usd(self.spent)} of its budget of "
                f"${usd(b.limit_usd)} per {b.period.value} (since {self.start:%Y-%m-%d})")


class InventoryReader(Protocol):
    def list_inventory(self, binding_id: str | None = None, project: str | None = None,
                       kind: str | None = None) -> list[InventoryRecord]: ...


def counts_in_period(record: InventoryRecord, start: datetime) -> bool:
    """Whether the record's cost belongs to the period starting at `start`."""
    if record.finished_at is not None:
        return record.finished_at >= start
    if record.deleted:  # removed before it finished: when it was last written
        return record.updated_at is not None and record.updated_at >= start
    return True  # still running: it spends now


def budget_left(budget: Budget, records: Iterable[InventoryRecord],
                now: datetime) -> BudgetLeft:
    start = period_start(now, budget.period)
    spent = sum((cost_of(r) for r in records
                 if r.key.project == budget.project and counts_in_period(r, start)),
                Decimal(0))
    return BudgetLeft(budget, start, spent)


def project_budget(store: InventoryReader, budget: Budget | None,
                   now: datetime | None = None) -> BudgetLeft | None:
    """The budget left of `budget`'s project now, read from the store."""
    if budget is None:
        return None
    return budget_left(budget, store.list_inventory(project=budget.project),
                       now or datetime.now(UTC))


@dataclass
class PeriodSpend:
    """Each budgeted project's spend in its current period, read on every status tick."""

    # the period start and cost each resource had at the last tick that read it
    _seen: dict[ResourceKey, tuple[datetime, Decimal]] = field(default_factory=dict)
    # what a resource unfinished when its current period began had spent before it
    _carried: dict[ResourceKey, tuple[datetime, Decimal]] = field(default_factory=dict)

    def read(self, store: InventoryReader, budget: Budget, now: datetime) -> BudgetLeft:
        start = period_start(now, budget.period)
        spent = Decimal(0)
        for record in store.list_inventory(project=budget.project):
            key, cost = record.key, cost_of(record)
            seen = self._seen.get(key)
            if seen is not None and seen[0] < start:  # the first tick of a new period
                self._carried[key] = (start, seen[1])
            self._seen[key] = (start, cost)
            if not counts_in_period(record, start):
                continue
            carried = self._carried.get(key)
            before = carried[1] if carried is not None and carried[0] == start else Decimal(0)
            spent += max(Decimal(0), cost - before)
        return BudgetLeft(budget, start, spent)


def cost_of(record: InventoryRecord) -> Decimal:
    try:
        value = Decimal(record.cost_usd or "0")
    except InvalidOperation:
        return Decimal(0)  # the store refuses such values; a read never fails on one
    return value if is_amount(value) else Decimal(0)


def usd(value: Decimal) -> str:
    """Up to six decimals, trailing zeros dropped: 0.000125, 0.25, 500."""
    text = f"{value.quantize(Decimal('0.000001')):f}".rstrip("0").rstrip(".")
    return text or "0"
