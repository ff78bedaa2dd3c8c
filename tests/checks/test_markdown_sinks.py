"""Every Markdown the reconciler writes from a manifest's text (the sync check, the run
check, the plan check and the plan comment) shows that text as text: rendered as a host
renders it (test_markdown_host.py), it holds no element and nothing a host acts on (a link,
an image, emphasis, raw HTML, a mention, a reference) that the same document written with
benign text does not hold, and its text content still holds every character as written
(invisible ones as their escapes, a line break as `\\n`)."""

from __future__ import annotations

import string
import unicodedata
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nodus_gitops.checks import compose
from nodus_gitops.checks.comments import GITHUB_LIMIT, marker
from nodus_gitops.checks.plan_markdown import Target, render
from nodus_gitops.checks.review import PlanReview
from nodus_gitops.floor import markdown_text
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.floor.masking import Masker
from nodus_gitops.floor.problems import Problem
from nodus_gitops.plan import Action, ActionType, Change, Plan
from nodus_gitops.state.records import InventoryRecord

from tests.checks.test_markdown_host import View, host_view, words

SHA = "ce587453ced02b1526dfb4cb910479d431683101"
REPO = "https://github.com/octo-org/gpu-jobs.git"

# Markdown and HTML that must stay text, and what breaks a line, a table or a code span.
PIECES = [
    "[a](https://e.x)", "[a][1]", "\n[1]: https://e.x\n", "<https://e.x>", "https://e.x/p",
    "http://e.x", "www.e.x", "WWW.e.x", "a@e.x", "mailto:a@e.x", "![a](https://e.x/i.png)",
    "*a*", "_a_", "**a**", "__a__", "~~a~~", "~a~", "@octocat", "@acme/admins", "@_a", "@.a",
    "#12", "GH-12", "!12", "o/r#1", "~bug", "%v1", "&epic", "$7", "$x$", "*iteration:1",
    "[vulnerability:1]", "{+a+}", "[-a-]", ":shipit:", '<a href="https://e.x">a</a>',
    "<img src=x onerror=alert(1)>", "<script>alert(1)</script>", "<b>", "</details>",
    "<details>", "<!--", "-->", "&lt;", "&#64;x", "&amp;", "&", "```", "`", "``", "~~~",
    "|", "\\|", "\\", "\n", "\r\n", "\r", "\n\n", "# h", "- ", "+ ", "1. ", "1) ", "> ",
    "===", "---", "    ", "\t", "/approve", "\u202e", "\u200b", "\u2066", "\u2028", "\x1b",
    "\xad", "\udcff", " ", "é", "名",
]
# Never empty: a field left empty is not shown at all (a reason, a fix), and benign text
# keeps it empty.
hostile = st.lists(st.sampled_from(PIECES) | st.text(string.printable, min_size=1, max_size=3),
                   min_size=1, max_size=10).map("".join)

FIELDS = ("file", "kind", "name", "path", "message", "reason", "fix", "phase", "cell",
          "field", "value")


def shown(text: str) -> str:
    """How a reader sees `text`: each character that does not show itself (a control, a
    format character, a line or paragraph separator, a line break) as its escape, U+FFFD
    for a lone surrogate (a file name's byte that is not UTF-8)."""
    out = []
    for c in text:
        if "\ud800" <= c <= "\udfff":
            out.append("\ufffd")
        elif c != "\t" and unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp"):
            out.append(ascii(c)[1:-1])
        else:
            out.append(c)
    return "".join(out)


def _review(plan: Plan | None, problems: tuple[Problem, ...] = ()) -> PlanReview:
    return PlanReview("team-a", REPO, "ci", "training", "main", SHA, plan, problems)


def _linked() -> Target:
    return Target("GitHub", GITHUB_LIMIT,
                  lambda path, line: f"https://github.com/octo-org/gpu-jobs/blob/{SHA}/f#L1")


def sinks(t: dict[str, str]) -> dict[str, str]:
    """Each Markdown the reconciler writes, with the manifest's text `t`."""
    problem = Problem(t["file"], 3, t["kind"], t["name"], t["path"], t["message"])
    key = ResourceKey("Job", "training", t["name"])
    created = Plan((Action(ActionType.CREATE, key, t["file"], reason=t["reason"]),))
    changed = Plan((Action(ActionType.BLOCKED, key, t["file"], reason=t["reason"],
                           changes=(Change(f"metadata.annotations.{t['field']}", t["value"],
                                           t["reason"]),)),))
    records = [
        InventoryRecord(key, "team-a", {}, "h", phase=t["phase"], reason=t["reason"],
                        fix=t["fix"]),
        InventoryRecord(ResourceKey("Sweep", "training", t["name"]), "team-a", {}, "h",
                        phase="Succeeded", status={"best": {"byCost": t["cell"],
                                                            "byThroughput": t["cell"]}})]
    where = ("team-a", REPO, SHA, "ci")
    return {
        "sync check of an invalid commit": compose.sync_check(
            *where, "invalid", "", [problem], None, {}).summary,
        "sync check of an applied commit": compose.sync_check(
            *where, "applied", "1 created", [], created, {"created": 1}).summary,
        "sync check of an error": compose.sync_check(
            *where, "error", t["message"], [], None, {}).summary,
        "run check": compose.run_check(*where, records).summary,
        "plan check of problems": compose.plan_check(_review(None, (problem,))).summary,
        "plan check of changes": compose.plan_check(_review(changed)).summary,
        "plan comment of problems": render(_review(None, (problem,)), _linked(),
                                           marker=marker("ci", "team-a")),
        "plan comment of changes": render(_review(changed), _linked(),
                                          marker=marker("ci", "team-a")),
    }


def benign(t: dict[str, str]) -> dict[str, str]:
    return {k: "benign" if v else "" for k, v in t.items()}


def assert_text_only(hostile_view: View, benign_view: View, texts: list[str],
                     where: str, *, on_a_host: bool = True) -> None:
    """`hostile_view` has the elements of `benign_view` (a code span may become escaped
    text, never the reverse) and, `on_a_host`, the text a host acts on, and reads every
    one of `texts`."""
    tags, expected = hostile_view.tags.copy(), benign_view.tags.copy()
    assert tags.pop("code", 0) <= expected.pop("code", 0), where
    assert tags == expected, (where, tags - expected, expected - tags)
    if on_a_host:
        assert hostile_view.acted == benign_view.acted, (where, hostile_view.acted)
    text = words(hostile_view.text)
    for original in texts:
        assert words(shown(original)) in text, (where, original, text)


def check_every_sink(t: dict[str, str], render_as: Callable[[str], View] = host_view,
                     shown_fields: tuple[str, ...] = FIELDS[:-2]) -> dict[str, Any]:
    hostile_docs, benign_docs = sinks(t), sinks(benign(t))
    for where, doc in hostile_docs.items():
        fields = [f for f in shown_fields if f in _FIELDS_OF[where]]
        # a message and a fix are masked before they are written (`floor.masking`): what
        # looks like a password in a URL is read as its mask, the rest as written
        texts = [Masker().text(t[f]) if f in _MASKED else t[f] for f in fields]
        assert_text_only(render_as(doc), render_as(benign_docs[where]), texts, where)
    return hostile_docs


_MASKED = ("message", "fix")
# Which fields each sink shows as they are (the diff's values are shown as YAML).
_FIELDS_OF = {
    "sync check of an invalid commit": ("file", "kind", "name", "path", "message"),
    "sync check of an applied commit": ("file", "name", "reason"),
    "sync check of an error": ("message",),
    "run check": ("name", "phase", "reason", "fix", "cell"),
    "plan check of problems": ("file", "kind", "name", "path", "message"),
    "plan check of changes": ("file", "name", "reason"),
    "plan comment of problems": ("file", "kind", "name", "path", "message"),
    "plan comment of changes": ("file", "name", "reason"),
}


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.fixed_dictionaries({f: hostile for f in FIELDS}))
def test_no_manifest_text_becomes_markup_in_any_check_or_comment(t: dict[str, str]) -> None:
    check_every_sink(t)


def test_each_construct_alone_stays_text_in_each_field() -> None:
    for piece in PIECES:
        for field in FIELDS:
            t = dict.fromkeys(FIELDS, "x") | {field: f"a {piece} b"}
            check_every_sink(t)


def test_a_commit_status_description_reads_the_message_as_written() -> None:
    from nodus_gitops.checks.base import describe

    message = "fetch of https://e.x failed: <html> *bad* @octocat #1 a_b"
    run = compose.sync_check("team-a", REPO, SHA, "ci", "error", message, [], None, {})
    assert run.summary != message  # the summary is escaped Markdown
    assert describe(run, 140) == f"sync failed: {message}"
    assert markdown_text.plain(markdown_text.inline(message)) == message
