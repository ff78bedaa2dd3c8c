"""`state.quick_read`, the standard library's reader of a SQLite state for `get` and
`describe`: it hands out the records the full store does, opens only a database of
this code's schema (anything else is left to the store's own messages), and changes
nothing in the file."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.state import InventoryRecord, Store
from nodus_gitops.state.migrations import head
from nodus_gitops.state.quick_read import HEAD_REVISION, open_quick

from tests.state.support import TickingClock, execute

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.text(max_size=20)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=3),
    max_leaves=10)
_NAMES = st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True)


def _state(tmp_path: Path) -> tuple[Store, Path]:
    store = Store.open(None, tmp_path, clock=TickingClock())
    store.upsert_binding("team-a", "https://git.example/a.git", "main", "jobs", "proj-a")
    return store, tmp_path / "state.db"


def test_the_head_revision_is_alembics() -> None:
    assert HEAD_REVISION == head()


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(resources=st.dictionaries(st.tuples(st.sampled_from(["Job", "Pipeline", "Sweep"]),
                                           _NAMES),
                                 st.tuples(st.dictionaries(st.text(max_size=8), _JSON,
                                                           max_size=4),
                                           st.sampled_from([None, "Running", "Succeeded"]),
                                           st.booleans(), st.booleans()),
                                 max_size=6),
       events=st.lists(st.tuples(st.sampled_from(["Normal", "Warning"]),
                                 st.text(max_size=30)), max_size=5))
def test_it_reads_what_the_store_reads(tmp_path_factory, resources, events) -> None:
    store, database = _state(tmp_path_factory.mktemp("state"))
    records = [InventoryRecord(
        key=ResourceKey(kind, "proj-a", name), binding_id="team-a",
        manifest={"kind": kind, "metadata": {"name": name}, "spec": spec},
        spec_hash=hashlib.sha256(name.encode()).hexdigest(), source_commit="c0ffee",
        source_file=f"jobs/{name}.yaml", provider="local", phase=phase, status=dict(spec),
        cost_usd="0.000002", deleted=deleted)
        for (kind, name), (spec, phase, deleted, _finished) in resources.items()]
    store.upsert_resources(records)
    finished = datetime(2026, 12, 2, 7, 8, 9, 123456, tzinfo=UTC)
    for record, (_s, _p, _d, has_end) in zip(records, resources.values(), strict=True):
        if has_end:
            store.update_status(record.key, "Succeeded", "Done", "ok", None, {"a": [1]},
                                "1.5", finished_at=finished + timedelta(hours=1))
    for record in records[:2]:
        store.add_events([(record.key, type, "Reason", message) for type, message in events])
    quick = open_quick(database)
    assert quick is not None
    with quick:
        assert quick.list_inventory() == store.list_inventory()
        assert quick.list_inventory(kind="Job") == store.list_inventory(kind="Job")
        for record in records:
            assert quick.get_resource(record.key) == store.get_resource(record.key)
            assert quick.list_events(record.key) == store.list_events(record.key)
        assert quick.list_events(limit=3) == store.list_events(limit=3)
        assert quick.get_resource(ResourceKey("Job", "proj-a", "no-such")) is None
    store.close()


def test_another_schema_is_left_to_the_store(tmp_path: Path) -> None:
    store, database = _state(tmp_path)
    store.close()
    execute(f"sqlite:///{database}", "UPDATE alembic_version SET version_num = '0003'")
    assert open_quick(database) is None
    execute(f"sqlite:///{database}", "DROP TABLE alembic_version")
    assert open_quick(database) is None


def test_a_file_that_is_no_database_is_left_to_the_store(tmp_path: Path) -> None:
    (tmp_path / "state.db").write_bytes(b"not a database" * 100)
    assert open_quick(tmp_path / "state.db") is None
    assert open_quick(tmp_path / "missing.db") is None
    assert not (tmp_path / "missing.db").exists()


def test_reading_changes_nothing_in_the_database(tmp_path: Path) -> None:
    store, database = _state(tmp_path)
    store.close()
    before = database.read_bytes()
    there = {p.name for p in tmp_path.iterdir()}  # the store's own: state.db, mirrors/, ...
    quick = open_quick(database)
    assert quick is not None
    with quick:
        quick.list_inventory()
        quick.list_events()
    assert database.read_bytes() == before
    # WAL's own index and log, which any reader of a WAL database may make; nothing else
    assert {p.name for p in tmp_path.iterdir()} <= there | {"state.db-wal", "state.db-shm"}
