"""Opening the store: the `--state` setting, Alembic migrations, the revision guard, and
databases of the ordered migrations that came before Alembic."""

from __future__ import annotations

import shutil
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata, produce_migrations, render_python_code
from alembic.migration import MigrationContext
from nodus_gitops.floor.errors import ConfigError
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.state import Store
from nodus_gitops.state import migrations as m
from nodus_gitops.state.alembic.__main__ import main as alembic_main
from nodus_gitops.state.models import InventoryItem
from sqlalchemy import create_engine, func, inspect, make_url, select
from sqlmodel import SQLModel

from tests.fixtures_postgres import PG_URL
from tests.state.support import TickingClock, execute

OpenStore = Callable[..., Store]
LEGACY = Path(__file__).with_name("legacy")
TABLES = ("repo_binding", "sync", "inventory", "intent", "event", "check_record", "lease",
          "replica", "webhook_delivery", "inventory_label")


def _backend(url: str) -> str:
    return make_url(url).get_backend_name()


def test_first_open_creates_the_head_revision_and_reopening_changes_nothing(
    open_store: OpenStore, state_url: str
) -> None:
    first = open_store()
    assert first.schema_version() == m.head()
    first.upsert_binding("team-a", "u", "main", "", "proj-a")
    first.close()

    again = open_store()
    assert again.schema_version() == m.head()
    assert [b.id for b in again.list_bindings()] == ["team-a"]
    assert execute(state_url, "SELECT version_num FROM alembic_version") == [[(m.head(),)]]
    # The releases before Alembic refuse a schema_version above theirs (3): they refuse this.
    assert execute(state_url, "SELECT id, version FROM schema_version") == [[(1, 4)]]
    assert m.LEGACY_GUARD == 4 > m.LEGACY_LATEST


def test_a_newer_schema_is_refused_and_left_alone(open_store: OpenStore, state_url: str) -> None:
    open_store().close()
    execute(state_url, "UPDATE alembic_version SET version_num = 'f00dfeed'")
    with pytest.raises(ConfigError) as caught:
        open_store()
    message = str(caught.value)
    assert (f"is at schema revision f00dfeed, newer than this nodus-gitops ({m.head()}): "
            "upgrade nodus-gitops") in message
    assert message.startswith("state database ")
    assert execute(state_url, "SELECT version_num FROM alembic_version") == [[("f00dfeed",)]]


_PROBE = '''"""A test's revision."""
import sqlalchemy as sa
from alembic import op

revision = "probe"
down_revision = "{down}"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table("probe", sa.Column("id", sa.Integer(), primary_key=True))
    op.add_column("repo_binding", sa.Column("probe_note", sa.String()))
    {then}


def downgrade():
    pass
'''


def _scripts_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, probe: str | None) -> Path:
    """The package's Alembic environment copied under tmp_path and used instead of it,
    with `probe` (a body's last line) as the revision after the head when given."""
    location = tmp_path / "alembic-copy"
    shutil.copytree(Path(m.__file__).with_name("alembic"), location,
                    ignore=shutil.ignore_patterns("__pycache__"))
    if probe is not None:
        (location / "versions" / "probe.py").write_text(_PROBE.format(then=probe,
                                                                      down=m.head()))
    monkeypatch.setattr(m, "SCRIPT_LOCATION", str(location))
    return location


def test_revisions_run_in_order_on_an_older_database(
    open_store: OpenStore, state_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    open_store().close()
    _scripts_copy(tmp_path, monkeypatch, probe="pass")
    assert m.head() == "probe"
    assert open_store().schema_version() == "probe"
    assert execute(state_url, "SELECT count(*) FROM probe") == [[(0,)]]


def test_a_failing_migration_leaves_the_old_schema_whole(
    open_store: OpenStore, state_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    open_store().close()
    _scripts_copy(tmp_path, monkeypatch, probe='raise RuntimeError("revision 2 failed half way")')
    with pytest.raises(RuntimeError, match="half way"):
        open_store()
    monkeypatch.undo()

    store = open_store()
    assert store.schema_version() == m.head()
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
        assert store.schema_version() == m.head()


def test_pending_intents_are_found_through_their_index(tmp_path: Path) -> None:
    """The query each poll makes reads only the binding's pending intents."""
    Store.open(None, tmp_path).close()
    with sqlite3.connect(tmp_path / "state.db") as conn:
        plan = conn.execute(
            "EXPLAIN QUERY PLAN SELECT * FROM intent WHERE state = 'pending' "
            "AND binding_id = 'b' ORDER BY id").fetchall()
    assert "USING INDEX ix_intent_binding_state (binding_id=? AND state=?)" in str(plan)



def _hold_migration_lock(url: str) -> Callable[[], None]:
    """Take, from outside the store, the lock a replica migrates under; returns its release."""
    if _backend(url) == "sqlite":
        holder = sqlite3.connect(make_url(url).database or "", isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")

        def release_sqlite() -> None:
            holder.execute("ROLLBACK")
            holder.close()
        return release_sqlite
    engine = create_engine(url)
    conn = engine.connect()
    conn.execute(select(func.pg_advisory_lock(m.PG_MIGRATION_LOCK)))

    def release_postgresql() -> None:
        conn.execute(select(func.pg_advisory_unlock(m.PG_MIGRATION_LOCK)))
        conn.close()
        engine.dispose()
    return release_postgresql


def test_a_replica_migrates_only_while_no_other_does(state_url: str) -> None:
    """Opening waits for the migration lock (the PostgreSQL advisory lock, SQLite's write
    lock) that another replica holds, and reads the revision only once it has it."""
    release = _hold_migration_lock(state_url)
    opened: list[Store] = []
    opener = threading.Thread(target=lambda: opened.append(Store.open(state_url)))
    opener.start()
    try:
        opener.join(timeout=1.5)
        assert opener.is_alive() and not opened  # waiting, not failing
    finally:
        release()
    opener.join(timeout=30)
    assert [s.schema_version() for s in opened] == [m.head()]
    opened[0].close()


# -- models and revisions agree --------------------------------------------------------------


def _drift(url: str) -> list[Any]:
    """What autogenerate would write for the database behind `url`: [] when it matches."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts=m.context_options(conn))
            return compare_metadata(context, SQLModel.metadata)
    finally:
        engine.dispose()


def test_the_models_are_the_head_revision(open_store: OpenStore, state_url: str) -> None:
    open_store().close()
    assert _drift(state_url) == []


def test_autogenerate_writes_revisions_without_model_types() -> None:
    """From nothing, autogenerate writes every table with plain SQLAlchemy types."""
    engine = create_engine("sqlite://")
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts=m.context_options(conn))
        code = render_python_code(produce_migrations(context, SQLModel.metadata).upgrade_ops,
                                  render_item=m.render_item, migration_context=context)
    engine.dispose()
    assert "sqlmodel" not in code and "nodus_gitops" not in code
    assert "sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False)" in code
    assert "sa.Column('id', sa.String(length=200), nullable=False)" in code
    assert all(f"op.create_table('{table}'" in code for table in TABLES)


def test_the_revision_command_finds_nothing_to_write_for_unchanged_models(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    location = _scripts_copy(tmp_path, monkeypatch, probe=None)
    following = f"{int(m.head()) + 1:04d}"
    assert alembic_main(["revision", "-m", "nothing new"]) == 0
    written = location / "versions" / f"{following}_nothing_new.py"
    assert f"Generating {written}" in capsys.readouterr().out
    source = written.read_text()
    assert f'revision: str = "{following}"' in source or \
        f"revision: str = '{following}'" in source
    assert "op." not in source.split("def upgrade")[1].split("def downgrade")[0]
    compile(source, str(written), "exec")


# -- databases of the ordered migrations -----------------------------------------------------


def _build_legacy(url: str, version: int) -> None:
    """The database the ordered migrations left at `version`: the statements they ran for
    version 3 (tests/state/legacy/, captured from them), then undone back to `version`."""
    text = (LEGACY / f"v3.{_backend(url)}.sql").read_text()
    lines = [line for line in text.splitlines() if not line.startswith("--")]
    statements = [s.strip() for s in "\n".join(lines).split(";") if s.strip()]
    if version < 3:  # version 2 indexed intents by state alone
        statements += ["DROP INDEX ix_intent_binding_state",
                       "CREATE INDEX ix_intent_state ON intent (state)"]
    if version < 2:  # version 1 had no leases
        statements += ["DROP TABLE lease", "DROP TABLE replica"]
    statements.append(f"UPDATE schema_version SET version = {version}")
    execute(url, *statements)


LEGACY_LABELS = {"team": "a", "app.kubernetes.io/name": "j"}


def _fill(url: str, version: int) -> None:
    """Rows in every table, written by the store's code without migrating first."""
    engine = create_engine(url)
    store = Store(engine, TickingClock(), "legacy")
    try:
        store.upsert_binding("team-a", "https://git.example/a.git", "main", "jobs", "proj-a")
        store.record_poll("team-a", "c1", None)
        sync = store.start_sync("team-a", "c1")
        store.finish_sync(sync, "applied", "ok", {"creates": ["j"]}, {"created": 1})
        key = ResourceKey("Job", "proj-a", "j")
        # As the code of that schema wrote it (the store's own would write its labels too).
        with engine.begin() as conn:
            conn.execute(InventoryItem.__table__.insert().values(  # type: ignore[attr-defined]
                kind="Job", project="proj-a", name="j", binding_id="team-a",
                manifest={"kind": "Job", "metadata": {"name": "j", "labels": LEGACY_LABELS}},
                spec_hash="h1", phase="Running", status={"gpu": 1}, cost_usd="0",
                created_at=store._now(), updated_at=store._now(), deleted=False))
        done = store.add_intent("team-a", sync, "create", key, "h1", "k-done", {"a": 1})
        store.complete_intent(done, {"id": "nodus-1"})
        store.add_intent("team-a", sync, "patch", key, "h1", "k-pending", {"b": 2})
        store.add_event(key, "Normal", "Created", "made j")
        store.record_check("team-a", "c1", "nodus/plan", "success", "ok", "gitnotes")
        if version >= 2:
            store.acquire_lease("team-a", "replica-1", timedelta(seconds=15))
            store.heartbeat("replica-1")
    finally:
        engine.dispose()


def _rows(url: str) -> dict[str, list[tuple]]:
    tables = [t for t in TABLES if t in _tables(url)]
    found = execute(url, *(f"SELECT * FROM {t} ORDER BY 1" for t in tables))
    return dict(zip(tables, found, strict=True))


def _tables(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return set(inspect(conn).get_table_names())
    finally:
        engine.dispose()


def _schema(url: str) -> dict[str, Any]:
    """Every table, column, key, index and constraint of the database (and on SQLite the
    statements it keeps), Alembic's own table aside."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            insp = inspect(conn)
            schema: dict[str, Any] = {}
            for table in sorted(set(insp.get_table_names()) - {"alembic_version"}):
                schema[table] = dict(
                    columns=[(c["name"], str(c["type"]), c["nullable"], c["default"])
                             for c in insp.get_columns(table)],
                    pk=insp.get_pk_constraint(table),
                    fks=sorted(map(repr, insp.get_foreign_keys(table))),
                    indexes=sorted(map(repr, insp.get_indexes(table))),
                    uniques=sorted(map(repr, insp.get_unique_constraints(table))),
                    checks=sorted(map(repr, insp.get_check_constraints(table))),
                )
            if conn.dialect.name == "sqlite":  # the statements, whitespace aside
                schema["sqlite_master"] = sorted(
                    (kind, name, table, " ".join((sql or "").split()))
                    for kind, name, table, sql in conn.exec_driver_sql(
                        "SELECT type, name, tbl_name, sql FROM sqlite_master "
                        "WHERE tbl_name != 'alembic_version'"))
            return schema
    finally:
        engine.dispose()


@pytest.fixture
def twin_url(state_url: str, tmp_path: Path) -> Iterator[str]:
    """A second empty database of the kind of `state_url`."""
    if _backend(state_url) == "sqlite":
        yield f"sqlite:///{tmp_path / 'twin.db'}"
        return
    schema = f"nodus_twin_{uuid.uuid4().hex[:12]}"
    admin = create_engine(PG_URL)
    with admin.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    try:
        yield f"{PG_URL}?options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
        admin.dispose()


def test_the_first_revision_is_the_schema_the_ordered_migrations_made(
    state_url: str, twin_url: str
) -> None:
    engine = create_engine(state_url)
    try:
        with engine.begin() as conn:
            command.upgrade(m.alembic_config(conn), m.BASELINE)
    finally:
        engine.dispose()
    _build_legacy(twin_url, 3)
    assert _schema(state_url) == _schema(twin_url)


@pytest.mark.parametrize("version", [1, 2, 3])
def test_a_database_of_the_ordered_migrations_is_upgraded_with_its_rows(
    open_store: OpenStore, state_url: str, version: int, twin_url: str
) -> None:
    _build_legacy(state_url, version)
    _fill(state_url, version)
    before = _rows(state_url)
    assert execute(state_url, "SELECT version FROM schema_version") == [[(version,)]]

    store = open_store()
    assert store.schema_version() == m.head()
    assert execute(state_url, "SELECT version FROM schema_version") == [[(m.LEGACY_GUARD,)]]
    after = _rows(state_url)
    assert {t: after[t] for t in before} == before
    (resource_id, *_), = before["inventory"]
    assert sorted(after["inventory_label"]) == sorted(
        (resource_id, k, v) for k, v in LEGACY_LABELS.items())  # filled by the migration
    assert _drift(state_url) == []
    Store.open(twin_url).close()
    assert _schema(state_url) == _schema(twin_url)  # as if made new

    # and the store works on it as on any other
    key = ResourceKey("Job", "proj-a", "j")
    assert [b.last_seen_commit for b in store.list_bindings()] == ["c1"]
    assert store.get_resource(key).status == {"gpu": 1}  # type: ignore[union-attr]
    assert [i.idempotency_key for i in store.pending_intents("team-a")] == ["k-pending"]
    assert [e.reason for e in store.list_events(key)] == ["Created"]
    assert store.start_sync("team-a", "c2") == max(r[0] for r in before["sync"]) + 1
    if version >= 2:
        assert store.lease_of("team-a")[0] == "replica-1"  # type: ignore[index]
        assert store.live_replicas(timedelta(days=365 * 100)) == ["replica-1"]
    else:
        assert store.acquire_lease("team-a", "replica-1", timedelta(seconds=15)) == 1


def test_reopening_an_upgraded_database_of_the_ordered_migrations_changes_nothing(
    open_store: OpenStore, state_url: str
) -> None:
    _build_legacy(state_url, 2)
    _fill(state_url, 2)
    open_store().close()
    upgraded = _schema(state_url), _rows(state_url)
    open_store().close()
    assert (_schema(state_url), _rows(state_url)) == upgraded


def test_an_unknown_version_of_the_ordered_migrations_is_refused_and_left_alone(
    open_store: OpenStore, state_url: str
) -> None:
    _build_legacy(state_url, 3)
    execute(state_url, "UPDATE schema_version SET version = 9")
    with pytest.raises(ConfigError) as caught:
        open_store()
    assert "has schema_version 9 and no Alembic revision" in str(caught.value)
    assert str(caught.value).startswith("state database ")
    assert "alembic_version" not in _tables(state_url)
    assert execute(state_url, "SELECT version FROM schema_version") == [[(9,)]]

