"""The store API against real SQLite and PostgreSQL: what callers write is what they read."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import pytest
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.state import InventoryRecord, Store

from tests.state.support import TickingClock

OpenStore = Callable[..., Store]

JOB_A = ResourceKey("Job", "proj-a", "train")
SWEEP_A = ResourceKey("Sweep", "proj-a", "lr")
JOB_B = ResourceKey("Job", "proj-b", "eval")

NESTED = {
    "apiVersion": "nodus.dev/v1",
    "metadata": {"name": "train", "annotations": {"nodus.dev/source-file": "jobs/tränen.yaml"}},
    "spec": {
        "command": ["python", "-c", "print('héllo wörld ✓ 日本語 🚀')"],
        "resources": {"gpu": {"type": "H100", "count": 8}, "memory": "64Gi"},
        "env": [{"name": "A", "value": ""}, {"name": "B", "value": 'x\ny\t"z"'}],
        "flags": {"on": True, "off": False, "none": None, "ratio": 0.125, "big": 2**53},
        "empty": {"list": [], "dict": {}},
    },
}


def record(key: ResourceKey, binding: str = "team-a", **changes: object) -> InventoryRecord:
    base = InventoryRecord(key=key, binding_id=binding, manifest={"kind": key.kind}, spec_hash="h1")
    return replace(base, **changes)


# -- bindings ----------------------------------------------------------------------------


def test_bindings_keep_poll_state_across_upserts(store: Store) -> None:
    store.record_poll("team-a", "c1", None)
    store.mark_applied("team-a", "c0")
    store.upsert_binding("team-a", "https://git.example/a2.git", "release", "jobs", "proj-a")
    store.record_poll("team-a", None, "remote unreachable")

    b = store.get_binding("team-a")
    assert b is not None
    assert (b.url, b.branch) == ("https://git.example/a2.git", "release")
    assert (b.last_seen_commit, b.last_applied_commit) == ("c1", "c0")
    assert b.last_error == "remote unreachable"
    assert b.last_poll_at is not None and b.last_poll_at.tzinfo is UTC
    assert [x.id for x in store.list_bindings()] == ["team-a", "team-b"]
    assert store.get_binding("nope") is None


def test_binding_updates_of_unknown_ids_raise(store: Store) -> None:
    with pytest.raises(KeyError):
        store.record_poll("nope", "c1", None)
    with pytest.raises(KeyError):
        store.mark_applied("nope", "c1")
    with pytest.raises(KeyError, match="upsert_binding first"):
        store.start_sync("nope", "c1")


# -- syncs -------------------------------------------------------------------------------


def test_syncs_start_pending_finish_and_list_newest_first(store: Store) -> None:
    first = store.start_sync("team-a", "c1")
    second = store.start_sync("team-a", "c2")
    other = store.start_sync("team-b", "c9")
    pending = store.get_sync(first)
    assert pending is not None and pending.result == "pending" and pending.finished_at is None

    plan = {"actions": [{"op": "create", "key": str(JOB_A)}]}
    summary = {"created": 1, "patched": 0, "blocked": 0}
    store.finish_sync(first, "applied", "1 created", plan, summary)
    done = store.get_sync(first)
    assert done is not None
    assert (done.result, done.message, done.plan, done.summary) == (
        "applied",
        "1 created",
        plan,
        summary,
    )
    assert done.finished_at is not None and done.finished_at > done.started_at

    assert [s.id for s in store.list_syncs("team-a")] == [second, first]
    assert [s.id for s in store.list_syncs()] == [other, second, first]
    assert [s.id for s in store.list_syncs(limit=1)] == [other]
    last = store.last_sync("team-a")
    assert last is not None and last.commit == "c2"
    assert store.last_sync("team-c") is None and store.get_sync(12345) is None


def test_finish_sync_refuses_unknown_results_and_ids(store: Store) -> None:
    sync = store.start_sync("team-a", "c1")
    with pytest.raises(ValueError):
        store.finish_sync(sync, "succeeded", "", {}, {})
    with pytest.raises(ValueError):
        store.finish_sync(sync, "pending", "", {}, {})
    with pytest.raises(KeyError):
        store.finish_sync(sync + 100, "noop", "", {}, {})
    assert store.get_sync(sync).result == "pending"  # type: ignore[union-attr]


# -- inventory ---------------------------------------------------------------------------


def test_inventory_upsert_get_and_list_sorted_and_filtered(store: Store) -> None:
    for r in (record(SWEEP_A), record(JOB_B, "team-b"), record(JOB_A)):
        store.upsert_resource(r)
    assert [r.key for r in store.list_inventory()] == [JOB_A, JOB_B, SWEEP_A]
    assert [r.key for r in store.list_inventory(binding_id="team-a")] == [JOB_A, SWEEP_A]
    assert [r.key for r in store.list_inventory(project="proj-b")] == [JOB_B]
    assert [r.key for r in store.list_inventory(kind="Sweep")] == [SWEEP_A]
    assert store.list_inventory(project="proj-a", kind="Pipeline") == []
    assert store.get_resource(ResourceKey("Job", "proj-a", "absent")) is None


def test_inventory_upsert_replaces_all_but_created_at(store: Store) -> None:
    store.upsert_resource(record(JOB_A, provider="local", phase="Running", cost_usd="1.50"))
    first = store.get_resource(JOB_A)
    assert first is not None and first.created_at == first.updated_at

    changed = replace(first, spec_hash="h2", manifest=NESTED, source_commit="c2", phase=None)
    store.upsert_resource(changed)
    got = store.get_resource(JOB_A)
    assert got is not None
    assert (got.spec_hash, got.manifest, got.source_commit, got.phase) == ("h2", NESTED, "c2", None)
    assert got.provider == "local" and got.cost_usd == "1.50"
    assert got.created_at == first.created_at and got.updated_at > first.updated_at  # type: ignore[operator]
    assert len(store.list_inventory()) == 1


def test_update_status_finish_and_ttl_deletion_stays_recorded(store: Store) -> None:
    store.upsert_resource(record(JOB_A))
    status = {"attempts": [{"n": 1, "exit": 137}], "note": "ünïcode ✓"}
    assert store.update_status(JOB_A, "Running", None, None, None, {"n": 1}, "0.10")
    finished = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)
    assert store.update_status(
        JOB_A, "Failed", "OOMKilled", "killed", "request more memory", status, "2.25", finished
    )
    got = store.get_resource(JOB_A)
    assert got is not None
    assert (got.phase, got.reason, got.message, got.fix) == (
        "Failed",
        "OOMKilled",
        "killed",
        "request more memory",
    )
    assert (got.status, got.cost_usd, got.finished_at, got.deleted) == (
        status,
        "2.25",
        finished,
        False,
    )

    # The backend dropped it by TTL: still recorded as done, finished_at untouched.
    store.update_status(JOB_A, "Failed", "OOMKilled", "killed", None, status, "2.25", deleted=True)
    gone = store.get_resource(JOB_A)
    assert gone is not None and gone.deleted and gone.finished_at == finished
    assert [r.key for r in store.list_inventory()] == [JOB_A]

    assert not store.update_status(JOB_B, "Running", None, None, None, {}, "0")
    with pytest.raises(ValueError):
        store.update_status(JOB_A, "Failed", None, None, None, {}, "lots")


def test_remove_resource_and_count_by_phase(store: Store) -> None:
    store.upsert_resource(record(JOB_A, phase="Running"))
    store.upsert_resource(record(SWEEP_A, phase="Running"))
    store.upsert_resource(record(JOB_B, "team-b", phase="Succeeded"))
    store.upsert_resource(record(ResourceKey("Pipeline", "proj-a", "p")))
    assert store.count_by_phase() == {"Running": 2, "Succeeded": 1, "Unknown": 1}
    assert store.count_by_phase("team-b") == {"Succeeded": 1}

    assert store.remove_resource(SWEEP_A)
    assert not store.remove_resource(SWEEP_A)
    assert store.get_resource(SWEEP_A) is None
    assert store.count_by_phase("team-a") == {"Running": 1, "Unknown": 1}


def test_resources_need_a_known_binding(store: Store) -> None:
    with pytest.raises(KeyError):
        store.upsert_resource(record(JOB_A, "no-such-binding"))
    assert store.list_inventory() == []


# -- journal -----------------------------------------------------------------------------


def test_intents_pending_oldest_first_until_done_or_failed(store: Store) -> None:
    sync = store.start_sync("team-a", "c1")
    ids = [
        store.add_intent("team-a", sync, "create", JOB_A, "h1", "k-create", {"manifest": NESTED}),
        store.add_intent("team-a", sync, "delete", SWEEP_A, "h0", "k-delete", {}),
        store.add_intent("team-b", None, "patch", JOB_B, "h3", "k-patch", {"n": 1}),
    ]
    pending = store.pending_intents()
    assert [i.id for i in pending] == ids
    assert pending[0].payload == {"manifest": NESTED} and pending[0].key == JOB_A
    assert pending[0].state == "pending" and pending[0].done_at is None
    assert [i.id for i in store.pending_intents("team-b")] == [ids[2]]

    store.complete_intent(ids[0], {"provider_id": "job-42", "note": "créé"})
    store.fail_intent(ids[1], {"error": "403 forbidden"})
    assert [i.id for i in store.pending_intents()] == [ids[2]]
    done, failed = store.get_intent(ids[0]), store.get_intent(ids[1])
    assert done is not None and failed is not None
    assert (done.state, done.outcome) == ("done", {"provider_id": "job-42", "note": "créé"})
    assert done.done_at is not None and done.done_at > done.created_at
    assert (failed.state, failed.outcome) == ("failed", {"error": "403 forbidden"})
    with pytest.raises(KeyError):
        store.complete_intent(9999, {})


def test_duplicate_idempotency_key_returns_the_first_intent(store: Store) -> None:
    first = store.add_intent("team-a", None, "create", JOB_A, "h1", "same-key", {"try": 1})
    again = store.add_intent("team-a", None, "create", JOB_A, "h1", "same-key", {"try": 2})
    assert again == first
    pending = store.pending_intents()
    assert len(pending) == 1 and pending[0].payload == {"try": 1}
    store.complete_intent(first, {})
    assert store.add_intent("team-a", None, "create", JOB_A, "h1", "same-key", {}) == first
    assert store.pending_intents() == []


def test_add_intent_refuses_unknown_actions(store: Store) -> None:
    with pytest.raises(ValueError):
        store.add_intent("team-a", None, "upsert", JOB_A, "h1", "k", {})
    assert store.pending_intents() == []


# -- events ------------------------------------------------------------------------------


def test_events_newest_first_per_key_and_limited(store: Store) -> None:
    store.add_event(JOB_A, "Normal", "Created", "created job")
    store.add_event(JOB_B, "Warning", "OOMKilled", "exit 137")
    store.add_event(JOB_A, "Normal", "Succeeded", "done in 3m")
    assert [e.reason for e in store.list_events()] == ["Succeeded", "OOMKilled", "Created"]
    assert [e.reason for e in store.list_events(JOB_A)] == ["Succeeded", "Created"]
    assert [e.reason for e in store.list_events(limit=1)] == ["Succeeded"]
    warning = store.list_events(JOB_B)[0]
    assert (warning.key, warning.type, warning.message) == (JOB_B, "Warning", "exit 137")
    with pytest.raises(ValueError):
        store.add_event(JOB_A, "Error", "X", "not a type")


def test_events_at_the_same_instant_keep_insertion_order(open_store: OpenStore) -> None:
    frozen = TickingClock(step=timedelta(0))
    s = open_store(clock=frozen)
    for reason in ("First", "Second", "Third"):
        s.add_event(JOB_A, "Normal", reason, "")
    assert [e.reason for e in s.list_events(JOB_A)] == ["Third", "Second", "First"]


# -- commit checks -----------------------------------------------------------------------


def test_record_check_dedupes_identical_state_and_summary(store: Store) -> None:
    assert store.record_check("team-a", "c1", "nodus/plan", "pending", "planning", "gitnotes")
    assert not store.record_check("team-a", "c1", "nodus/plan", "pending", "planning", "gitnotes")
    assert store.record_check("team-a", "c1", "nodus/plan", "pending", "planning", "github")
    assert store.record_check("team-a", "c1", "nodus/apply", "pending", "planning", "gitnotes")
    assert store.record_check("team-a", "c1", "nodus/plan", "success", "planning", "gitnotes")
    assert store.record_check("team-a", "c1", "nodus/plan", "success", "2 to create", "gitnotes")
    assert not store.record_check(
        "team-a", "c1", "nodus/plan", "success", "2 to create", "gitnotes"
    )

    checks = store.list_checks(commit="c1")
    assert len(checks) == 3
    latest = checks[0]
    assert (latest.context, latest.state, latest.summary, latest.target) == (
        "nodus/plan",
        "success",
        "2 to create",
        "gitnotes",
    )
    assert store.list_checks(commit="c2") == []
    assert len(store.list_checks(binding_id="team-a")) == 3


# -- values ------------------------------------------------------------------------------


def test_json_round_trips_nested_and_unicode_everywhere(store: Store) -> None:
    store.upsert_resource(record(JOB_A, manifest=NESTED, status={"nested": NESTED}))
    got = store.get_resource(JOB_A)
    assert got is not None and got.manifest == NESTED and got.status == {"nested": NESTED}

    sync = store.start_sync("team-a", "c1")
    store.finish_sync(sync, "partial", "naïve ✓", {"plan": NESTED}, {"failed": 1, "ok": "✓"})
    s = store.get_sync(sync)
    assert s is not None and s.plan == {"plan": NESTED} and s.message == "naïve ✓"
    assert s.summary == {"failed": 1, "ok": "✓"}

    store.add_event(JOB_A, "Warning", "Ünïcode", "日本語 🚀")
    assert store.list_events(JOB_A)[0].message == "日本語 🚀"


def test_timestamps_are_aware_utc(open_store: OpenStore) -> None:
    plus_two = timezone(timedelta(hours=2))
    s = open_store(clock=lambda: datetime(2025, 6, 1, 12, 0, tzinfo=plus_two))
    s.upsert_binding("team-a", "u", "main", "", "proj-a")
    s.upsert_resource(record(JOB_A))
    got = s.get_resource(JOB_A)
    assert got is not None
    assert got.created_at == datetime(2025, 6, 1, 10, 0, tzinfo=UTC)
    assert got.created_at.tzinfo is UTC  # type: ignore[union-attr]

    naive = open_store(clock=lambda: datetime(2025, 6, 1, 12, 0))
    with pytest.raises(ValueError, match="clock must be timezone-aware"):
        naive.upsert_binding("team-x", "u", "main", "", "proj-x")
    with pytest.raises(ValueError, match="finished_at must be timezone-aware"):
        s.update_status(JOB_A, "Succeeded", None, None, None, {}, "0", datetime(2025, 1, 1))
