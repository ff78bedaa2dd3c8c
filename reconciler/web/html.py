"""HTML that escapes by default: `tag()` builds elements whose text and attribute values
are escaped unless they are already `Safe`, and `layout()` wraps a page body in the
shared head, navigation, "as of" line and connection note. Nothing from manifests, logs or
Git reaches a page except through `esc()`.

Live pages: an element marked `data-live="<id>"` is one that app.js replaces with the
element of the same id from a fresh copy of the page, so lists gain their new rows and
counts stay true without a reload. Ids are unique on a page."""

from __future__ import annotations

import html
from collections.abc import Iterable
from datetime import UTC, datetime
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
    return Safe(html.escape(shown(str(value)), quote=True))


def shown(text: str) -> str:
    """`text` with each byte that was not UTF-8 (read with surrogateescape, as Git's
    file names are) written as its escape, `\\xff`: the page names the real byte, and a
    lone surrogate could not be sent at all."""
    if not any("\ud800" <= c <= "\udfff" for c in text):
        return text
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate no byte stands for: its own escape
        return text.encode("utf-8", "backslashreplace").decode()


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
    return "/" + "/".join(quote(_raw(str(s)), safe="") for s in segments)


def _raw(segment: str) -> bytes:
    """A path segment's own bytes (a file name read with surrogateescape keeps them)."""
    try:
        return segment.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return segment.encode("utf-8", "backslashreplace")


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
_GENERATED_FORMAT = "%Y-%m-%d %H:%M:%S UTC"  # how format.now_text() writes it


def _as_of(generated: str) -> Safe:
    """When the page's data was read: a `<time>` (app.js writes it in the viewer's zone)."""
    if not generated:
        return tag("span", class_="as-of", data_live="as-of")
    try:
        moment = datetime.strptime(generated, _GENERATED_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        return tag("span", "as of ", generated, class_="as-of", data_live="as-of")
    return tag("span", "as of ", tag("time", generated, datetime=moment.isoformat()),
               class_="as-of", data_live="as-of")


def layout(title: str, body: Any, *, active: str = "", poll: str | None = None,
           page: str = "", generated: str = "") -> bytes:
    """A whole page. A page given `poll` (its JSON twin in the API) is live: app.js
    re-reads the page itself and swaps in its `data-live` elements. `generated` is
    format.now_text() at the time the page's data was read."""
    nav = tag("nav", *(tag("a", label, href=href,
                           aria_current="page" if key == active else None,
                           class_="active" if key == active else None)
                       for key, href, label in _NAV), aria_label="Main")
    status = tag("span", "live" if poll else "", id="live",
                 class_="live" if poll else "live off")
    doc = Safe("<!doctype html>") + tag(
        "html",
        tag("head", Safe('<meta charset="utf-8">'),
            Safe('<meta name="viewport" content="width=device-width, initial-scale=1">'),
            tag("title", f"{title} · nodus-gitops"),
            Safe('<link rel="icon" href="data:,">'),
            Safe('<link rel="stylesheet" href="/static/app.css">'),
            Safe('<script src="/static/app.js" defer></script>')),
        tag("body",
            tag("a", "Skip to content", href="#main", class_="skip"),
            tag("header", tag("a", "nodus-gitops", href="/", class_="brand"), nav,
                tag("span", _as_of(generated), status, class_="freshness")),
            # Empty unless app.js cannot reach the server; a live region, so it is read out.
            tag("p", id="connection", class_="connection", role="status",
                aria_live="polite"),
            tag("main", tag("h1", title), body, id="main", tabindex="-1"),
            data_page=page or active, data_poll=poll),
        lang="en")
    return doc.encode()


class HeaderCell(Safe):
    """A column's `<th>` built by `th()`, which `table()` uses as it is."""

    __slots__ = ()


def th(content: Any, **attrs: Any) -> HeaderCell:
    """A column header with attributes of its own: `aria_sort` belongs here, on the
    header, not on the sort link inside it."""
    return HeaderCell(tag("th", content, scope="col", **attrs))


def table(headers: Iterable[Any], rows: Iterable[Any], *, live: str | None = None,
          **attrs: Any) -> Safe:
    """A table in its own horizontal scroller, so a wide table never widens the page.
    `live` marks it (rows and headers) for app.js to replace with the fresh page's.
    A header is content for its `<th>`, or a `th(...)`."""
    head = tag("thead", tag("tr", *(h if isinstance(h, HeaderCell) else th(h)
                                    for h in headers)))
    return tag("div", tag("table", head, tag("tbody", *rows), **attrs),
               class_="table-wrap", data_live=live)


def definition_list(items: Iterable[tuple[str, Any]], *, live: str | None = None) -> Safe:
    return tag("dl", *(Safe(tag("dt", k) + tag("dd", v)) for k, v in items), data_live=live)
