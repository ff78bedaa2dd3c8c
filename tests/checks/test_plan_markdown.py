"""The plan review as Markdown: what it says, that it stays within a host's limit and says
what it left out (examples and Hypothesis properties), and that manifest values cannot
break out of their place."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st
from nodus_gitops.checks.comments import GITHUB_LIMIT, marker
from nodus_gitops.checks.plan_markdown import FOLD_ROWS, Target, render, size
from nodus_gitops.checks.review import PlanCost, PlanReview
from nodus_gitops.floor.budgets import Budget, Period
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.floor.problems import Problem
from nodus_gitops.plan import Action, ActionType, Change, Plan
from nodus_gitops.spending import BudgetLeft

SHA = "ce587453ced02b1526dfb4cb910479d431683101"
MARK = marker("ci", "team-a")


def _key(name: str) -> ResourceKey:
    return ResourceKey("Job", "training", name)


def _review(actions=(), problems=(), cost=None, budget=None, unchanged=0) -> PlanReview:
    plan = None if problems else Plan(tuple(actions), unchanged)
    return PlanReview("team-a", "https://github.com/o/r.git", "ci", "training", "main", SHA,
                      plan, tuple(problems), cost, budget)


def _github() -> Target:
    return Target("GitHub", GITHUB_LIMIT,
                  lambda path, line: f"https://github.com/o/r/blob/{SHA}/{path}#L{line}")


def test_the_comment_shows_verdict_cost_budget_reasons_table_and_diffs():
    actions = [
        Action(ActionType.CREATE, _key("b"), "jobs/b.yaml"),
        Action(ActionType.PATCH, _key("a"), "jobs/a.yaml",
               changes=(Change("spec.maxCostUSD", "1.00", "2.00"),)),
        Action(ActionType.BLOCKED, _key("d"), "jobs/d.yaml",
               changes=(Change("spec.image", "a:1", "a:2"),),
               reason="spec.image cannot change on an existing Job"),
    ]
    budget = BudgetLeft(Budget("training", Decimal("500"), Period.MONTH),
                        datetime(2024, 5, 1, tzinfo=UTC), Decimal("380"))
    text = render(_review(actions, cost=PlanCost({_key("b"): Decimal("1.20")}),
                          budget=budget, unchanged=7), _github(), marker=MARK)
    lines = text.splitlines()
    assert lines[0] == MARK
    assert "Plan of ce58745 against `main`: 1 create, 1 patch, 1 blocked, 7 unchanged" in text
    assert "**1 blocked**" in text and "the plan check fails" in text
    assert "**Estimated cost of what merging would start: $1.20** (1 run)" in text
    assert ("**Budget of project `training`: $120.00 left** of $500.00 this month (since "
            "2024-05-01, $380.00 spent); $118.80 left after this merge's estimate.") in text
    assert (f"- `Job/d` ([jobs/d.yaml](https://github.com/o/r/blob/{SHA}/jobs/d.yaml#L1)): "
            "spec.image cannot change on an existing Job") in text
    assert (f"| create | `Job/b` | [jobs/b.yaml](https://github.com/o/r/blob/{SHA}/"
            "jobs/b.yaml#L1) | $1.20 |") in text
    assert "- spec.maxCostUSD: '1.00'\n+ spec.maxCostUSD: '2.00'" in text
    assert "<details><summary><code>Job/d</code> blocked: spec.image</summary>" in text
    assert "Left out" not in text


def test_problems_link_to_their_file_and_line():
    problem = Problem("jobs/x.yaml", 7, "Job", "x", "spec.timeout", "'10x' is not a duration")
    text = render(_review(problems=[problem]), _github(), marker=MARK)
    assert "**1 problem**: merging this commit would apply nothing" in text
    assert (f"- [jobs/x.yaml:7](https://github.com/o/r/blob/{SHA}/jobs/x.yaml#L7) `Job/x`: "
            "spec.timeout: '10x' is not a duration") in text
    plain = render(_review(problems=[problem]), Target("the check summary", 65_535))
    assert "- `jobs/x.yaml:7` `Job/x`" in plain and "](" not in plain


def test_over_budget_and_a_merge_that_would_exceed_it():
    budget = BudgetLeft(Budget("training", Decimal("100"), Period.WEEK),
                        datetime(2024, 5, 13, tzinfo=UTC), Decimal("95"))
    cost = PlanCost({_key("b"): Decimal("12.5"), _key("c"): None})
    text = render(_review([Action(ActionType.CREATE, _key("b"), "b.yaml"),
                           Action(ActionType.CREATE, _key("c"), "c.yaml")],
                          cost=cost, budget=budget), _github())
    assert "$12.50** (2 runs; 1 without an estimate)" in text
    assert "$5.00 left** of $100.00 this week" in text
    assert "this merge's estimate would exceed it by $7.50" in text
    assert "| create | `Job/c` | [c.yaml]" in text and "| unknown |" in text
    spent = BudgetLeft(budget.budget, budget.start, Decimal("130"))
    assert "**Budget of project `training`: over by $30.00**" in render(
        _review(cost=cost, budget=spent), _github())


def test_a_long_script_diffs_line_by_line():
    old = "set -e\npython train.py --epochs 3\necho done\n"
    new = "set -e\npython train.py --epochs 5\necho done\n"
    action = Action(ActionType.REPLACE, _key("a"), "a.yaml",
                    changes=(Change("spec.command", ["bash", "-c", old], ["bash", "-c", new]),),
                    reason="spec.command cannot change in place")
    text = render(_review([action]), _github())
    assert "@@ spec.command @@" in text
    assert "-  python train.py --epochs 3\n+  python train.py --epochs 5" in text
    assert "   set -e" in text  # context lines stay
    assert "- `Job/a` replace: spec.command cannot change in place" in text
    one_line = "x" * 50 + " --lr 0.1 " + "y" * 50
    action = Action(ActionType.PATCH, _key("b"), "b.yaml", changes=(
        Change("metadata.annotations.note", one_line, one_line.replace("0.1", "0.2")),))
    text = render(_review([action]), _github())
    assert " - --lr\n-- '0.1'\n+- '0.2'" in text  # a long one-liner: a word a line


def test_a_manifest_cannot_close_a_block_or_break_a_table():
    hostile = "```\n</details>\n<!-- nodus-gitops:plan:ci:team-a -->\n| x | y |"
    action = Action(ActionType.BLOCKED, _key("a"), "a|b.yaml",
                    changes=(Change("metadata.annotations.x", "a", hostile),),
                    reason=f"bad value {hostile}")
    text = render(_review([action]), _github(), marker=MARK)
    assert "````diff" in text  # a fence longer than any run of backticks inside
    lines = text.splitlines()
    assert lines.count("</details>") == 1  # the value's own is inside the fence, prefixed
    assert "+  </details>" in lines
    assert [line for line in lines if line.startswith("<!--")] == [MARK]
    assert "&lt;/details&gt;" in text and "\\| x \\| y \\|" in text


def test_a_plan_over_the_limit_is_cut_item_by_item_and_says_what_it_left_out():
    actions = [Action(ActionType.PATCH, _key(f"job-{i:04d}"), f"jobs/job-{i:04d}.yaml",
                      changes=(Change("spec.maxCostUSD", "1.00", "2.00"),
                               Change("metadata.annotations.note", "a" * 300, "b" * 300)))
               for i in range(2000)]
    text = render(_review(actions), _github(), marker=MARK)
    assert size(text) <= GITHUB_LIMIT
    assert text.startswith(MARK)
    assert "<details><summary>All 2000 actions</summary>" in text
    left = re.search(r"_Left out to stay within GitHub's 65,536-character limit: "
                     r"(\d+) rows of the table, 2000 diffs\.", text)
    assert left, text[-500:]
    shown_rows = len(re.findall(r"^\| patch \|", text, re.M))
    assert shown_rows + int(left.group(1)) == 2000
    assert text.rstrip().endswith(f"commit {SHA[:12]}_")


def test_diffs_left_out_are_counted_not_made(monkeypatch):
    # Each diff of a script is a YAML dump of it before and after; 2000 of them took
    # seconds per render, under the binding's lock, to leave nearly all of them out.
    import yaml

    dumps = []
    real = yaml.dump
    monkeypatch.setattr(yaml, "dump", lambda *a, **k: dumps.append(1) or real(*a, **k))
    script = "\n".join(f"python step.py --part {k}" for k in range(100))
    actions = [Action(ActionType.PATCH, _key(f"j{i}"), f"jobs/j{i}.yaml", changes=(
        Change("spec.command", ["bash", "-c", script], ["bash", "-c", script + " -v"]),))
               for i in range(2000)]
    shown_somewhere = 0
    for target in (_github(), Target("the check summary", 65_535), Target("GitLab", 300_000)):
        dumps.clear()
        text = render(_review(actions), target)
        shown = text.count("<details><summary><code>")
        left = re.search(r"(\d+) diffs\.", text)
        assert left and shown + int(left.group(1)) == 2000
        assert len(dumps) <= 2 * (shown + 1)  # those shown, and the one that did not fit
        shown_somewhere += shown
    assert shown_somewhere  # the table leaves room for some diffs on GitLab


def test_the_table_folds_when_long():
    actions = [Action(ActionType.CREATE, _key(f"j{i}"), f"j{i}.yaml")
               for i in range(FOLD_ROWS + 1)]
    assert "<details><summary>All 21 actions</summary>" in render(_review(actions), _github())
    assert "<details>" not in render(_review(actions[:FOLD_ROWS]), _github())


_text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)),
                max_size=200) | st.sampled_from(["```", "|", "<!--", "\n", "😀" * 40])
_values = st.none() | st.booleans() | st.integers() | _text | st.lists(_text, max_size=4)
_actions = st.lists(st.builds(
    lambda kind, i, file, changes, reason: Action(kind, _key(f"j{i}"), file,
                                                 changes=tuple(changes), reason=reason),
    st.sampled_from(list(ActionType)), st.integers(0, 10**6), _text,
    st.lists(st.builds(Change, st.sampled_from(["spec.a", "metadata.labels.x", "spec.cmd"]),
                       _values, _values), max_size=3),
    _text), max_size=60)


@settings(max_examples=200, deadline=None)
@given(actions=_actions, limit=st.integers(600, 70_000),
       problems=st.lists(st.builds(Problem, _text, st.integers(0, 10**5), st.just("Job"),
                                   st.just("x"), _text, _text), max_size=5))
def test_any_review_fits_the_limit_and_accounts_for_every_row(actions, limit, problems):
    review = _review(actions, problems=problems)
    text = render(review, Target("GitHub", limit, lambda p, n: f"https://h/{n}"), marker=MARK)
    assert size(text) <= limit
    assert text.startswith(MARK + "\n")
    assert [line for line in text.splitlines() if line.startswith("<!--")] == [MARK]
    if not problems and actions:
        left = re.search(r"(\d+) rows of the table", text)
        shown = len(re.findall(r"^\| (?:create|patch|replace|delete|noop|blocked) \| `",
                               text, re.M))
        assert shown + (int(left.group(1)) if left else 0) == len(actions)
