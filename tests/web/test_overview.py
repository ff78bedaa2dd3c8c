"""The Overview and `/api/v1/repos` as Argo CD's application list: each binding's sync
status from its head commit's own sync, its health rolled up from its resources' phases,
its head and applied commits as Git has them, its spend and its budget left. Over real
HTTP against the seeded store and the seed's real Git repository."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import httpx
import jsonschema
import pytest
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.state.records import InventoryRecord
from nodus_gitops.web.overview_queries import Health, health

from tests.web.seed import OPS_SHA, PROJECT, SHA1, SHA2, XSS_SCRIPT, Seeded
from tests.web.test_queries import _statements as statements

ESCAPED_SCRIPT = "&lt;script&gt;alert(1)&lt;/script&gt;"


@contextmanager
def inventory_selects(store) -> Iterator[list[tuple[str, object]]]:
    """The SELECTs of the inventory `store` runs meanwhile (SQL and parameters), each to
    be checked against SQLite's query plan (after an ANALYZE, as a store in use has)."""
    with store._engine.begin() as conn:
        conn.exec_driver_sql("ANALYZE")
    seen: list[tuple[str, object]] = []
    with contextmanager(statements)(store) as every:
        yield seen
    seen += [(sql, params) for sql, params in every if "inventory" in sql]


def repos(client: httpx.Client) -> dict[str, dict]:
    return {r["id"]: r for r in client.get("/api/v1/repos").json()}


def card(html: str, binding: str) -> str:
    return html.split(f'data-binding="{binding}"', 1)[1].split("</section>", 1)[0]


def test_an_invalid_head_is_blocked_and_its_commits_are_git_s_own(client: httpx.Client) -> None:
    ml = repos(client)["ml-team"]
    assert ml["syncStatus"] == "Blocked"
    assert ml["syncReason"] == "the head commit's sync: invalid: 1 problems; nothing applied"
    assert ml["headSync"]["result"] == "invalid"
    assert ml["headCommit"] == {
        "sha": SHA2, "message": f"Add bad.yaml {XSS_SCRIPT}", "author": "Grace Hopper",
        "email": "grace@acme.dev", "time": "2025-01-01T23:00:00-05:00", "url": None}
    assert ml["appliedCommit"]["sha"] == SHA1
    assert ml["appliedCommit"]["message"] == "Add hello, train-eval and the batch-size sweep"
    assert ml["appliedCommit"]["author"] == "Ada Lovelace"
    assert ml["appliedCommit"]["time"] == "2025-01-02T03:00:00+01:00"


def test_health_rolls_up_the_live_resources_phases(client: httpx.Client) -> None:
    got = repos(client)
    assert (got["ml-team"]["health"], got["ml-team"]["healthReason"]) == (
        "Degraded", "2 Failed of 4 resources")
    # ops: one Succeeded, one whose backend has not reported a phase yet.
    assert (got["ops"]["health"], got["ops"]["healthReason"]) == (
        "Unknown", "1 Unknown of 2 resources")


@pytest.mark.parametrize(("phases", "expected"), [
    ({}, (Health.MISSING, "no resources")),
    ({"Succeeded": 3}, (Health.HEALTHY, "3 Succeeded of 3 resources")),
    ({"Succeeded": 2, "Cancelled": 1}, (Health.HEALTHY, "1 Cancelled, 2 Succeeded of 3 resources")),
    ({"Succeeded": 2, "Running": 1}, (Health.PROGRESSING, "1 Running of 3 resources")),
    ({"Queued": 1, "Recovering": 1}, (Health.PROGRESSING, "1 Queued, 1 Recovering of 2 resources")),
    ({"Suspended": 1, "Succeeded": 1}, (Health.SUSPENDED, "1 Suspended of 2 resources")),
    ({"Suspended": 1, "Running": 1}, (Health.PROGRESSING, "1 Running of 2 resources")),
    ({"Failed": 1, "Running": 5}, (Health.DEGRADED, "1 Failed of 6 resources")),
    ({"CreateFailed": 1}, (Health.DEGRADED, "1 CreateFailed of 1 resource")),
    ({"Unknown": 1, "Running": 1}, (Health.UNKNOWN, "1 Unknown of 2 resources")),
    ({"Sideways": 1}, (Health.UNKNOWN, "1 Sideways of 1 resource")),
])
def test_health_of_phases(phases: dict[str, int], expected: tuple[Health, str]) -> None:
    state = health(phases)
    assert (state.status, state.reason) == expected


def test_deleted_resources_count_for_spend_not_health(client: httpx.Client,
                                                     seeded: Seeded) -> None:
    for r in seeded.store.list_inventory(binding_id="ops"):
        seeded.store.upsert_resource(InventoryRecord(
            r.key, r.binding_id, r.manifest, r.spec_hash, phase=r.phase, cost_usd=r.cost_usd,
            deleted=True))
    ops = repos(client)["ops"]
    assert (ops["health"], ops["healthReason"]) == ("Missing", "no resources")
    assert ops["spendUSD"] == "1.5"


def test_a_later_noop_of_the_applied_commit_does_not_hide_a_blocked_head(
        client: httpx.Client, seeded: Seeded) -> None:
    """The case seen: the head invalid, then the applied commit refreshed with nothing to
    do; the latest sync is a green noop, the binding is still Blocked."""
    refresh = seeded.store.start_sync("ml-team", SHA1)
    seeded.store.finish_sync(refresh, "noop", "nothing to do", {}, {})
    ml = repos(client)["ml-team"]
    assert ml["lastSync"]["result"] == "noop"
    assert ml["syncStatus"] == "Blocked"
    html = card(client.get("/").text, "ml-team")
    assert re.search(r'data-field="syncStatus"[^>]*>Blocked<', html)


def test_a_head_whose_sync_crashed_is_failed_even_after_a_noop(client: httpx.Client,
                                                                seeded: Seeded) -> None:
    crash = seeded.store.start_sync("ml-team", SHA2)
    seeded.store.finish_sync(crash, "error", "the reconciler failed on this commit: boom",
                             {}, {})
    refresh = seeded.store.start_sync("ml-team", SHA1)
    seeded.store.finish_sync(refresh, "noop", "nothing to do", {}, {})
    ml = repos(client)["ml-team"]
    assert ml["syncStatus"] == "Failed"
    assert ml["syncReason"] == ("the head commit's sync: error: the reconciler failed on "
                                "this commit: boom")
    assert re.search(r'data-field="syncStatus"[^>]*>Failed<',
                     card(client.get("/").text, "ml-team"))


def test_a_partial_head_is_failed(client: httpx.Client, seeded: Seeded) -> None:
    sync = seeded.store.start_sync("ml-team", SHA2)
    seeded.store.finish_sync(sync, "partial", "1 created, 1 failed", {}, {})
    assert repos(client)["ml-team"]["syncStatus"] == "Failed"


def test_a_head_being_synced_is_out_of_sync(client: httpx.Client, seeded: Seeded) -> None:
    seeded.store.start_sync("ml-team", SHA2)  # started, not finished
    ml = repos(client)["ml-team"]
    assert (ml["syncStatus"], ml["syncReason"]) == ("OutOfSync",
                                                    "the head commit is syncing now")


def test_a_head_never_synced_is_out_of_sync(client: httpx.Client) -> None:
    ops = repos(client)["ops"]  # its head seen by a poll; nothing synced yet
    assert (ops["syncStatus"], ops["syncReason"]) == (
        "OutOfSync", "the head commit has not been synced yet")
    assert ops["headCommit"] == {
        "sha": OPS_SHA, "message": None, "author": None, "email": None, "time": None,
        "url": f"https://gitlab.com/acme/ops/-/commit/{OPS_SHA}"}
    assert ops["appliedCommit"] is None


def test_the_applied_head_is_synced(client: httpx.Client, seeded: Seeded) -> None:
    seeded.store.record_poll("ml-team", SHA1, None)  # the branch went back to SHA1
    ml = repos(client)["ml-team"]
    assert (ml["syncStatus"], ml["syncReason"]) == ("Synced",
                                                    "the head commit is applied (applied)")
    html = card(client.get("/").text, "ml-team")
    assert re.search(r'data-field="syncStatus"[^>]*>Synced<', html)


def test_a_binding_never_read_is_unknown(client: httpx.Client, seeded: Seeded) -> None:
    seeded.store.upsert_binding("ops", "https://gitlab.com/acme/ops.git", "main", "", "ops")
    with seeded.store._engine.begin() as conn:  # a fresh binding: no poll recorded
        conn.exec_driver_sql("UPDATE repo_binding SET last_seen_commit = NULL "
                             "WHERE id = 'ops'")
    ops = repos(client)["ops"]
    assert (ops["syncStatus"], ops["headCommit"]) == ("Unknown", None)


def test_spend_and_the_budget_left_this_period(client: httpx.Client, seeded: Seeded) -> None:
    got = repos(client)
    ml, ops = got["ml-team"], got["ops"]
    assert ml["spendUSD"] == "0.3133" and ml["costUSD"] == "0.31"
    assert ml["budget"]["limitUSD"] == "5" and ml["budget"]["period"] == "month"
    assert ml["budget"]["spentUSD"] == "0.3133"
    assert ml["budgetLeftUSD"] == "4.6867"
    assert ops["budget"] is None and ops["budgetLeftUSD"] is None
    # A run that finished before this month began is spend, but not this month's.
    last_month = datetime.now(UTC).replace(day=1) - timedelta(days=2)
    seeded.store.upsert_resource(InventoryRecord(
        ResourceKey("Job", PROJECT, "old"), "ml-team", {}, "h", phase="Succeeded",
        cost_usd="2", finished_at=last_month))
    ml = repos(client)["ml-team"]
    assert ml["spendUSD"] == "2.3133" and ml["budgetLeftUSD"] == "4.6867"


def test_the_page_says_it_in_words(client: httpx.Client) -> None:
    html = client.get("/").text
    assert 'data-live="overview-cards"' in html
    ml, ops = card(html, "ml-team"), card(html, "ops")
    assert '<h2><a href="/repos/ml-team">ml-team</a></h2>' in ml
    assert re.search(r'class="sync-status sync-blocked"[^>]*>Blocked<', ml)
    assert re.search(r'class="health health-degraded"[^>]*>Degraded<', ml)
    assert "2 Failed of 4 resources" in ml
    assert f"Add bad.yaml {ESCAPED_SCRIPT}" in ml and XSS_SCRIPT not in html
    assert "Grace Hopper" in ml and "Ada Lovelace" in ml
    assert '<time datetime="2025-01-01T23:00:00-05:00">' in ml
    assert f'<code title="{SHA2}">{SHA2[:12]}</code>' in ml
    assert "$0.3133" in ml and "$4.6867 left of $5 per month" in ml
    assert 'href="/resources?repo=ml-team"' in ml and 'href="/history?repo=ml-team"' in ml
    assert re.search(r'class="sync-status sync-outofsync"[^>]*>OutOfSync<', ops)
    assert "no budget" in ops
    assert f'href="https://gitlab.com/acme/ops/-/commit/{OPS_SHA}"' in ops
    assert "not in the mirror yet" in ops  # its head's message: never fetched


def test_the_openapi_document_describes_what_repos_carry(client: httpx.Client,
                                                         seeded: Seeded) -> None:
    spec = client.get("/api/v1/openapi.json").json()
    repo_schema = spec["components"]["schemas"]["Repo"]
    root = {"$ref": "#/components/schemas/Repo", "components": spec["components"]}
    refresh = seeded.store.start_sync("ml-team", SHA1)  # every shape: a head sync too
    seeded.store.finish_sync(refresh, "noop", "nothing to do", {}, {})
    for repo in client.get("/api/v1/repos").json():
        jsonschema.validate(repo, root, cls=jsonschema.Draft202012Validator)
        assert set(repo) <= set(repo_schema["properties"])
    params = {p["name"] for p in spec["paths"]["/api/v1/resources"]["get"]["parameters"]}
    assert {"label", "commit", "q"} <= params


def test_a_project_past_its_budget_says_so(client: httpx.Client, seeded: Seeded) -> None:
    seeded.store.upsert_resource(InventoryRecord(
        ResourceKey("Job", PROJECT, "big"), "ml-team", {}, "h", phase="Running",
        cost_usd="10"))
    ml = repos(client)["ml-team"]
    assert ml["budgetLeftUSD"] == "-5.3133" and ml["budget"]["spentUSD"] == "10.3133"
    html = card(client.get("/").text, "ml-team")
    assert ('<span class="bad" data-field="budget"><strong class="over">$5.3133 over</strong>'
            ' of $5 per month') in html


def test_a_head_a_guard_refused_in_part_is_blocked(client: httpx.Client,
                                                   seeded: Seeded) -> None:
    """A guard's refusal is applied as far as allowed, and marked applied: still Blocked."""
    sync = seeded.store.start_sync("ml-team", SHA2)
    seeded.store.finish_sync(sync, "blocked", "1 created, 1 blocked", {}, {})
    seeded.store.mark_applied("ml-team", SHA2)
    ml = repos(client)["ml-team"]
    assert (ml["syncStatus"], ml["syncReason"]) == (
        "Blocked", "the head commit's sync: blocked: 1 created, 1 blocked")


def test_the_overview_reads_no_wide_rows(seeded: Seeded) -> None:
    """With the inventory's indexes (state revision 0003), every query of the Overview reads
    a narrow index or the sync table; the inventory's rows (manifest and status JSON) only
    of failed resources, each found by id from the phase's index, to say why they failed."""
    from nodus_gitops.web import api

    store = seeded.store
    with inventory_selects(store) as seen:
        assert {r["id"] for r in api.repos(seeded.service)} == {"ml-team", "ops"}
    # The totals, the failed resources' reasons and the chosen one of each binding, and
    # the ml-team budget.
    assert len(seen) == 4
    with store._engine.connect() as conn:
        for sql, params in seen:
            plan = [row[3] for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql,
                                                           params)]
            # The failed ids come from the phase's covering index; a row is read for
            # them only: by id, or (SQLite's choice on a small table) while walking a
            # narrow index whose entries are matched against those ids before their rows
            # are sought.
            by_failed_ids = any("COVERING INDEX ix_inventory_phase" in step for step in plan)
            assert all("COVERING INDEX" in step or "INTEGER PRIMARY KEY" in step
                       or (by_failed_ids and "USING INDEX" in step)
                       for step in plan
                       if step.startswith(("SCAN inventory", "SEARCH inventory"))), plan
