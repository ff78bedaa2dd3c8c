"""A sync's plan as a diff: short values as old -> new, long strings and scripts (and
structured values) as a line diff, creates as their new fields, deletes as removed; and,
for any JSON values, the diff's lines give back both values' text and the HTML holds
no markup of theirs."""

from __future__ import annotations

import html
import re
from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from nodus_gitops.plan_diff import field_diff, scalar_text, value_text
from nodus_gitops.web.plan_diff import render_action, render_field

from tests.web.seed import XSS_IMG, XSS_SCRIPT

# The markup plan_diff writes: these tags and nothing else.
OWN_TAG = re.compile(r"</?(?:div|pre|span|code|details|summary|ul|li|p|a|del|ins)"
                     r'(?:\s[a-z-]+="[^"<>]*")*>')


def text_of(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def test_a_short_change_is_old_to_new() -> None:
    d = field_diff("spec.maxParallel", 1, 2)
    assert d.inline and d.lines == ()
    out = render_field(d)
    assert "<code>spec.maxParallel</code>" in out
    assert "<code>1</code> → <code>2</code>" in out
    assert '<span class="mark">added</span> <code>high</code>' in render_field(
        field_diff("spec.priority", None, "high"))
    assert '<span class="mark">removed</span> <code>high</code>' in render_field(
        field_diff("spec.priority", "high", None))
    # A string and a number that print alike are told apart.
    assert "<code>&#x27;2&#x27;</code> → <code>2</code>" in render_field(
        field_diff("spec.x", "2", 2))


def test_a_script_is_a_line_diff() -> None:
    old = "set -e\npython prepare.py\npython train.py --epochs 3\necho done\n"
    new = "set -e\npython prepare.py\npython train.py --epochs 5\necho done\n"
    d = field_diff("spec.command[2]", old, new)
    assert not d.inline
    assert [(line.sign, line.text) for line in d.lines] == [
        (" ", "set -e"), (" ", "python prepare.py"), ("-", "python train.py --epochs 3"),
        ("+", "python train.py --epochs 5"), (" ", "echo done"), (" ", "")]
    out = render_field(d)
    assert '<span class="line del">- python train.py --epochs 3\n</span>' in out
    assert '<span class="line ins">+ python train.py --epochs 5\n</span>' in out


def test_a_long_single_line_string_is_a_line_diff() -> None:
    d = field_diff("metadata.annotations.note", "x" * 81, "y" * 81)
    assert not d.inline and [line.sign for line in d.lines] == ["-", "+"]


def test_long_unchanged_runs_fold_but_stay_on_the_page() -> None:
    old = "\n".join(f"line {i}" for i in range(40))
    new = old.replace("line 20", "line twenty")
    out = render_field(field_diff("spec.script", old, new))
    assert "<summary>17 unchanged lines</summary>" in out
    assert "line 2\n" in text_of(out) and "line 39" in text_of(out)


def test_a_structured_value_diffs_as_yaml() -> None:
    d = field_diff("spec.env", {"A": "1", "B": "2"}, {"A": "1", "B": "3", "C": "x"})
    assert [(line.sign, line.text) for line in d.lines] == [
        (" ", "A: '1'"), ("-", "B: '2'"), ("+", "B: '3'"), ("+", "C: x")]


def test_a_create_shows_its_new_fields() -> None:
    manifest = {"apiVersion": "nodus.dev/v1", "kind": "Job",
                "metadata": {"name": "hello", "labels": {"team": XSS_SCRIPT}},
                "spec": {"image": "nodus/pytorch", "command": ["python", "hello.py"]}}
    action = {"action": "create", "kind": "Job", "name": "hello", "file": "jobs/hello.yaml",
              "changes": [], "reason": ""}
    out = render_action(action, manifest)
    assert out.count("added") >= 5
    assert "<code>spec.image</code>" in out and "<code>metadata.labels.team</code>" in out
    assert XSS_SCRIPT not in out and "&lt;script&gt;" in out
    assert "python" in text_of(out) and "hello.py" in text_of(out)
    unknown = render_action(action, None)
    assert "not journaled" in unknown


def test_a_delete_shows_the_resource_removed() -> None:
    out = render_action({"action": "delete", "kind": "Job", "name": "old", "file": "jobs/o.yaml",
                         "changes": [], "reason": "removed from Git"}, None)
    assert "removed" in out and "Job/old" in text_of(out) and "removed from Git" in out


def test_planted_strings_stay_text() -> None:
    action = {"action": "patch", "kind": "Job", "name": XSS_IMG, "file": XSS_SCRIPT,
              "reason": XSS_IMG, "changes": [
                  {"path": f"metadata.labels.{XSS_SCRIPT}", "old": XSS_IMG, "new": XSS_SCRIPT},
                  {"path": "spec.script", "old": XSS_SCRIPT * 9, "new": XSS_IMG + "\n" * 2}]}
    out = render_action(action, None)
    assert XSS_SCRIPT not in out and XSS_IMG not in out and "<img" not in out
    assert not OWN_TAG.sub("", out).count("<")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False,
                                                          allow_infinity=False)
    | st.text(max_size=120),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                               max_size=4),
    max_leaves=12)


@settings(max_examples=400, deadline=None)
@given(json_values, json_values)
def test_the_lines_give_back_both_values(old: Any, new: Any) -> None:
    d = field_diff("spec.x", old, new)
    if d.inline:
        assert d.lines == ()
        return
    kept_new = [line.text for line in d.lines if line.sign in " +"]
    kept_old = [line.text for line in d.lines if line.sign in " -"]
    assert "\n".join(kept_new) == (value_text(new) if new is not None else "") or (
        new is None and kept_new == [])
    assert "\n".join(kept_old) == (value_text(old) if old is not None else "") or (
        old is None and kept_old == [])
    for value in (old, new):
        if value is not None and not isinstance(value, str):
            assert yaml.safe_load(value_text(value)) == value  # the text is the value


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40), json_values, json_values)
def test_rendering_never_writes_their_markup(path: str, old: Any, new: Any) -> None:
    d = field_diff(path, old, new)
    out = render_field(d)
    assert "<" not in OWN_TAG.sub("", out), out
    shown = text_of(out)
    for value in (old, new):
        if value is None:
            continue
        if d.inline:  # one line, as YAML writes it (a control character escaped)
            assert scalar_text(value) in shown, (value, shown)
        else:
            assert all(part in shown for part in value_text(value).split("\n")), (value, shown)


def test_a_command_whose_script_ends_in_a_line_break_is_diffed_as_its_literal_block() -> None:
    # Every `|` block ends in a line break; the text must read back whole, that break
    # included, or the script falls back to one quoted line with blank lines between.
    from nodus_gitops.plan_diff import value_text

    assert value_text(["bash", "-c", "echo a\necho b\n"]).split("\n") == [
        "- bash", "- -c", "- |", "  echo a", "  echo b"]
