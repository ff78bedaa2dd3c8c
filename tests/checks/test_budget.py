"""Budget left: a pure function of the recorded spend and the time, checked by examples,
by properties (Hypothesis), and against a real SQLite store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from nodus_gitops.floor.budgets import Budget, Period, period_start
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.spending import budget_left, counts_in_period, project_budget
from nodus_gitops.state.records import InventoryRecord
from nodus_gitops.state.store import Store

NOW = datetime(2024, 5, 15, 13, 30, tzinfo=UTC)  # a Wednesday


def _record(name: str, cost: str, *, finished: datetime | None = None, deleted: bool = False,
            updated: datetime | None = None, project: str = "training") -> InventoryRecord:
    return InventoryRecord(ResourceKey("Job", project, name), "b", {}, "h", cost_usd=cost,
                           finished_at=finished, deleted=deleted, updated_at=updated or NOW)


def test_period_starts():
    assert period_start(NOW, Period.DAY) == datetime(2024, 5, 15, tzinfo=UTC)
    assert period_start(NOW, Period.WEEK) == datetime(2024, 5, 13, tzinfo=UTC)  # Monday
    assert period_start(NOW, Period.MONTH) == datetime(2024, 5, 1, tzinfo=UTC)
    late = datetime(2024, 6, 1, 1, 0, tzinfo=UTC).astimezone()  # any offset: UTC periods
    assert period_start(late, Period.MONTH) == datetime(2024, 6, 1, tzinfo=UTC)


def test_spend_is_counted_in_the_period_a_run_finished_in():
    budget = Budget("training", Decimal("100"), Period.MONTH)
    records = [
        _record("running", "10.50"),  # still going: spends now
        _record("this-month", "20", finished=datetime(2024, 5, 2, tzinfo=UTC)),
        _record("last-month", "999", finished=datetime(2024, 4, 30, 23, 59, tzinfo=UTC)),
        _record("deleted-now", "5", deleted=True),  # removed unfinished this month
        _record("deleted-before", "7", deleted=True,
                updated=datetime(2024, 4, 1, tzinfo=UTC)),
        _record("other-project", "50", project="research"),
    ]
    left = budget_left(budget, records, NOW)
    assert left.spent == Decimal("35.50")
    assert left.left == Decimal("64.50")
    assert left.start == datetime(2024, 5, 1, tzinfo=UTC)
    over = budget_left(Budget("training", Decimal("30"), Period.MONTH), records, NOW)
    assert over.left == Decimal("-5.50")


def test_project_budget_reads_the_store(tmp_path: Path):
    store = Store.open(None, tmp_path)
    store.upsert_binding("b", "/tmp/r", "main", "", "training")
    store.upsert_resources([
        InventoryRecord(ResourceKey("Job", "training", "a"), "b", {}, "h1", cost_usd="12.25",
                        phase="Succeeded", finished_at=datetime(2024, 5, 3, tzinfo=UTC)),
        InventoryRecord(ResourceKey("Job", "training", "old"), "b", {}, "h2", cost_usd="40",
                        phase="Succeeded", finished_at=datetime(2024, 4, 3, tzinfo=UTC)),
        InventoryRecord(ResourceKey("Job", "training", "run"), "b", {}, "h3", cost_usd="1.75",
                        phase="Running"),
    ])
    left = project_budget(store, Budget("training", Decimal("50")), NOW)
    assert left is not None and left.spent == Decimal("14.00") and left.left == Decimal("36")
    assert project_budget(store, None) is None
    store.close()


_times = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1),
                      timezones=st.just(UTC))


@settings(max_examples=300)
@given(now=_times, period=st.sampled_from(list(Period)))
def test_the_period_contains_now_and_is_the_same_all_through_it(now, period):
    start = period_start(now, period)
    assert start <= now
    assert now - start < timedelta(days=31)
    assert period_start(start, period) == start  # the start is in its own period
    assert period_start(start - timedelta(microseconds=1), period) < start


_records = st.lists(st.builds(
    lambda name, cost, finished_days, deleted, project: _record(
        f"j{name}", str(cost), deleted=deleted, project=project,
        finished=None if finished_days is None else NOW - timedelta(days=finished_days)),
    st.integers(0, 10_000), st.decimals(0, 1000, places=2),
    st.none() | st.integers(0, 90), st.booleans(), st.sampled_from(["training", "research"])),
    max_size=30)


@settings(max_examples=300)
@given(records=_records, limit=st.decimals(0, 5000, places=2),
       period=st.sampled_from(list(Period)))
def test_left_is_the_limit_less_what_counts(records, limit, period):
    budget = Budget("training", limit, period)
    left = budget_left(budget, records, NOW)
    counted = [r for r in records
               if r.key.project == "training" and counts_in_period(r, left.start)]
    assert left.spent == sum((Decimal(r.cost_usd) for r in counted), Decimal(0))
    assert left.left == limit - left.spent
    # A run that finished before the period never counts; one still running always does.
    for r in records:
        if r.finished_at is not None and r.finished_at < left.start:
            assert r not in counted
        if r.finished_at is None and not r.deleted and r.key.project == "training":
            assert r in counted
