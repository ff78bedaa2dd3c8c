"""Budgets: what a project may spend per day, week or month (the config's top-level
`budgets:` section, `{<project>: {limitUSD: "500", period: month}}`), and where each
period starts: 00:00 UTC of the day, the Monday of the ISO week, the first of the month.
Here because both the plan review and the backends that hold a project to it read them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from typing import Any

from nodus_gitops.floor.errors import ConfigError, refuse_unknown_settings

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
