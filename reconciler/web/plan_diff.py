"""A sync's plan as a diff a reviewer reads field by field.

Each recorded change (`{path, old, new}`, from `plan.diff`) is one field: a short value
(a number, a boolean, a one-line string up to `LONG_STRING` characters) shows as
`old → new`; a long or multi-line string (a script) and a structured value (as YAML)
show as a line diff (difflib) with every line kept, long unchanged runs folded. A create
shows each field of the manifest it sent as added; a delete, the resource as removed.
`None` is an absent field, as the plan records it. Every value reaches the page as text.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from nodus_gitops.plan_diff import (
    CONTEXT,
    FieldDiff,
    Line,
    field_diff,
    leaves,
    scalar_text,
)
from nodus_gitops.web.html import Safe, tag

FOLD_AT = 4  # a run of more hidden unchanged lines than this is folded


def _what(d: FieldDiff) -> str:
    return "added" if d.old is None else "removed" if d.new is None else "changed"


_LINE_CLASS = {"-": "line del", "+": "line ins", " ": "line"}


def _pre(lines: list[Line]) -> Safe:
    return tag("pre", *(tag("span", f"{line.sign} {line.text}\n",
                            class_=_LINE_CLASS[line.sign]) for line in lines))


def _chunks(lines: tuple[Line, ...]) -> Iterator[Safe]:
    """The lines as `<pre>` blocks, with long unchanged runs folded in `<details>`."""
    shown: list[Line] = []
    i = 0
    while i < len(lines):
        if lines[i].sign != " ":
            shown.append(lines[i])
            i += 1
            continue
        end = i
        while end < len(lines) and lines[end].sign == " ":
            end += 1
        run = list(lines[i:end])
        head = CONTEXT if i > 0 else 0  # context after a change
        tail = CONTEXT if end < len(lines) else 0  # context before one
        if len(run) - head - tail > FOLD_AT:
            shown += run[:head]
            if shown:
                yield _pre(shown)
            hidden = run[head:len(run) - tail]
            yield tag("details", tag("summary", f"{len(hidden)} unchanged lines"),
                      _pre(hidden), class_="unchanged")
            shown = run[len(run) - tail:]
        else:
            shown += run
        i = end
    if shown:
        yield _pre(shown)


def render_field(d: FieldDiff) -> Safe:
    """One field as a list item: `path old → new`, or `path` and its line diff."""
    what = _what(d)
    label = tag("code", d.path or "(whole value)")
    mark = tag("span", what, class_="mark")
    if not d.inline:
        return tag("li", label, " ", mark, tag("div", *_chunks(d.lines), class_="line-diff"),
                   class_=f"change {what} lines")
    if d.old is None:
        values: Any = tag("code", scalar_text(d.new))
    elif d.new is None:
        values = tag("code", scalar_text(d.old))
    else:
        values = Safe(tag("code", scalar_text(d.old)) + " → " + tag("code", scalar_text(d.new)))
    return tag("li", label, " ", mark, " ", values, class_=f"change {what}")


def render_action(action: dict[str, Any], manifest: dict[str, Any] | None) -> Safe:
    """What one planned action changes: its reason, then its fields. `manifest`: what a
    create sent (from its journal entry), None when not journaled."""
    kind, name = action.get("kind"), action.get("name")
    reason = action.get("reason")
    parts: list[Any] = [tag("p", reason, class_="reason")] if reason else []
    fields = [field_diff(c.get("path") or "", c.get("old"), c.get("new"))
              for c in action.get("changes") or []]
    if action.get("action") == "create" and not fields:
        if manifest is None:
            parts.append(tag("p", "The manifest of this create is not journaled with this "
                             "sync.", class_="muted"))
        else:
            fields = [field_diff(path, None, value) for path, value in leaves(manifest)]
    if action.get("action") == "delete":
        parts.append(tag("p", tag("span", "removed", class_="mark"), " ",
                         tag("code", f"{kind}/{name}"), ": the whole resource goes from the "
                         "backend and the inventory.", class_="change removed"))
    if fields:
        parts.append(tag("ul", *(render_field(f) for f in fields), class_="plan-diff"))
    return Safe("".join(parts))
