"""The plan check: failure when the plan is invalid or blocked (a required check stops the
merge), success otherwise, with the comment's table in its summary."""

from __future__ import annotations

from decimal import Decimal

from nodus_gitops.checks.compose import plan_check
from nodus_gitops.checks.model import CheckState
from nodus_gitops.checks.review import PlanCost, PlanReview
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.floor.problems import Problem
from nodus_gitops.plan import Action, ActionType, Plan

SHA = "ce587453ced02b1526dfb4cb910479d431683101"


def _review(actions=(), problems=(), cost=None) -> PlanReview:
    plan = None if problems else Plan(tuple(actions), 3)
    return PlanReview("team-a", "https://github.com/o/r.git", "ci", "training", "main", SHA,
                      plan, tuple(problems), cost)


def test_a_clean_plan_succeeds_with_the_table_and_the_cost():
    key = ResourceKey("Job", "training", "b")
    run = plan_check(_review([Action(ActionType.CREATE, key, "jobs/b.yaml")],
                             cost=PlanCost({key: Decimal("2.5")})))
    assert (run.context, run.state, run.commit) == ("nodus/ci/plan", CheckState.SUCCESS, SHA)
    assert run.title == "1 create, 3 noop"
    assert "| create | `Job/b` | `jobs/b.yaml` | $2.50 |" in run.summary
    assert "**Estimated cost of what merging would start: $2.50** (1 run)" in run.summary
    assert run.summary.splitlines()[0] == \
        "Plan of ce58745 against `main`: 1 create, 3 unchanged"


def test_a_blocked_plan_fails():
    key = ResourceKey("Job", "training", "a")
    run = plan_check(_review([Action(ActionType.BLOCKED, key, "a.yaml",
                                     reason="the cap can only be raised")]))
    assert run.state is CheckState.FAILURE and run.title == "1 blocked"
    assert "| blocked | `Job/a` | `a.yaml` |" in run.summary
    assert "the cap can only be raised" in run.summary


def test_an_invalid_commit_fails_with_every_problem_annotated():
    problems = [Problem("jobs/x.yaml", 7, "Job", "x", "spec.timeout", "not a duration"),
                Problem("jobs/y.yaml", 0, "", "", "", "not YAML")]
    run = plan_check(_review(problems=problems))
    assert run.state is CheckState.FAILURE and run.title == "2 invalid manifest problems"
    assert [(a.path, a.line) for a in run.annotations] == [("jobs/x.yaml", 7),
                                                          ("jobs/y.yaml", 1)]
    assert "- `jobs/x.yaml:7` `Job/x`: spec.timeout: not a duration" in run.summary


def test_an_estimate_no_arithmetic_can_hold_is_unknown():
    from nodus_gitops.checks.review import estimate_plan

    class Absurd:
        def estimate(self, manifest: dict) -> str:
            return "1e999999999"  # finite, yet past what a sum of dollars can hold

    key = ResourceKey("Job", "training", "b")
    plan = Plan((Action(ActionType.CREATE, key, "jobs/b.yaml", manifest={"kind": "Job"}),))
    cost = estimate_plan(Absurd(), plan)
    assert cost is not None and cost.per_resource == {key: None}
    assert "| create | `Job/b` | `jobs/b.yaml` | unknown |" in plan_check(
        _review(plan.actions, cost=cost)).summary
