"""The dashboard's read queries over a real SQLite store: the grouped totals (deleted
resources counted in spend but not in health), pages that cover every match exactly once
in every order, and query plans that page through indexes instead of the wide rows."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.state.records import InventoryRecord
from nodus_gitops.state.store import Store
from nodus_gitops.web import queries
from nodus_gitops.web.queries import ResourceQuery, resources_page, totals
from sqlalchemy import event

PHASES = ["Running", "Succeeded", "Failed", None]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(state_dir=tmp_path / "state")
    for b in ("a", "b"):
        s.upsert_binding(b, f"https://git.example/{b}.git", "main", "", "p")
    records = []
    for i in range(60):
        kind = ("Job", "Pipeline", "Sweep")[i % 3]
        records.append(InventoryRecord(
            key=ResourceKey(kind, "p", f"r-{i:02}"), binding_id="ab"[i % 2],
            manifest={"kind": kind, "metadata": {"name": f"r-{i:02}"}}, spec_hash=str(i),
            source_commit=f"{i % 4:040x}", phase=PHASES[i % 4], cost_usd=f"0.{i % 10}",
            reason="Why" if i % 5 == 0 else None))
    s.upsert_resources(records)
    s.update_status(ResourceKey("Job", "p", "r-00"), "Succeeded", None, None, None, {},
                    "0.1", deleted=True)
    yield s
    s.close()


def test_totals_count_deleted_resources_in_spend_but_not_in_health(store: Store) -> None:
    t = totals(store)
    everything, live = t.phases_by_binding(), t.live_phases_by_binding()
    assert sum(everything["a"].values()) == 30 and sum(live["a"].values()) == 29
    assert everything["a"]["Succeeded"] == live["a"].get("Succeeded", 0) + 1
    assert sum(sum(c.values()) for c in everything.values()) == 60
    assert sum(n for _k, _p, n in t.by_kind_phase()) == 60
    # Exact decimals (r-00's last status raised its cost from 0.0 to 0.1).
    assert sum(t.cost_by_binding().values()) == sum(
        Decimal(f"0.{i % 10}") for i in range(60)) + Decimal("0.1")
    assert "Unknown" in everything["a"] or "Unknown" in everything["b"]


@pytest.mark.parametrize("sort", queries.SORT_KEYS)
@pytest.mark.parametrize("descending", [False, True])
def test_pages_cover_every_match_once_in_every_order(store: Store, sort: str,
                                                     descending: bool) -> None:
    q = ResourceQuery(sort=sort, descending=descending, page_size=7, phase=("Failed",
                                                                            "Unknown"))
    seen, total = [], None
    for page in itertools.count(1):
        records, total = resources_page(store, ResourceQuery(**{**q.__dict__, "page": page}))
        if not records:
            break
        seen += [r.key.name for r in records]
    assert total == 30
    assert len(seen) == len(set(seen)) == 30


def test_a_page_past_the_end_is_empty_with_the_total(store: Store) -> None:
    records, total = resources_page(store, ResourceQuery(repo="b", kind="Job", page=99))
    assert records == [] and total == 10


def _statements(store: Store) -> Iterator[list[tuple[str, Any]]]:
    """Every SQL statement the store's engine runs inside the `with` block."""
    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, sql: str, params: Any, context: Any,
               many: bool) -> None:
        if sql.lstrip().upper().startswith("SELECT"):
            seen.append((sql, params))

    event.listen(store._engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(store._engine, "before_cursor_execute", record)


def _wide_scans(store: Store) -> dict[str, list[str]]:
    """The dashboard's queries whose plan scans `inventory` without a covering index,
    which reads every row's manifest and status JSON (seconds at 100,000 resources)."""
    with store._engine.connect() as conn:
        conn.exec_driver_sql("ANALYZE")
    statements = _statements(store)
    seen = next(statements)
    totals(store)
    queries.facets(store)
    for sort in queries.SORT_KEYS:
        for descending in (False, True):
            resources_page(store, ResourceQuery(sort=sort, descending=descending, page=3,
                                                page_size=5))
    resources_page(store, ResourceQuery(kind="Sweep", phase=("Failed",), sort="cost",
                                        descending=True))
    resources_page(store, ResourceQuery(repo="b", phase=("Running",)))
    next(statements, None)
    with store._engine.connect() as conn:
        plans = {sql: [row[3] for row in conn.exec_driver_sql(
            "EXPLAIN QUERY PLAN " + sql, params)] for sql, params in seen}
    return {sql: plan for sql, plan in plans.items()
            if any(step.startswith("SCAN inventory") and "COVERING INDEX" not in step
                   for step in plan)}


def test_no_dashboard_query_reads_the_inventorys_wide_rows(store: Store) -> None:
    assert _wide_scans(store) == {}


def test_a_page_and_its_total_come_in_one_statement(store: Store) -> None:
    statements = _statements(store)
    seen = next(statements)
    records, total = resources_page(store, ResourceQuery(kind="Job", page=2, page_size=4))
    assert (len(records), total, len(seen)) == (4, 20, 1)
    # Past the end the page has no row to carry the total: a count of its own says it.
    records, total = resources_page(store, ResourceQuery(kind="Job", page=9, page_size=4))
    next(statements, None)
    assert (records, total, len(seen)) == ([], 20, 3)
