"""Check summaries rendered from Markdown (CommonMark and tables, by markdown-it-py) into
HTML that is safe on a page whose CSP allows no inline script or style.

A summary is text the Git host's check shows, and a manifest's strings reach it, so it is
rendered as untrusted: raw HTML is text, except the three bare tags the reconciler's own
plan summary folds its diffs with (`<details>`, `<summary>`, `<code>`, no attributes),
which are kept balanced inside the summary's own `<div>`. Links go only to http, https
and mailto addresses or to this site, with `rel="nofollow noopener noreferrer"`; images
are never loaded (their text shows); table alignment is a class, never a style.
"""

from __future__ import annotations

import functools
import html
import re
from collections.abc import Sequence
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.renderer import RendererHTML
from markdown_it.rules_core import StateCore
from markdown_it.token import Token
from markdown_it.utils import OptionsDict
from nodus_gitops.web.html import Safe, esc

_KEPT = re.compile(r"<(/?)(details|summary|code)>", re.IGNORECASE)
_SAFE_SCHEME = re.compile(r"^(?:https?:|mailto:)", re.IGNORECASE)
_ANY_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)
_ALIGN = re.compile(r"^text-align:(left|right|center)$")


def _link_is_safe(url: str) -> bool:
    """http, https and mailto addresses, and paths on this site; no other scheme."""
    url = url.strip()
    if url.startswith(("//", "\\", "/\\")):  # protocol-relative: another host, not a path
        return False
    return bool(_SAFE_SCHEME.match(url)) or not _ANY_SCHEME.match(url)


def _alignment_as_class(state: StateCore) -> None:
    """Table cells' `style="text-align:..."` becomes `class="align-..."`."""
    for token in state.tokens:
        if token.type in ("th_open", "td_open") and token.attrs.get("style"):
            match = _ALIGN.match(str(token.attrs.pop("style")))
            if match:
                token.attrSet("class", f"align-{match.group(1)}")


class _Renderer(RendererHTML):
    """markdown-it's HTML renderer, with raw HTML as text but for the kept tags."""

    def html_block(self, tokens: Sequence[Token], idx: int, options: OptionsDict,
                   env: dict[str, Any]) -> str:
        return _raw_as_text(tokens[idx].content, env)

    def html_inline(self, tokens: Sequence[Token], idx: int, options: OptionsDict,
                    env: dict[str, Any]) -> str:
        return _raw_as_text(tokens[idx].content, env)

    def link_open(self, tokens: Sequence[Token], idx: int, options: OptionsDict,
                  env: dict[str, Any]) -> str:
        tokens[idx].attrSet("rel", "nofollow noopener noreferrer")
        return self.renderToken(tokens, idx, options, env)


def _raw_as_text(raw: str, env: dict[str, Any]) -> str:
    """Raw HTML from the summary: the kept bare tags as tags (a closing tag only for one
    opened here), everything else as the text it reads as."""
    opened: list[str] = env.setdefault("opened", [])
    out, at = [], 0
    for match in _KEPT.finditer(raw):
        out.append(esc(html.unescape(raw[at:match.start()])))
        at = match.end()
        closing, name = match.group(1) == "/", match.group(2).lower()
        if not closing:
            opened.append(name)
            out.append(f"<{name}>")
        elif name in opened:
            while opened:  # closing an outer tag closes those inside it, as HTML does
                inner = opened.pop()
                out.append(f"</{inner}>")
                if inner == name:
                    break
    out.append(esc(html.unescape(raw[at:])))
    return "".join(out)


_md = MarkdownIt("commonmark", {"html": True}, renderer_cls=_Renderer)
_md.enable("table").enable("strikethrough").disable("image")
_md.validateLink = _link_is_safe  # type: ignore[method-assign]
_md.core.ruler.push("alignment_as_class", _alignment_as_class)


@functools.lru_cache(maxsize=512)
def render(text: str) -> Safe:
    """`text` (Markdown) as a `<div class="markdown">` of safe HTML. Kept for the summaries
    rendered last: a page that refreshes renders its summaries once."""
    env: dict[str, Any] = {}
    body = _md.render(text or "", env)
    closing = "".join(f"</{name}>" for name in reversed(env.get("opened", [])))
    return Safe(f'<div class="markdown">{body.strip()}{closing}</div>')

