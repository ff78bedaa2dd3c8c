"""How much of a project's budget (`floor.budgets`) is left, for the plan review: the
count of spend is the engine's (`nodus_gitops.spending`), the same one the service
holds projects to their budgets by."""

from __future__ import annotations

from nodus_gitops.spending import (
    BudgetLeft,
    InventoryReader,
    budget_left,
    counts_in_period,
    project_budget,
)

__all__ = ["BudgetLeft", "InventoryReader", "budget_left", "counts_in_period",
           "project_budget"]
