"""A stand-in for the Git hosts' Markdown, for the tests of what the reconciler writes:
CommonMark with GFM's tables and strikethrough and raw HTML passed through (markdown-it-py),
then the HTML's elements counted and its text read as GitHub, GitLab and Gitea read it
after rendering: the extended autolinks (`www.`, `http(s)://`, `ftp://`, e-mail,
`mailto:`, `xmpp:`), mentions, references (`#1`, `GH-1`, `!1`, GitLab's `~bug`, `%v1`,
`&epic`, `$1`, `*iteration:`, `[vulnerability:`), GitLab's inline diffs and emoji codes.
It is stricter than any of them: it looks at the text after escapes and entities are
resolved (so `https\\://` is a link here, as the text joined after parsing is in
cmark-gfm), anywhere outside code and links, whatever comes before.

The tests below pin it to what the hosts do with the constructs a summary must not carry.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from html.parser import HTMLParser

import pytest
from markdown_it import MarkdownIt

_md = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])

# What a host acts on in a text node, by kind; each a regular expression of its start.
_ACTED: dict[str, str] = {
    "mention": r"@[\w.-]",  # @user, @org/team, @_user, @.user, and user@host.example
    "reference": r"[#!~%$&][\w.\"]|(?i:GH-\d)|\*iteration:|\[[a-z_]+:",
    "inline diff": r"[{\[][+-]",
    "emoji": r":[\w+-]+:",
    "autolink": r"(?i:https?://|ftp://|www\.|mailto:|xmpp:)",
}
_SKIPPED = {"code", "pre", "a"}  # where no host looks for any of those


@dataclass
class View:
    """A rendered document as a reader and a host meet it."""

    tags: Counter[str]  # each element (and `<!--` comment) by name
    acted: Counter[str]  # what a host would link or act on in its text, by kind
    text: str  # its text content, entities resolved


def _is_host_char(c: str) -> bool:
    """cmark-gfm's `is_valid_hostchar`: neither a space nor punctuation."""
    return not c.isspace() and not (c.isascii() and not c.isalnum()) and \
        not unicodedata.category(c).startswith("P")


def _acted_on(text: str) -> Counter[str]:
    found: Counter[str] = Counter()
    for kind, pattern in _ACTED.items():
        for m in re.finditer(pattern, text):
            if kind == "autolink" and m.group(0).lower() in ("http://", "https://", "ftp://",
                                                             "www."):
                after = text[m.end():m.end() + 1]
                if not after or not _is_host_char(after):
                    continue
            found[kind] += 1
    return found


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: Counter[str] = Counter()
        self.acted: Counter[str] = Counter()
        self.text: list[str] = []
        self.open: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] += 1
        if tag not in ("br", "hr", "img", "input", "meta", "link"):
            self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in self.open:
            while self.open.pop() != tag:
                pass

    def handle_comment(self, data: str) -> None:
        self.tags["<!--"] += 1

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if not _SKIPPED & set(self.open):
            self.acted += _acted_on(data)


def read_html(page: str) -> View:
    reader = _Reader()
    reader.feed(page)
    reader.close()
    return View(reader.tags, reader.acted, "".join(reader.text))


def host_view(markdown: str) -> View:
    """`markdown` as a host renders it, read as above."""
    return read_html(_md.render(markdown))


def words(text: str) -> str:
    """Text as compared: without the reconciler's zero-width breaks, spaces collapsed (a
    table cell or a paragraph's end drops them; a reader sees one)."""
    return " ".join(text.replace("\u200b", "").split())


@pytest.mark.parametrize(("markdown", "tag"), [
    ("[a](https://e.x)", "a"), ("[a][1]\n\n[1]: https://e.x", "a"), ("<https://e.x>", "a"),
    ("![a](https://e.x/i.png)", "img"), ("*a*", "em"), ("_a_", "em"), ("**a**", "strong"),
    ("~~a~~", "s"), ('<a href="https://e.x">a</a>', "a"), ("<img src=x>", "img"),
    ("<script>x</script>", "script"), ("# a", "h1"), ("a\n===", "h1"), ("> a", "blockquote"),
    ("- a", "li"), ("1. a", "li"), ("| a |\n|---|\n| b |", "table"), ("    a", "pre"),
    ("```\na", "pre"), ("<!-- a -->", "<!--"), ("---", "hr"),
])
def test_markup_is_counted(markdown: str, tag: str) -> None:
    assert host_view(markdown).tags[tag] == 1


@pytest.mark.parametrize(("text", "kind"), [
    ("see https://e.x", "autolink"), ("see https\\://e.x", "autolink"),  # escapes resolved
    ("see https&#58;//e.x", "autolink"), ("(www.e.x)", "autolink"), ("_www.e.x", "autolink"),
    ("HTTP://E.X", "autolink"), ("mailto:a@e.x", "autolink"), ("a@e.x", "mention"),
    ("@octocat", "mention"), ("@acme/admins", "mention"), ("@_a @.b", "mention"),
    ("#12", "reference"), ("o/r#12", "reference"), ("GH-12", "reference"),
    ("!3", "reference"), ("~bug", "reference"), ('~"a b"', "reference"),
    ("&amp;epic", "reference"), ("$7", "reference"), ("*iteration:4", "reference"),
    ("[vulnerability:9]", "reference"), ("{+ added +}", "inline diff"),
    ("[- gone -]", "inline diff"), (":shipit:", "emoji"),
])
def test_what_hosts_act_on_is_counted(text: str, kind: str) -> None:
    assert host_view(text).acted[kind] >= 1


@pytest.mark.parametrize("text", [
    "`https://e.x @octocat #12`", "```\n@octocat www.e.x\n```", "[@octocat](https://e.x)",
    "https&#8203;://e.x www&#8203;.e.x @&#8203;octocat #&#8203;12 GH-&#8203;1 :&#8203;x:",
    "https://\u3000e.x", "www.", "a @ b",
])
def test_code_links_and_broken_text_are_not_acted_on(text: str) -> None:
    acted = host_view(text).acted
    assert not acted, acted


def test_text_reads_as_written() -> None:
    view = host_view("a&#8203;b `c\\|d` \\*e\\* &lt;f&gt; &#32; g")
    assert words(view.text) == "ab c\\|d *e* <f> g"
