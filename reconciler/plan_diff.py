"""How a plan's change reads: which values are short (`old -> new`) and which are a line
diff, and how any value is written as text. The dashboard's diff (web/plan_diff) and the
terminal's (plan_text) both read changes through this, so they say the same change the
same way.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml

LONG_STRING = 80  # characters; a longer (or multi-line) string is a line diff
CONTEXT = 3  # unchanged lines shown next to a change


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


def leaves(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(path, value) of every field under `value`: mappings are walked, lists and scalars
    are one field each."""
    if isinstance(value, dict) and value:
        for key, item in value.items():
            yield from leaves(item, f"{path}.{key}" if path else str(key))
    else:
        yield path, value
