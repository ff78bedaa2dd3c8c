"""Search across resources on /resources and /api/v1/resources: by name, label selector,
phase and commit, from the filters or the search box's words; the state kept in the URL
and the links; paged in SQL. Over real HTTP against the seeded store."""

from __future__ import annotations

import re
from urllib.parse import quote

import httpx
import pytest
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.state.records import InventoryRecord

from tests.web.seed import BAD_NAME, OPS_SHA, PROJECT, SHA1, SHA2, XSS_SCRIPT, Seeded
from tests.web.test_pages import rows

ML = {"hello", "train-eval", "batch-size", BAD_NAME}


def names(client: httpx.Client, query: str) -> set[str]:
    response = client.get(f"/api/v1/resources?{query}")
    assert response.status_code == 200, response.text
    return {r["name"] for r in response.json()}


@pytest.mark.parametrize(("query", "expected"), [
    ("label=team=ml", {"train-eval", "batch-size"}),
    ("label=team==ml", {"train-eval", "batch-size"}),
    ("label=team!=ml", {"hello", BAD_NAME, "nightly", "waiting"}),  # no label matches too
    ("label=stage", {"train-eval"}),
    ("label=!team", {BAD_NAME, "nightly", "waiting"}),
    ("label=app=hello,team!=ml", {"hello"}),
    ("label=team=ml&label=stage=train", {"train-eval"}),
    ("label=team=ml&phase=Failed", {"batch-size"}),
    ("label=team=nobody", set()),
    (f"commit={SHA1[:7]}", ML),
    (f"commit={SHA1.upper()}", ML),
    (f"commit={OPS_SHA[:10]}", {"nightly", "waiting"}),
    (f"commit={SHA2[:12]}", set()),  # the head: invalid, nothing applied from it
    (f"commit={SHA1[:7]}&name=e", {"hello", "train-eval", "batch-size", BAD_NAME}),
    (f"commit={SHA1[:7]}&name=ell", {"hello"}),
    ("q=ell", {"hello"}),
    ("q=phase:Failed team=ml", {"batch-size"}),
    ("q=label:team=ml kind:Pipeline", {"train-eval"}),
    (f"q=commit:{OPS_SHA[:8]} phase:Unknown", {"waiting"}),
    ("q=!team repo:ops", {"nightly", "waiting"}),
])
def test_search_finds(client: httpx.Client, query: str, expected: set[str]) -> None:
    assert names(client, query) == expected
    page = client.get(f"/resources?{query}")
    assert page.status_code == 200
    assert len(rows(page.text, "resources")) == len(expected)


@pytest.mark.parametrize(("query", "said"), [
    ("commit=xyz1234", "commit: &#x27;xyz1234&#x27; is not 4 to 40 hex digits"),
    ("commit=abc", "commit: &#x27;abc&#x27; is not 4 to 40 hex digits"),
    (f"label={quote(XSS_SCRIPT)}", "is not a label key"),
    (f"label=team={quote(XSS_SCRIPT)}", "is not key=value"),
    ("label=team%27%5D", "is not a label key"),
    ("label=!team=ml", "is not key=value"),
    ("q=one two", "one part of a name at most"),
])
def test_a_bad_search_is_400_and_says_why(client: httpx.Client, query: str,
                                          said: str) -> None:
    page = client.get(f"/resources?{query}")
    assert page.status_code == 400 and said in page.text
    assert XSS_SCRIPT not in page.text
    assert client.get(f"/api/v1/resources?{query}").status_code == 400


def test_the_search_stays_in_the_url_and_the_links(client: httpx.Client) -> None:
    html = client.get(f"/resources?q=phase:Failed+team%3Dml+commit:{SHA1[:7]}").text
    # The box shows the search as words; the filters show it as fields.
    assert f'value="phase:Failed commit:{SHA1[:7]} team=ml"' in html
    assert 'name="label" value="team=ml"' in html
    assert f'name="commit" value="{SHA1[:7]}"' in html
    # Sorting keeps every filter, as parameters of their own.
    assert (f'href="/resources?phase=Failed&amp;label=team%3Dml&amp;commit={SHA1[:7]}'
            '&amp;sort=-kind"') in html
    assert (f'data-poll="/api/v1/resources?phase=Failed&amp;label=team%3Dml&amp;'
            f'commit={SHA1[:7]}"') in html


def test_the_search_box_comes_first_and_the_rows_are_live(client: httpx.Client) -> None:
    html = client.get("/resources").text
    main = html.split("<main", 1)[1]
    first_control = re.search(r"<(input|select|button|a)\b[^>]*>", main).group(0)
    assert 'name="q"' in first_control and 'type="search"' in first_control
    assert '<form method="get" action="/resources" role="search"' in html
    assert '<label for="search-q">Search resources</label>' in html
    assert re.search(r'<div class="table-wrap" data-live="resources-rows">'
                     r'<table class="resources">'
                     r'<thead>.*?</thead><tbody>', html)
    assert 'data-live="resources-pager"' in html


def test_a_label_search_pages_in_sql(client: httpx.Client, seeded: Seeded) -> None:
    for i in range(70):
        labels = {"team": "ml" if i % 2 else "infra"}
        seeded.store.upsert_resource(InventoryRecord(
            ResourceKey("Job", PROJECT, f"bulk-{i:03}"), "ml-team",
            {"kind": "Job", "metadata": {"name": f"bulk-{i:03}", "labels": labels}}, "h",
            phase="Queued", source_commit=SHA1))
    first = client.get("/api/v1/resources?label=team=ml&pageSize=20&sort=name")
    assert first.headers["X-Total-Count"] == "37"  # 35 bulk, train-eval, batch-size
    assert len(first.json()) == 20
    assert "label=team%3Dml" in first.headers["Link"] and 'rel="next"' in first.headers["Link"]
    seen = [r["name"] for r in first.json()]
    for page in (2, 3):
        got = client.get(f"/api/v1/resources?label=team=ml&pageSize=20&sort=name&page={page}")
        seen += [r["name"] for r in got.json()]
    assert len(seen) == len(set(seen)) == 37
    html = client.get("/resources?label=team%3Dml").text
    assert "37 resources · page 1 of 1" in html
    html = client.get("/resources?q=team=ml+bulk-0").text
    assert "5 resources" in html  # bulk-001 ... bulk-009, odd


def test_a_commit_search_can_use_an_index_on_the_commit(seeded: Seeded) -> None:
    """The commit filter is a range search on the inventory's index on the commit
    (revision 0003), not a scan of the wide rows."""
    from nodus_gitops.web import queries, search

    store = seeded.store
    seen: list[tuple[str, object]] = []

    def record(conn: object, cursor: object, sql: str, params: object, *_: object) -> None:
        if "source_commit" in sql and "count" in sql.lower():
            seen.append((sql, params))

    from sqlalchemy import event
    event.listen(store._engine, "before_cursor_execute", record)
    try:
        q = search.ResourceSearch.from_params({"commit": [SHA1[:7]]})
        records, total = queries.resources_page(store, q)
    finally:
        event.remove(store._engine, "before_cursor_execute", record)
    assert total == 4 and {r.key.name for r in records} == {
        "hello", "train-eval", "batch-size", BAD_NAME}
    (sql, params), = seen
    with store._engine.connect() as conn:
        plan = [row[3] for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql, params)]
    assert any(step.startswith("SEARCH inventory USING")
               and "INDEX ix_inventory_source_commit (source_commit>? AND source_commit<?)"
               in step for step in plan), plan
