"""A sync's plan as a diff a reviewer reads field by field.

Each recorded change (`{path, old, new}`, from `plan.diff`) is one field: a short value
(a number, a boolean, a one-line string up to `LONG_STRING` characters) shows as
`old → new`; a long or multi-line string (a script) and a structured value (as YAML)
show as a line diff (difflib) with every line kept, long unchanged runs folded. A create
shows each field of the manifest it sent as added; a delete, the resource as removed.
`None` is an absent field, as the plan records it. Every value reaches the page as text.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml
from nodus_gitops.web.html import Safe, tag

LONG_STRING = 80  # characters; a longer (or multi-line) string is a line diff
CONTEXT = 3  # unchanged lines shown next to a change
FOLD_AT = 4  # a run of more hidden unchanged lines than this is folded


@dataclass(frozen=True)
class Line:
    sign: str  # "-" removed, "+" added, " " unchanged
    text: str


@dataclass(frozen=True)
class FieldDiff:
    path: str
    old: Any
    new: Any
    inline: bool  # shown as old → new; else `lines` is the line diff
    lines: tuple[Line, ...] = ()


def _short(value: Any) -> bool:
    if isinstance(value, str):
        return "\n" not in value and "\r" not in value and len(value) <= LONG_STRING
    return value is None or isinstance(value, bool | int | float)


class _BlockDumper(yaml.SafeDumper):
    """YAML with multi-line strings as literal blocks, so a script diffs line by line."""


def _str_block(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _str_block)


def _yaml(value: Any, dumper: type[yaml.SafeDumper], unicode: bool) -> str:
    return yaml.dump(value, Dumper=dumper, sort_keys=False, allow_unicode=unicode,
                     default_flow_style=False, width=10_000)


def value_text(value: Any) -> str:
    """The text a value is diffed as: a string as itself, anything else as YAML that
    reads back as the value (scripts as literal blocks)."""
    if isinstance(value, str):
        return value
    # PyYAML writes some strings it reads back otherwise (a block of only line breaks, a
    # NEL in a key): then quoted, then with every non-ASCII character escaped.
    for dumper, unicode in ((_BlockDumper, True), (yaml.SafeDumper, True),
                            (yaml.SafeDumper, False)):
        text = _yaml(value, dumper, unicode)
        # checked whole: a literal block's last line break is part of its value
        if yaml.safe_load(text) == value:
            return text.removesuffix("\n").removesuffix("\n...").removesuffix("...")
    return json.dumps(value, indent=2)  # JSON is YAML too


def scalar_text(value: Any) -> str:
    """A short value on one line, as YAML writes it (so `'2'` and `2` differ)."""
    text = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=10_000)
    return text.strip().removesuffix("...").strip()


def _lines(value: Any) -> list[str]:
    return [] if value is None else value_text(value).split("\n")


def line_diff(old: Any, new: Any) -> tuple[Line, ...]:
    """Every line of both values' text, marked removed, added or unchanged."""
    before, after = _lines(old), _lines(new)
    out: list[Line] = []
    matcher = difflib.SequenceMatcher(None, before, after, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            out += [Line(" ", t) for t in before[i1:i2]]
            continue
        out += [Line("-", t) for t in before[i1:i2]]
        out += [Line("+", t) for t in after[j1:j2]]
    return tuple(out)


def field_diff(path: str, old: Any, new: Any) -> FieldDiff:
    if _short(old) and _short(new):
        return FieldDiff(path, old, new, inline=True)
    return FieldDiff(path, old, new, inline=False, lines=line_diff(old, new))


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


def leaves(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(path, value) of every field under `value`: mappings are walked, lists and scalars
    are one field each."""
    if isinstance(value, dict) and value:
        for key, item in value.items():
            yield from leaves(item, f"{path}.{key}" if path else str(key))
    else:
        yield path, value


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
