"""Budgets: what a project may spend per day, week or month, and how much of it is left.

The config's top-level `budgets:` section is the one source of truth:
`{<project>: {limitUSD: "500", period: month}}`. Spend is what the state store records
for the project's resources (`cost_usd` of each inventory entry), counted in the period
in which the run finished; a run still going counts in the current period. Periods start
at 00:00 UTC: the day, the Monday of the ISO week, the first of the month.

`budget_left` is pure (records and the time in, a value out); `project_budget` reads the
records through the store's public `list_inventory` and nothing else. The store keeps
the cost of a resource's current run only, so the spend of a run since replaced (a
changed spec under `nodus.dev/on-change: Replace`) is not counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from typing import Any, Protocol

from nodus_gitops.floor.errors import ConfigError, refuse_unknown_settings
from nodus_gitops.state.records import InventoryRecord

SETTING = "budgets"
KEYS = ("limitUSD", "period")
MAX_USD = Decimal("1e12")  # past this an amount is a typo; far past it, sums overflow


def is_amount(value: Decimal) -> bool:
    """A dollar amount sums and differences can hold: finite, under MAX_USD."""
    return value.is_finite() and value.copy_abs() < MAX_USD  # copy_abs: no rounding


class Period(StrEnum):
    DAY = "day"
    WEEK = "week"
    MONTH = "month"


@dataclass(frozen=True)
class Budget:
    project: str
    limit_usd: Decimal
    period: Period = Period.MONTH


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


def budgets_from_settings(raw: Any) -> dict[str, Budget]:
    """The `budgets:` section; every error names the setting to change."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{SETTING}: a mapping of project to {{limitUSD, period}}")
    budgets = {}
    for project, settings in raw.items():
        where = f"{SETTING}.{project}"
        if not isinstance(settings, Mapping):
            raise ConfigError(f"{where}: a mapping with limitUSD and period")
        refuse_unknown_settings(settings, KEYS, where)
        budgets[str(project)] = Budget(str(project), _limit(settings.get("limitUSD"), where),
                                       _period(settings.get("period", "month"), where))
    return budgets


def period_start(now: datetime, period: Period) -> datetime:
    """The start of the period containing `now` (an aware time), in UTC."""
    day = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if period is Period.DAY:
        return day
    if period is Period.WEEK:
        return day - timedelta(days=day.weekday())
    return day.replace(day=1)


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


def _limit(value: Any, where: str) -> Decimal:
    if isinstance(value, bool) or value is None:
        raise ConfigError(f"{where}.limitUSD: required, a dollar amount such as \"500\"")
    try:
        limit = Decimal(str(value))
    except InvalidOperation:
        raise ConfigError(f"{where}.limitUSD: {value!r} is not a dollar amount") from None
    if not is_amount(limit) or limit < 0:
        raise ConfigError(f"{where}.limitUSD: {value!r} is not a dollar amount of 0 to "
                          f"{MAX_USD:,.0f}")
    return limit


def _period(value: Any, where: str) -> Period:
    try:
        return Period(str(value))
    except ValueError:
        raise ConfigError(f"{where}.period: {value!r} is not one of "
                          f"{', '.join(p.value for p in Period)}") from None
