"""The dashboard's and the JSON API's GET routes: a path pattern and the function that
answers it. The server (server.py) matches a request's path against this table in order."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nodus_gitops.web import api, detail, history, pages, source_view, sync_page, tree
from nodus_gitops.web.openapi import SPEC

if TYPE_CHECKING:
    from nodus_gitops.service import Service

_SEG = r"([^/]+)"
_KEY = rf"{_SEG}/{_SEG}/{_SEG}"

HTML = "text/html; charset=utf-8"
JSON = "application/json"

Route = tuple[re.Pattern[str], Callable[..., tuple[int, Any, dict[str, str], str]]]


def _html(result: bytes | tuple[int, bytes]) -> tuple[int, Any, dict[str, str], str]:
    status, body = result if isinstance(result, tuple) else (200, result)
    return status, body, {}, HTML


def _json(reply: api.Reply) -> tuple[int, Any, dict[str, str], str]:
    status, body, headers = reply
    return status, body, headers, JSON


def table(s: Service) -> list[Route]:
    """(pattern, handler(query params, *path groups) -> (status, body, headers, type))."""
    entries: list[tuple[str, Callable[..., tuple[int, Any, dict[str, str], str]]]] = [
        (r"/", lambda p: _html(pages.overview(s))),
        (r"/resources", lambda p: _html(pages.resources(s, p))),
        (rf"/resources/{_KEY}", lambda p, *k: _html(detail.resource_page(s, *k))),
        (rf"/resources/{_KEY}/logs", lambda p, *k: _html(detail.logs_page(s, *k, p))),
        (r"/history", lambda p: _html(history.history(s, p))),
        (r"/syncs/(\d{1,18})", lambda p, i: _html(sync_page.sync_page(s, i))),
        (rf"/repos/{_SEG}", lambda p, b: _html(tree.binding_page(s, b, p))),
        (rf"/repos/{_SEG}/files/([0-9a-f]{{7,64}})/(.+)",
         lambda p, b, c, f: _html(source_view.file_page(s, b, c, f))),
        (r"/api/v1/openapi.json", lambda p: (200, SPEC, {}, JSON)),
        (r"/api/v1/repos", lambda p: _json(api.get_repos(s, p))),
        (r"/api/v1/syncs", lambda p: _json(api.get_syncs(s, p))),
        (r"/api/v1/syncs/(\d{1,18})", lambda p, i: _json(api.get_sync(s, p, i))),
        (r"/api/v1/resources", lambda p: _json(api.get_resources(s, p))),
        (rf"/api/v1/resources/{_KEY}", lambda p, *k: _json(api.get_resource(s, p, *k))),
        (rf"/api/v1/resources/{_KEY}/logs", lambda p, *k: _json(api.get_logs(s, p, *k))),
        (r"/api/v1/events", lambda p: _json(api.get_events(s, p))),
    ]
    return [(re.compile(f"^{pattern}$"), handler) for pattern, handler in entries]
