"""HTML that escapes by default: `tag()` builds elements whose text and attribute values
are escaped unless they are already `Safe`, and `layout()` wraps a page body in the
shared head, navigation and live-update status line. Nothing from manifests, logs or Git
reaches a page except through `esc()`."""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, urlencode


class Safe(str):
    """Text that is already HTML (built by `tag`/`esc`): inserted as it is."""

    __slots__ = ()


def esc(value: Any) -> Safe:
    """`value` as HTML text: escaped unless already `Safe`; None is empty."""
    if isinstance(value, Safe):
        return value
    if value is None:
        return Safe("")
    if isinstance(value, list | tuple):
        return Safe("".join(esc(v) for v in value))
    return Safe(html.escape(str(value), quote=True))


_VOID = frozenset({"br", "hr", "img", "input", "link", "meta"})
_SVG_EMPTY = frozenset({"rect", "circle", "line", "path", "polygon", "polyline"})


def tag(name: str, /, *children: Any, **attrs: Any) -> Safe:
    """`<name attrs>children</name>`. `class_` is `class`; `data_x_y` is `data-x-y`;
    an attribute that is None or False is left out, True is written bare."""
    parts = [name]
    for key, value in attrs.items():
        if value is None or value is False:
            continue
        attr = key.rstrip("_").replace("_", "-")
        parts.append(attr if value is True else f'{attr}="{esc(value)}"')
    opening = " ".join(parts)
    if not children and name in _SVG_EMPTY:
        return Safe(f"<{opening}/>")
    if not children and name in _VOID:
        return Safe(f"<{opening}>")
    return Safe(f"<{opening}>{esc(list(children))}</{name}>")


def path(*segments: str) -> str:
    """A URL path from raw segments, each percent-encoded."""
    return "/" + "/".join(quote(str(s), safe="") for s in segments)


def with_query(base: str, params: dict[str, Any]) -> str:
    kept = {k: v for k, v in params.items() if v not in (None, "")}
    return f"{base}?{urlencode(kept)}" if kept else base


def phase_slug(phase: str | None) -> str:
    """`phase-running`, `phase-failed`, ... for a phase or a sync result."""
    return "phase-" + "".join(c for c in (phase or "unknown").lower() if c.isalnum())


def phase_class(phase: str | None) -> str:
    """The classes of a phase badge."""
    return "phase " + phase_slug(phase)


def phase_badge(phase: str | None, field: str | None = "phase") -> Safe:
    return tag("span", phase or "Unknown", class_=phase_class(phase), data_field=field)


_NAV = (("overview", "/", "Overview"), ("resources", "/resources", "Resources"),
        ("history", "/history", "History"))


def layout(title: str, body: Any, *, active: str = "", poll: str | None = None,
           page: str = "", generated: str = "") -> bytes:
    """A whole page. `poll` is the JSON API URL app.js polls to update the page in place."""
    nav = tag("nav", *(tag("a", label, href=href, class_="active" if key == active else None)
                       for key, href, label in _NAV),
              tag("span", f"as of {generated}" if generated else "", id="live",
                  class_="live", data_generated=generated, role="status"))
    doc = Safe("<!doctype html>") + tag(
        "html",
        tag("head", Safe('<meta charset="utf-8">'),
            Safe('<meta name="viewport" content="width=device-width, initial-scale=1">'),
            tag("title", f"{title} · nodus-gitops"),
            Safe('<link rel="icon" href="data:,">'),
            Safe('<link rel="stylesheet" href="/static/app.css">'),
            Safe('<script src="/static/app.js" defer></script>')),
        tag("body",
            tag("header", tag("a", "nodus-gitops", href="/", class_="brand"), nav),
            tag("main", tag("h1", title), body),
            data_page=page or active, data_poll=poll),
        lang="en")
    return doc.encode()


def table(headers: Iterable[Any], rows: Iterable[Any], **attrs: Any) -> Safe:
    head = tag("thead", tag("tr", *(tag("th", h) for h in headers)))
    return tag("table", head, tag("tbody", *rows), **attrs)


def definition_list(items: Iterable[tuple[str, Any]]) -> Safe:
    return tag("dl", *(Safe(tag("dt", k) + tag("dd", v)) for k, v in items))
