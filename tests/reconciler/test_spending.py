"""The spend the service holds projects to, tick after tick: a resource unfinished when
a period begins brings what it had spent from the period before, so that a Job
suspended at the budget does not count against the next period (and resumes there)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from nodus_gitops.floor.budgets import Budget, Period
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.spending import PeriodSpend
from nodus_gitops.state.records import InventoryRecord

BUDGET = Budget("training", Decimal("1"), Period.DAY)
MAY_15 = datetime(2024, 5, 15, 23, 59, tzinfo=UTC)
MAY_16 = datetime(2024, 5, 16, 0, 1, tzinfo=UTC)


class Inventory:
    def __init__(self) -> None:
        self.records: dict[str, InventoryRecord] = {}

    def put(self, name: str, cost: str, finished: datetime | None = None,
            project: str = "training") -> None:
        self.records[name] = InventoryRecord(ResourceKey("Job", project, name), "b", {}, "h",
                                             cost_usd=cost, finished_at=finished)

    def list_inventory(self, binding_id=None, project=None, kind=None):
        return [r for r in self.records.values() if project in (None, r.key.project)]


def test_an_unfinished_job_counts_only_what_it_spent_in_the_new_period():
    store, spend = Inventory(), PeriodSpend()
    store.put("held", "1.20")  # suspended at the budget, never finished
    store.put("elsewhere", "50", project="other")
    first = spend.read(store, BUDGET, MAY_15)
    assert (first.spent, first.exceeded) == (Decimal("1.20"), True)
    rolled = spend.read(store, BUDGET, MAY_16)
    assert (rolled.spent, rolled.exceeded) == (Decimal(0), False)
    store.put("held", "1.50")  # resumed: it spends again, in this period
    store.put("new", "0.25", finished=MAY_16)
    assert spend.read(store, BUDGET, MAY_16).spent == Decimal("0.55")


def test_a_service_that_never_saw_the_period_before_counts_everything():
    store = Inventory()
    store.put("held", "1.20")
    store.put("yesterday", "5", finished=MAY_15)
    assert PeriodSpend().read(store, BUDGET, MAY_16).spent == Decimal("1.20")
