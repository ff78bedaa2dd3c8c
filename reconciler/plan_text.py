"""A plan as a terminal reads it: one line per action, then what it changes field by
field. A short value shows as `path: old -> new`; a script, a long string or a structured
value as a unified line diff (difflib). The values are read as the dashboard's diff reads
them (plan_diff: which values are short, how a value is written as text), so that
`plan`, `reconcile` and a sync's page say the same change the same way.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from nodus_gitops.floor.results import ActionType
from nodus_gitops.plan_diff import field_diff, scalar_text, value_text

if TYPE_CHECKING:
    from nodus_gitops.floor.problems import Problem
    from nodus_gitops.plan import Action, Plan

SYMBOL = {ActionType.CREATE: "+", ActionType.PATCH: "~", ActionType.REPLACE: "-/+",
          ActionType.DELETE: "-", ActionType.BLOCKED: "!", ActionType.NOOP: "="}
CONTEXT = 3  # unchanged lines around a change in a line diff


def _value(value: Any) -> str:
    return "(absent)" if value is None else scalar_text(value)


def _text(value: Any) -> list[str]:
    """The lines a value is diffed as (none for an absent one)."""
    return [] if value is None else value_text(value).split("\n")


def change_lines(path: str, old: Any, new: Any) -> list[str]:
    """One changed field: `path: old -> new`, or `path:` and its unified diff."""
    shown = field_diff(path, old, new)
    name = path or "(whole value)"
    if shown.inline:
        return [f"{name}: {_value(old)} -> {_value(new)}"]
    diff = difflib.unified_diff(_text(old), _text(new), "old", "new", n=CONTEXT, lineterm="")
    return [f"{name}:", *("  " + line for line in list(diff)[2:])]  # the ---/+++ pair said


Shown = Callable[[dict[str, Any]], dict[str, Any]]  # a change's {path, old, new} as shown


def action_lines(a: Action, indent: str = "  ", shown: Shown | None = None) -> list[str]:
    """One action: its symbol, kind/name, file and reason, then its changed fields (each
    `{path, old, new}` passed through `shown` first: a server masks them)."""
    lines = [f"{indent}{SYMBOL[a.action]:>3} {a.action.value:<8} {a.key.kind}/{a.key.name}"
             f"  ({a.file})" + (f": {a.reason}" if a.reason else "")]
    for change in a.changes:
        c = change.as_dict() if shown is None else shown(change.as_dict())
        lines += [f"{indent}      {line}" for line in change_lines(c["path"], c["old"],
                                                                    c["new"])]
    return lines


def shown_actions(plan: Plan) -> Iterable[Action]:
    """The actions worth saying: all but the noops with nothing to say."""
    return (a for a in plan.actions if a.action != ActionType.NOOP or a.reason)


def plan_text(commit: str, plan: Plan, problems: list[Problem],
              shown: Shown | None = None) -> str:
    """`plan`'s text: the commit, its problems (then nothing applies) or its actions with
    their diffs (`shown` as in action_lines), and the counts."""
    lines = [f"Plan for commit {commit[:12]}:"]
    if problems:
        lines.append(f"{len(problems)} problems; nothing from this commit would be applied:")
        lines += [f"  {p}" for p in problems]
        return "\n".join(lines)
    for a in shown_actions(plan):
        lines += action_lines(a, shown=shown)
    counts = plan.summary()
    lines.append(", ".join(f"{n} {k}" for k, n in counts.items() if n) or "no resources")
    return "\n".join(lines)
