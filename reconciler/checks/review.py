"""What a reviewer of a pull request is shown, as one value: the plan of its head commit
against the target branch's recorded state, the problems, the estimated cost of what
merging would start, and the project's budget left. The plan check and the plan comment
are both written from it, so they say the same thing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from nodus_gitops.config import Binding
from nodus_gitops.floor.budgets import is_amount
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.floor.problems import Problem
from nodus_gitops.plan import ActionType, Plan
from nodus_gitops.providers.base import Estimates
from nodus_gitops.spending import BudgetLeft, InventoryReader, project_budget

STARTS = (ActionType.CREATE, ActionType.REPLACE)  # the actions that start a new run


@dataclass(frozen=True)
class PlanCost:
    """The backend's estimate of each run merging would start (None: it cannot tell)."""

    per_resource: Mapping[ResourceKey, Decimal | None]

    @property
    def total(self) -> Decimal:
        """Of the runs with an estimate."""
        return sum((v for v in self.per_resource.values() if v is not None), Decimal(0))

    @property
    def unknown(self) -> int:
        return sum(1 for v in self.per_resource.values() if v is None)


@dataclass(frozen=True)
class PlanReview:
    binding_id: str
    repo_url: str
    instance: str
    project: str
    target_branch: str
    commit: str
    plan: Plan | None  # None when the commit has problems
    problems: tuple[Problem, ...] = ()
    cost: PlanCost | None = None
    budget: BudgetLeft | None = None

    @property
    def fails(self) -> bool:
        """Invalid or blocked: the plan check fails, so a required check stops the merge."""
        return bool(self.problems) or self.plan is None or bool(self.plan.blocked)

    @property
    def after_merge(self) -> Decimal | None:
        """The budget left once what merging starts has spent its estimate."""
        if self.budget is None:
            return None
        return self.budget.left - (self.cost.total if self.cost else Decimal(0))


def estimate_plan(provider: object, plan: Plan) -> PlanCost | None:
    """The estimate of each run the plan would start, from the backend; None when the
    backend does not estimate."""
    if not isinstance(provider, Estimates):
        return None
    found: dict[ResourceKey, Decimal | None] = {}
    for action in plan.actions:
        if action.action in STARTS and action.manifest is not None:
            found[action.key] = _price(provider, action.manifest)
    return PlanCost(found)


def review_of(binding: Binding, instance: str, commit: str, plan: Plan | None,
              problems: list[Problem], provider: object,
              store: InventoryReader) -> PlanReview:
    """The review of `commit` for `binding`: its plan's cost, its project's budget."""
    return PlanReview(
        binding.id, binding.url, instance, binding.project, binding.branch, commit, plan,
        tuple(problems), estimate_plan(provider, plan) if plan is not None else None,
        project_budget(store, binding.budget))


def _price(provider: Estimates, manifest: dict[str, Any]) -> Decimal | None:
    try:
        value = Decimal(provider.estimate(manifest))
    except (ValueError, ArithmeticError, KeyError, TypeError, InvalidOperation):
        return None  # "unknown", or a backend that could not price it
    return value if is_amount(value) else None
