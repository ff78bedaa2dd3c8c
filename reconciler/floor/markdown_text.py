"""Text from outside (a manifest's names, values and file names, the messages that quote
them) written into Markdown so that it reads as that text, on every host that renders it.

The check summaries and the plan comment are Markdown that GitHub, GitLab, Gitea and the
dashboard render, signed by the reconciler (a GitHub App's check run, its bot's comment).
Their structure is the reconciler's own; every piece of outside text in them goes through
one of the forms here:

- `inline`: text in a paragraph, a list item, a table cell or a link's label, or at the
  start of a line. Each character that means something in CommonMark or GFM anywhere in a
  line is escaped (`\\`, a backtick, `*`, `_`, `[`, `]`, `|`, `~`, `$`), `<`, `>` and `&`
  are written as entities (no HTML, no autolink `<https://...>`, no entity decoded), and a
  character that would start a block at the start of a line (`#`, `-`, `+`, `=`, `/`,
  `1.`, indentation) is escaped there. The punctuation left as it is (`.`, `/`, `:`, `(`,
  `-`, ...) means nothing in the middle of a line, so `spec.timeout` stays readable in a
  raw summary (a git note).
- `code`: a code span, fenced by a longer run of backticks than any inside it (a
  backtick is kept, never replaced), and in a table cell with `|` escaped as GFM wants.
- `html_text`: text inside the reconciler's own HTML (`<summary>`): entities only.
- `fence`: the backtick fence for a code block no line of its body can close.

What the hosts act on in the text they rendered (GitHub's mentions and references run on
the HTML's text, after Markdown, and GFM's extended autolinks on the text after escapes are
resolved, so a backslash does not stop them) is broken by a zero-width space (`&#8203;`):
after each `@` of a mention or an e-mail address; after the sigil of a reference (`#1`,
`owner/repo#1`, `GH-1`, Gitea's and GitLab's `!1`, GitLab's `~bug`, `%v1`, `&epic`,
`$snippet`, `*iteration:`, `[vulnerability:`); before the `:` of `scheme://`,
`mailto:` and `xmpp:`; after the `www` of `www.`; in GitLab's inline diffs (`{+`, `[-`) and
in emoji codes (`:name:`). GFM recognises `www.` only as those four characters in a row,
`http(s)://` only with the scheme's letters right before the `:`, and an e-mail only with
a letter, digit, `-` or `_` right after the `@` (cmark-gfm's autolink extension): a
zero-width space in those places leaves nothing to recognise, and the reader sees the text
as it was written. `inline`'s `then` is the reconciler's own text that follows, read for
what it would complete (a `:` after a text that ends `:name`).

Characters that do not show themselves (controls, bidi controls such as U+202E, zero-width
and other format characters, line and paragraph separators) are written as their escape
(`\\u202e`), so that one name cannot pass for another; in the one-line forms a line break
is too (`\\n`, `\\r`). A file name that is not UTF-8 (its bytes come from Git as lone
surrogates) shows U+FFFD for each odd byte.
"""

from __future__ import annotations

import re
import unicodedata

BREAK = "&#8203;"  # a zero-width space: the text reads the same, no host acts on it

# Characters that do not show themselves: controls (C0, DEL, C1), format characters (bidi
# controls, zero-width characters, the soft hyphen, tags), line and paragraph separators.
_HIDDEN = frozenset(("Cc", "Cf", "Zl", "Zp"))
_KEPT = frozenset("\t\n\r")  # tab, and line breaks (the one-line forms escape those)
_LINE_BREAK = re.compile("[\r\n]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")

# Where a zero-width space goes: each alternative matches the empty string at that place.
_BREAK_AT = re.compile(r"""
    (?<=@)(?=[\w.-])                      # @user, @org/team, user@host, @_user, @.user
  | (?<=[#!~%$&])(?=[\w."])               # #1, owner/repo#1, !1, ~bug, ~"a b", %v1, $1, &epic
  | (?<=[Gg][Hh]-)(?=\d)                  # GH-1
  | (?<=\*)(?=iteration:)                 # GitLab's *iteration:1
  | (?<=\[)(?=[a-z_]+:)                   # GitLab's [vulnerability:1] and the like
  | (?<=[{\[])(?=[+-])                    # GitLab's inline diffs {+ +}, [- -]
  | (?<=:)(?=[\w+-]+:)                    # an emoji code, :name:
  | (?<=.)(?=://)                         # any scheme://
  | (?i:(?<=mailto)|(?<=xmpp))(?=:)       # GFM's extended protocol autolinks
  | (?i:(?<=www))(?=\.)                   # www.
""", re.VERBOSE | re.DOTALL)

# CommonMark and GFM inline syntax anywhere in a line; `$` is GitHub's and GitLab's math.
_MARKDOWN = {c: "\\" + c for c in "\\`*_[]|~$"} | {"<": "&lt;", ">": "&gt;", "&": "&amp;"}
_HTML = {"<": "&lt;", ">": "&gt;", "&": "&amp;"}
# What starts a block (a heading, a list, a setext underline, a quick action) at a line's
# start; `>`, `*`, `_`, `|`, `` ` ``, `~`, `[` and `<` are escaped everywhere already.
_LINE_START = frozenset("#-+=/")
_ORDERED = re.compile(r"\d{1,9}(?=[.)])")


def visible(text: str) -> str:
    """`text` with each character that does not show itself written as its escape (tab and
    line breaks kept), and U+FFFD for each lone surrogate."""
    text = _LONE_SURROGATE.sub("\ufffd", str(text))
    if text.isprintable():  # none of them (they all are unprintable): the usual case
        return text
    return "".join(ascii(c)[1:-1] if c not in _KEPT and unicodedata.category(c) in _HIDDEN
                   else c for c in text)


def one_line(text: str) -> str:
    """`visible(text)` with line breaks written as `\\n` and `\\r` too."""
    return _LINE_BREAK.sub(_escape, visible(text))


def _escape(match: re.Match[str]) -> str:
    return ascii(match.group(0))[1:-1]


def _written(text: str, table: dict[str, str], then: str = "") -> list[str]:
    """Each character of `text` as written, a break before those a host would act on,
    `then` (what is written right after) read for what it completes."""
    at = {m.start() for m in _BREAK_AT.finditer(text + then)}
    return [(BREAK if i in at else "") + table.get(c, c) for i, c in enumerate(text)]


def inline(text: object, *, then: str = "") -> str:
    """`text` as Markdown inline text on one line that renders as `text` (see above), safe
    in a paragraph, a list item, a table cell, a link's label and at a line's start.
    `then`: the reconciler's own text right after it, where that could complete what a
    host acts on (`: ` after a text that ends `:name` makes an emoji code)."""
    shown = one_line(str(text))
    out = _written(shown, _MARKDOWN, then)
    if not out:
        return ""
    first = shown[0]
    if first in _LINE_START:
        out[0] = out[0].replace(first, "\\" + first)
    elif first in " \t":  # indentation: a code block, or stripped
        out[0] = f"&#{ord(first)};"
    else:
        digits = _ORDERED.match(shown)  # `1.` or `1)` starts an ordered list
        if digits:
            n = digits.end()
            out[n] = out[n].replace(shown[n], "\\" + shown[n])
    return "".join(out)


def html_text(text: object) -> str:
    """`text` inside the reconciler's own HTML (a `<summary>`): escaped, on one line (a
    blank line would end the HTML block), with nothing a host acts on."""
    return "".join(_written(one_line(str(text)), _HTML))


def code(text: object, *, in_table: bool = False) -> str:
    """`text` as a code span on one line, every character kept: the fence is longer than
    any run of backticks inside, with a space either side where the content would lose
    one. In a table cell (`in_table`) a `|` is escaped (GFM takes the backslash off); a
    `\\|` in the text cannot be written inside a code span there, so such a text is
    written as `inline` text instead."""
    shown = one_line(str(text))
    if not shown:
        return ""
    if in_table:
        if "\\|" in shown:
            return inline(text)
        shown = shown.replace("|", "\\|")
    ticks = "`" * (max((len(run) for run in re.findall("`+", shown)), default=0) + 1)
    if shown[0] == "`" or shown[-1] == "`" or (
            shown[0] == " " and shown[-1] == " " and shown.strip(" ")):
        shown = f" {shown} "
    return f"{ticks}{shown}{ticks}"


def fence(body: str) -> str:
    """A fence of backticks longer than any run of backticks in `body`, at least three."""
    longest = max((len(run) for run in re.findall("`+", body)), default=0)
    return "`" * max(3, longest + 1)


_WRITTEN = re.compile(r"\\([!-/:-@\[-`{-~])|&(lt|gt|amp|#8203|#32|#9);")
_ENTITY = {"lt": "<", "gt": ">", "amp": "&", "#8203": "", "#32": " ", "#9": "\t"}


def plain(markdown: str) -> str:
    """A line written by `inline` or `html_text` read back as plain text (for a commit
    status's one-line description, which no host renders): escapes and breaks undone."""
    return _WRITTEN.sub(lambda m: m.group(1) or _ENTITY[m.group(2)], markdown)
