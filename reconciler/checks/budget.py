"""How much of a project's budget (`floor.budgets`) is left.

Spend is what the state store records for the project's resources (`cost_usd` of each
inventory entry), counted in the period in which the run finished; a run still going
counts in the current period.

`budget_left` is pure (records and the time in, a value out); `project_budget` reads the
records through the store's public `list_inventory` and nothing else. The store keeps
the cost of a resource's current run only, so the spend of a run since replaced (a
changed spec under `nodus.dev/on-change: Replace`) is not counted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Protocol

from nodus_gitops.floor.budgets import Budget, is_amount, period_start
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
    spent = sum((_cost(r) for r in records
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


def _cost(record: InventoryRecord) -> Decimal:
    try:
        value = Decimal(record.cost_usd or "0")
    except InvalidOperation:
        return Decimal(0)  # the store refuses such values; a read never fails on one
    return value if is_amount(value) else Decimal(0)
