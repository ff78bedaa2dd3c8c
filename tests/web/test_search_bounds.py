"""Search inputs are bounded, on SQLite and on PostgreSQL: a 50,000-character search and
one of 3,000 label terms (which SQLite answered with a 500: "LIKE or GLOB pattern too
complex", "Expression tree is too large") are a 400 whose JSON names the parameter and
the limit, and the dashboard's search page says the same, over the real server."""

from __future__ import annotations

import html
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest
from nodus_gitops.config import Settings
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.state.records import InventoryRecord
from nodus_gitops.state.store import Store
from nodus_gitops.web.search import MAX_QUERY_LENGTH, MAX_TERM_LENGTH, MAX_TERMS
from nodus_gitops.web.server import start_server
from nodus_gitops.wiring import build_service

LONG = "a" * 50_000
MANY_LABELS = " ".join(f"k{i}=v" for i in range(3_000))
MANY_LABEL_PARAMS = [("label", f"k{i}=v") for i in range(3_000)]


@pytest.fixture(params=["sqlite", "postgresql"])
def client(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[httpx.Client]:
    """The real server over a store of each kind, with a labelled Job in it."""
    url = request.getfixturevalue("pg_state_url") if request.param == "postgresql" else None
    store = Store.open(url, tmp_path / "state")
    store.upsert_binding("b", "https://git.example/b.git", "main", "", "p")
    store.upsert_resource(InventoryRecord(
        ResourceKey("Job", "p", "hello"), "b",
        {"kind": "Job", "metadata": {"name": "hello", "labels": {"team": "ml"}}}, "h"))
    service = build_service(Settings(state_dir=tmp_path / "state", state_url=url), store)
    stop = start_server(service, "127.0.0.1:0")
    host, port = stop.address  # type: ignore[attr-defined]
    try:
        with httpx.Client(base_url=f"http://{host}:{port}", timeout=60) as c:
            yield c
    finally:
        stop()  # type: ignore[operator]
        store.close()


def _get(client: httpx.Client, path: str, params: list[tuple[str, str]]) -> httpx.Response:
    return client.get(f"{path}?{urlencode(params)}")


@pytest.mark.parametrize(("params", "parameter", "limit"), [
    ([("q", LONG)], "q", f"{MAX_QUERY_LENGTH:,} characters"),
    ([("name", LONG)], "name", f"{MAX_QUERY_LENGTH:,} characters"),
    ([("q", MANY_LABELS)], "q", f"{MAX_QUERY_LENGTH:,} characters"),
    (MANY_LABEL_PARAMS, "label", f"{MAX_QUERY_LENGTH:,} characters"),
    ([("label", ",".join(f"k{i}=v" for i in range(3_000)))], "label",
     f"{MAX_QUERY_LENGTH:,} characters"),
], ids=["q-50000-chars", "name-50000-chars", "q-3000-labels", "3000-label-params",
        "label-3000-terms"])
def test_an_unbounded_search_is_a_400_that_names_the_limit(
        client: httpx.Client, params: list[tuple[str, str]], parameter: str,
        limit: str) -> None:
    response = _get(client, "/api/v1/resources", params)
    assert response.status_code == 400, response.text[:300]
    error = response.json()["error"]
    assert error.startswith(f"{parameter}: at most {limit}"), error
    page = _get(client, "/resources", params)
    assert page.status_code == 400, page.text[:300]
    assert error in html.unescape(page.text)


@pytest.mark.parametrize(("params", "said"), [
    ([("q", " ".join(f"k{i}=v" for i in range(MAX_TERMS + 1)))],
     f"q: at most {MAX_TERMS} terms ({MAX_TERMS + 1} given)"),
    ([("label", f"k{i}=v") for i in range(MAX_TERMS + 1)],
     f"label: at most {MAX_TERMS} terms ({MAX_TERMS + 1} given)"),
    ([("q", " ".join(f"k{i}=v" for i in range(MAX_TERMS))), ("label", "team=ml")],
     f"label: at most {MAX_TERMS} terms ({MAX_TERMS + 1} given)"),
    ([("phase", ",".join(["Running"] * (MAX_TERMS + 1)))],
     f"phase: at most {MAX_TERMS} terms ({MAX_TERMS + 1} given)"),
    ([("name", "x" * (MAX_TERM_LENGTH + 1))],
     f"name: at most {MAX_TERM_LENGTH} characters a term (one has {MAX_TERM_LENGTH + 1})"),
    ([("q", "x" * (MAX_QUERY_LENGTH + 1))],
     f"q: at most {MAX_QUERY_LENGTH:,} characters ({MAX_QUERY_LENGTH + 1:,} given)"),
])
def test_each_bound_is_its_own_400(client: httpx.Client, params: list[tuple[str, str]],
                                   said: str) -> None:
    response = _get(client, "/api/v1/resources", params)
    assert response.status_code == 400
    assert response.json()["error"] == f"{said}; narrow the search"


def test_a_search_within_the_bounds_still_answers(client: httpx.Client) -> None:
    labels = ",".join(["team=ml"] + [f"k{i}!=v" for i in range(MAX_TERMS - 1)])
    response = _get(client, "/api/v1/resources", [("label", labels), ("name", "hel")])
    assert response.status_code == 200, response.text
    assert [r["name"] for r in response.json()] == ["hello"]
    page = _get(client, "/resources", [("q", "hel team=ml phase:Unknown")])
    assert page.status_code == 200
