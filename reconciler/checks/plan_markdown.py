"""A plan review as Markdown: the plan check's summary and the pull-request comment.

Most important first: the verdict, the cost of what merging would start and the budget
left, then the reason of each blocked action, the problems (file:line, linked to the
commit when the host has a web view), the reasons of the other actions (a replace
deletes the old run), the table of actions, and each change as a diff in a folded
`<details>` (long strings and scripts as a unified line diff). The text stays
within the target's size limit: what does not fit is left out whole, item by item in
that order, and a last line says what was left out. Lengths are counted in UTF-16 code
units, never fewer than the hosts' own count of characters.

What comes from the manifests (names, file names, keys, values, problems, reasons) goes in
through `floor.markdown_text`: in code spans, in a code fence longer than any run of
backticks inside it (each line of a diff after its `-`, `+` or ` `: a line break in a key
is shown as `\n`), escaped text on one line, or HTML-escaped in the `<summary>` of a fold,
with every mention, reference and bare link broken. A manifest cannot close a block, forge
a marker, start a heading or a quick action, emphasise, ping someone, or plant a link or a
cross-reference in a comment the reconciler signs, and characters that do not show
themselves are shown escaped (`\u202e`), so that a name cannot pass for another.
"""

from __future__ import annotations

import difflib
import html
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import yaml
from nodus_gitops.checks.review import PlanReview
from nodus_gitops.floor.markdown_text import code, fence, html_text, inline, one_line
from nodus_gitops.floor.masking import Masker, mask_change
from nodus_gitops.floor.problems import Problem
from nodus_gitops.frozen import thaw
from nodus_gitops.hosts.client import without_lone_surrogates
from nodus_gitops.plan import Action, ActionType, Change, Plan

FOLD_ROWS = 20  # a longer table is folded
LONG_STRING = 80  # characters; a longer (or multi-line) string is shown as a line diff
SUMMARY_FIELDS = 4  # changed fields named in a diff's one-line summary
FOOTER_ROOM = 400  # kept free for the last lines


@dataclass(frozen=True)
class Target:
    """Where a text goes: the host's name and size limit, and how it links to a file
    (`link(path, line)`: the file at the reviewed commit; None: no links)."""

    host: str
    limit: int
    link: Callable[[str, int], str] | None = None


def size(text: str) -> int:
    """Characters as UTF-16 code units: what JavaScript counts, never less than Ruby."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def counts(plan: Plan) -> str:
    summary = plan.summary()
    text = ", ".join(f"{n} {k}" for k, n in summary.items() if n and k != "noop")
    unchanged = summary.get("noop", 0)
    if unchanged:
        text = f"{text}, {unchanged} unchanged" if text else f"{unchanged} unchanged"
    return text or "nothing to do"


def first_line(review: PlanReview) -> str:
    """The line a one-line status shows: what the plan of which commit is."""
    if review.problems or review.plan is None:
        n = len(review.problems)
        return (f"Plan of {review.commit[:7]} against `{review.target_branch}`: "
                f"{n} problem{'s' if n != 1 else ''}")
    return f"Plan of {review.commit[:7]} against `{review.target_branch}`: {counts(review.plan)}"


def render(review: PlanReview, target: Target, *, marker: str = "") -> str:
    """The review as Markdown within `target.limit`; with a `marker` (a comment), the
    marker opens the text and a heading follows it."""
    head = [marker, f"#### nodus-gitops plan of `{review.binding_id}` (project "
                    f"`{review.project}`)"] if marker else []
    head += [first_line(review), "", _verdict(review), *_money(review)]
    changed = [a for a in review.plan.actions if a.changes] if review.plan else []
    sections: list[tuple[str, str, list[str], Iterable[str], int]] = [
        _all("blocked reasons", "", ["", "**Blocked**", ""], _blocked(review, target)),
        _all("problems", "", ["", f"**Problems ({len(review.problems)})**", ""],
             [_problem(p, target) for p in review.problems]),
        _all("notes", "", ["", "**Notes**", ""], _notes(review)),
        *_table(review, target),
        # Made one by one, only while they fit: a diff can cost a YAML dump of a script.
        ("diffs", "", ["", "**Changes**", ""], (_diff(a) for a in changed), len(changed)),
    ]
    footer = f"_{target.host} · nodus-gitops instance `{review.instance}` · commit " \
             f"{review.commit[:12]}_" if marker else ""
    room = target.limit - size("\n".join(head)) - FOOTER_ROOM
    body: list[str] = []
    left_out: list[str] = []
    for what, closing, opening, items, total in sections:
        if not total:
            continue
        shown: list[str] = []
        used = size("\n".join(opening)) + size(closing) + 2
        for item in items:
            if used + size(item) + 1 > room:
                break  # the rest is not even made
            used += size(item) + 1
            shown.append(item)
        if shown:
            body += [*opening, *shown] + ([closing] if closing else [])
            room -= used
        if len(shown) < total:
            left_out.append(f"{total - len(shown)} {what}")
    tail = [""]
    if left_out:
        tail.append(f"_Left out to stay within {target.host}'s {target.limit:,}-character "
                    f"limit: {', '.join(left_out)}. `nodus-gitops plan` shows the whole "
                    "plan._")
    if footer:
        tail.append(footer)
    text = "\n".join([*head, *body, *tail]).rstrip() + "\n"
    text = text if size(text) <= target.limit else _cut(text, target.limit)
    return without_lone_surrogates(text)  # one unit for one: the size holds


# -- the parts ----------------------------------------------------------------------------

def _verdict(review: PlanReview) -> str:
    if review.problems or review.plan is None:
        n = len(review.problems)
        return f"**{n} problem{'s' if n != 1 else ''}**: merging this commit would apply " \
               "nothing; the plan check fails."
    blocked = len(review.plan.blocked)
    if blocked:
        return f"**{blocked} blocked**: merging would apply the rest and leave these as " \
               "they are; the plan check fails."
    if review.plan.has_changes:
        return "Merging applies this plan."
    return "Nothing to apply: what is recorded already matches this commit."


def _money(review: PlanReview) -> list[str]:
    lines = []
    plan, cost = review.plan, review.cost
    starts = [a for a in plan.actions if a.action in (ActionType.CREATE, ActionType.REPLACE)] \
        if plan is not None else []
    if cost is not None and cost.per_resource:
        runs = len(cost.per_resource)
        line = (f"**Estimated cost of what merging would start: {_usd(cost.total)}** "
                f"({runs} run{'s' if runs != 1 else ''}")
        line += f"; {cost.unknown} without an estimate)" if cost.unknown else ")"
        lines.append(line)
    elif starts:
        lines.append(f"Merging would start {len(starts)} run"
                     f"{'s' if len(starts) != 1 else ''}; the backend gives no estimate.")
    budget = review.budget
    if budget is not None:
        b = budget.budget
        left = (f"{_usd(budget.left)} left" if budget.left >= 0
                else f"over by {_usd(-budget.left)}")
        line = (f"**Budget of project `{b.project}`: {left}** of {_usd(b.limit_usd)} this "
                f"{b.period.value} (since {budget.start:%Y-%m-%d}, {_usd(budget.spent)} "
                "spent)")
        after = review.after_merge
        if cost is not None and cost.per_resource and after is not None:
            line += (f"; {_usd(after)} left after this merge's estimate" if after >= 0 else
                     f"; this merge's estimate would exceed it by {_usd(-after)}")
        lines.append(line + ".")
    return ([""] + lines) if lines else []


def _blocked(review: PlanReview, target: Target) -> list[str]:
    if review.plan is None:
        return []
    return [f"- {code(a.key.short)} ({_file(a.file, 1, target)}): {inline(a.reason)}"
            for a in review.plan.blocked]


def _notes(review: PlanReview) -> list[str]:
    """The reason of every other action that has one: a replace deletes the old run,
    a drift is reported, a moved file is recorded."""
    if review.plan is None:
        return []
    return [f"- {code(a.key.short)} {a.action.value}: {inline(a.reason)}"
            for a in review.plan.actions if a.reason and a.action is not ActionType.BLOCKED]


def _problem(p: Problem, target: Target) -> str:
    where = _file(p.file, max(p.line, 1), target, label=f"{p.file}:{p.line}")
    what = f"{code(f'{p.kind}/{p.name}')}: {inline(p.path, then=':')}: " if p.path else ""
    return f"- {where} {what}{inline(Masker().text(p.message))}"


def _all(what: str, closing: str, opening: list[str],
         items: list[str]) -> tuple[str, str, list[str], Iterable[str], int]:
    return what, closing, opening, items, len(items)


def _table(review: PlanReview,
           target: Target) -> list[tuple[str, str, list[str], Iterable[str], int]]:
    plan = review.plan
    if plan is None or not plan.actions:
        return []
    priced = review.cost.per_resource if review.cost else {}
    header = "| Action | Resource | File |" + (" Estimate |" if priced else "")
    rule = "|---|---|---|" + ("---:|" if priced else "")
    rows = []
    for a in plan.actions:
        row = (f"| {a.action.value} | {code(a.key.short, in_table=True)} | "
               f"{_file(a.file, 1, target, in_table=True)} |")
        if priced:
            value = priced.get(a.key)
            cell = _usd(value) if value is not None else ("unknown" if a.key in priced else "")
            row += f" {cell} |"
        rows.append(row)
    if len(rows) > FOLD_ROWS:
        opening = ["", f"<details><summary>All {len(rows)} actions</summary>", "", header, rule]
        return [("rows of the table", "\n</details>", opening, rows, len(rows))]
    return [("rows of the table", "", ["", header, rule], rows, len(rows))]


def _diff(action: Action) -> str:
    paths = [c.path for c in action.changes]
    named = ", ".join(paths[:SUMMARY_FIELDS]) + (
        f" and {len(paths) - SUMMARY_FIELDS} more" if len(paths) > SUMMARY_FIELDS else "")
    lines: list[str] = []
    masker = Masker()
    for change in action.changes:
        lines += _change_lines(_masked(masker, change))
    body = "\n".join(one_line(line) for line in lines)
    ticks = fence(body)
    return (f"<details><summary><code>{html.escape(one_line(action.key.short))}"
            f"</code> {action.action.value}: {html_text(named)}</summary>\n\n{ticks}diff\n"
            f"{body}\n{ticks}\n\n</details>")


def _masked(masker: Masker, change: Change) -> dict[str, Any]:
    """`change` as plain values, masked as the dashboard masks them (`spec.env.DB_PWD` by
    its name, any value by its looks): a pull request's readers may be many more than the
    manifest's."""
    return mask_change(masker, {"path": change.path, "old": thaw(change.old),
                                "new": thaw(change.new)})


def _change_lines(change: dict[str, Any]) -> list[str]:
    """The diff lines of one change (`path`, `old`, `new`), each starting with `-`, `+`,
    ` ` or `@@`."""
    old, new = change["old"], change["new"]
    path = change["path"].replace("\r", "\\r").replace("\n", "\\n")  # one line, as YAML would
    if _short(old) and _short(new):
        lines = []
        if old is not None:
            lines.append(f"- {path}: {_scalar(old)}")
        if new is not None:
            lines.append(f"+ {path}: {_scalar(new)}")
        return lines
    before = _yaml_lines(change["path"], old) if old is not None else []
    after = _yaml_lines(change["path"], new) if new is not None else []
    diff = list(difflib.unified_diff(before, after, lineterm="", n=3))
    return [f"@@ {path} @@"] + [line for line in diff[2:] if not line.startswith("@@")]


def _short(value: Any) -> bool:
    if isinstance(value, str):
        return "\n" not in value and len(value) <= LONG_STRING
    return value is None or isinstance(value, bool | int | float)


def _scalar(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True, allow_unicode=True,
                          width=10_000).strip().removesuffix("...").strip()


class _BlockDumper(yaml.SafeDumper):
    """YAML with multi-line strings as literal blocks, so a script diffs line by line."""


def _str_block(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _str_block)


def _yaml_lines(path: str, value: Any) -> list[str]:
    if isinstance(value, str) and "\n" not in value:  # a long one-liner: a word a line
        value = value.split(" ")
    text = yaml.dump({path: value}, Dumper=_BlockDumper, default_flow_style=False,
                     allow_unicode=True, sort_keys=False, width=100)
    return text.splitlines()


def _file(path: str, line: int, target: Target, label: str | None = None, *,
          in_table: bool = False) -> str:
    if target.link is None:
        return code(label or path, in_table=in_table)
    return f"[{inline(label or path)}]({target.link(path, line)})"


def _usd(value: Decimal) -> str:
    return f"${value:,.2f}"


def _cut(text: str, limit: int) -> str:
    """A last resort for a limit too small even for the verdict: cut, marked as cut."""
    if limit < 1:
        return ""
    excess = size(text) - (limit - 1)  # each character is 1 or 2 units: cutting
    return text[: len(text) - excess] + "…"  # `excess` characters always suffices
