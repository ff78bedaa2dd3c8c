"""Opening the store: the `--state` setting, schema migrations and the version guard."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from nodus_gitops.floor.errors import ConfigError
from nodus_gitops.state import Store
from nodus_gitops.state import migrations as m
from nodus_gitops.state.models import Lease, Replica
from sqlalchemy import Connection, create_engine, inspect, text
from sqlmodel import SQLModel

from tests.state.support import execute

OpenStore = Callable[..., Store]


def test_first_open_creates_schema_v1_and_reopening_changes_nothing(
    open_store: OpenStore, state_url: str
) -> None:
    first = open_store()
    assert first.schema_version() == m.LATEST == len(m.MIGRATIONS)
    first.upsert_binding("team-a", "u", "main", "", "proj-a")
    first.close()

    again = open_store()
    assert again.schema_version() == m.LATEST
    assert [b.id for b in again.list_bindings()] == ["team-a"]
    assert execute(state_url, "SELECT id, version FROM schema_version") == [[(1, m.LATEST)]]


def test_a_newer_schema_is_refused_and_left_alone(open_store: OpenStore, state_url: str) -> None:
    open_store().close()
    execute(state_url, "UPDATE schema_version SET version = 7")
    with pytest.raises(ConfigError) as caught:
        open_store()
    message = str(caught.value)
    assert (f"is at schema version 7, newer than this nodus-gitops ({m.LATEST}): upgrade "
            "nodus-gitops") in message
    assert message.startswith("state database ")
    assert execute(state_url, "SELECT version FROM schema_version") == [[(7,)]]


def _add_probe_table(conn: Connection) -> None:
    conn.execute(text("CREATE TABLE probe (id INTEGER PRIMARY KEY)"))
    conn.execute(text("ALTER TABLE repo_binding ADD COLUMN probe_note VARCHAR"))


def _broken(conn: Connection) -> None:
    _add_probe_table(conn)
    raise RuntimeError("migration 2 failed half way")


def test_migrations_run_in_order_on_an_older_database(
    open_store: OpenStore, state_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    open_store().close()
    monkeypatch.setattr(m, "MIGRATIONS", (*m.MIGRATIONS, _add_probe_table))
    monkeypatch.setattr(m, "LATEST", len(m.MIGRATIONS))
    assert open_store().schema_version() == m.LATEST
    assert execute(state_url, "SELECT count(*) FROM probe") == [[(0,)]]


def test_a_failing_migration_leaves_the_old_schema_whole(
    open_store: OpenStore, state_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    open_store().close()
    before = m.LATEST
    monkeypatch.setattr(m, "MIGRATIONS", (*m.MIGRATIONS, _broken))
    monkeypatch.setattr(m, "LATEST", len(m.MIGRATIONS))
    with pytest.raises(RuntimeError, match="half way"):
        open_store()
    monkeypatch.undo()

    store = open_store()
    assert store.schema_version() == before
    engine = create_engine(state_url)
    try:
        with engine.connect() as conn:
            insp = inspect(conn)
            assert not insp.has_table("probe")
            assert "probe_note" not in {c["name"] for c in insp.get_columns("repo_binding")}
    finally:
        engine.dispose()


def test_default_database_lives_in_the_state_dir_in_wal_mode(tmp_path: Path) -> None:
    state_dir = tmp_path / "var" / "nodus"
    with Store.open(state_dir=state_dir) as store:
        store.upsert_binding("team-a", "u", "main", "", "proj-a")
    db = state_dir / "state.db"
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("SELECT id FROM repo_binding").fetchall() == [("team-a",)]


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("not a url", "is not a database URL"),
        ("mysql://u@localhost/db", "unsupported database 'mysql'"),
        ("sqlite://", "must name a database file"),
        ("sqlite:///:memory:", "must name a database file"),
        ("sqlite:////no/such/dir/state.db", "does not exist"),
        ("postgresql://u:s3cret@127.0.0.1:1/db", "cannot open state database"),
    ],
)
def test_bad_state_urls_name_the_setting_and_hide_passwords(url: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Store.open(url)
    message = str(caught.value)
    assert message.startswith("--state: ") and says in message
    assert "s3cret" not in message


def test_no_url_and_no_state_dir_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="--state"):
        Store.open()


def test_plain_postgresql_urls_use_psycopg(pg_state_url: str) -> None:
    plain = pg_state_url.replace("postgresql+psycopg://", "postgresql://")
    with Store.open(plain) as store:
        assert store.schema_version() == m.LATEST


def test_a_version_1_database_is_upgraded_to_leases(
    open_store: OpenStore, state_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store made by the first release (no lease tables) opens and gains them."""
    monkeypatch.setattr(m, "LATEST", 1)
    real_v1 = m._v1_create_tables

    def v1_without_leases(conn: Connection) -> None:
        SQLModel.metadata.create_all(conn, tables=[t for t in m.TABLES if t not in (
            Lease.__table__, Replica.__table__)])

    monkeypatch.setattr(m, "MIGRATIONS", (v1_without_leases,))
    old = open_store()
    old.upsert_binding("team-a", "u", "main", "", "proj-a")
    assert old.schema_version() == 1
    old.close()
    monkeypatch.undo()
    assert m.MIGRATIONS[0] is real_v1
    store = open_store()
    assert store.schema_version() == m.LATEST >= 2
    assert store.acquire_lease("team-a", "replica-1", timedelta(seconds=15)) == 1
    assert [b.id for b in store.list_bindings()] == ["team-a"]


def test_a_version_2_database_gains_the_pending_intents_index(
    open_store: OpenStore, state_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index of the second release (state alone) gives way to (binding_id, state)."""
    monkeypatch.setattr(m, "LATEST", 2)
    monkeypatch.setattr(m, "MIGRATIONS", m.MIGRATIONS[:2])
    old = open_store()
    old.close()
    execute(state_url, "DROP INDEX ix_intent_binding_state",
            "CREATE INDEX ix_intent_state ON intent (state)")
    monkeypatch.undo()
    assert open_store().schema_version() == m.LATEST >= 3
    engine = create_engine(state_url)
    try:
        with engine.connect() as conn:
            names = {i["name"] for i in inspect(conn).get_indexes("intent")}
    finally:
        engine.dispose()
    assert "ix_intent_binding_state" in names and "ix_intent_state" not in names


def test_pending_intents_are_found_through_their_index(tmp_path: Path) -> None:
    """The query each poll makes reads only the binding's pending intents."""
    Store.open(None, tmp_path).close()
    with sqlite3.connect(tmp_path / "state.db") as conn:
        plan = conn.execute(
            "EXPLAIN QUERY PLAN SELECT * FROM intent WHERE state = 'pending' "
            "AND binding_id = 'b' ORDER BY id").fetchall()
    assert "USING INDEX ix_intent_binding_state (binding_id=? AND state=?)" in str(plan)
