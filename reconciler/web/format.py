"""How the dashboard writes times, durations, commits and results, the same on every page.

A time is a `<time>` element: its `datetime` attribute is the instant (ISO 8601, UTC), its
text the UTC time with how long ago; app.js rewrites the text into the viewer's own zone.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from nodus_gitops.floor.results import FAILED_RESULTS
from nodus_gitops.output import age
from nodus_gitops.web import api
from nodus_gitops.web.html import Safe, esc, phase_class, tag, with_query

BAD_RESULTS = FAILED_RESULTS


def _moment(value: str | datetime) -> datetime:
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def duration_text(seconds: float | None) -> str:
    """`45s`, `3m 20s`, `2h 05m`, `3d 4h`; `-` when unknown."""
    if seconds is None or seconds < 0:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def duration(start: str | datetime | None, end: str | datetime | None = None) -> Safe:
    """The time from `start` to `end` (to now while `end` is None) as text; `-` without a
    start."""
    if start is None:
        return esc("-")
    finish = _moment(end) if end is not None else datetime.now(UTC)
    seconds = (finish - _moment(start)).total_seconds()
    return tag("span", duration_text(seconds), class_="duration",
               data_running=True if end is None else None)


def now_text() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def when(value: str | datetime | None) -> Safe:
    """A timestamp as `<time>`: UTC date and time, and how long ago."""
    if value is None:
        return esc("-")
    moment = _moment(value)
    text = f"{moment.astimezone(UTC):%Y-%m-%d %H:%M:%S} ({age(moment)} ago)"
    return tag("time", text, datetime=moment.isoformat())


def one_line(text: str, limit: int) -> str:
    """`text` as one line (each run of spaces and line breaks one space), cut after the
    last whole word within `limit` characters with "…" when it is longer. Mask before
    cutting: a secret cut in two no longer matches what the masker looks for."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[:limit]
    if flat[limit] != " " and (space := cut.rfind(" ")) >= limit // 2:
        cut = cut[:space]  # not inside a word, unless that word is most of the line
    return cut.rstrip(" ,;:") + "…"


def commit_link(repo_url: str | None, sha: str | None) -> Safe:
    if not sha:
        return esc("-")
    url = api.commit_url(repo_url, sha)
    code = tag("code", sha[:12], title=sha)
    return tag("a", code, href=url, rel="noopener noreferrer") if url else code


def result_badge(result: str | None, field: str | None = "result") -> Safe:
    bad = " bad" if result in BAD_RESULTS else ""
    return tag("span", result or "-", class_=phase_class(result) + bad, data_field=field)


def pager_links(base: str, params: Callable[..., dict[str, Any]], page: int, page_size: int,
                total: int, noun: str) -> list[Safe]:
    """`N <noun> · page P of Q` with the previous and next links of a paged list;
    `params(page=...)` gives the list's query with another page (None: the first)."""
    pages = max(1, -(-total // page_size))
    links = [tag("span", f"{total} {noun} · page {page} of {pages}", data_field="total")]
    if page > 1:
        links.insert(0, tag("a", "‹ previous", href=with_query(base, params(
            page=page - 1 if page > 2 else None)), rel="prev"))
    if page < pages:
        links.append(tag("a", "next ›", href=with_query(base, params(page=page + 1)),
                         rel="next"))
    return links
