"""Schema migrations: an ordered list of functions, run on open inside one transaction.

`MIGRATIONS[i]` brings a database from version `i` to `i + 1`; the version reached is the
single row of `schema_version`. Rules for whoever adds version N + 1:

- append a function; never edit or reorder an earlier one;
- `state/models.py` always describes the latest schema. A fresh database is created from
  the models by migration 1 and stamped at `LATEST`, so later migrations only ever run on
  databases that already exist (the "create_all, then stamp" rule Alembic recommends);
- a migration gets the open `Connection` and must not commit: all of them, and the version
  bump, share the transaction the store opens, so a failure leaves the old schema intact.

On PostgreSQL the transaction first takes `pg_advisory_xact_lock`, so replicas starting
together migrate once; on SQLite the store opens write transactions with `BEGIN IMMEDIATE`,
which serialises them the same way.
"""

from __future__ import annotations

from collections.abc import Callable

from nodus_gitops.floor.errors import ConfigError
from nodus_gitops.state.models import TABLES, Intent, Lease, Replica, SchemaVersion
from sqlalchemy import Connection, func, inspect, select, text
from sqlmodel import SQLModel

Migration = Callable[[Connection], None]

# Any constant shared by every nodus-gitops process: b"nodusgit" read as a signed int64.
PG_MIGRATION_LOCK = int.from_bytes(b"nodusgit", "big", signed=True)


def _v1_create_tables(conn: Connection) -> None:
    SQLModel.metadata.create_all(conn, tables=list(TABLES))


def _v2_leases(conn: Connection) -> None:
    """Leases and replica heartbeats, for several replicas on one store."""
    SQLModel.metadata.create_all(conn, tables=[Lease.__table__, Replica.__table__])  # type: ignore[attr-defined]


def _v3_pending_intents_index(conn: Connection) -> None:
    """One index on (binding_id, state) for the pending-intents query of every poll, in
    place of the index on state alone."""
    for index in Intent.__table__.indexes:  # type: ignore[attr-defined]
        if index.name == "ix_intent_binding_state":
            index.create(conn, checkfirst=True)
    conn.execute(text("DROP INDEX IF EXISTS ix_intent_state"))


MIGRATIONS: tuple[Migration, ...] = (_v1_create_tables, _v2_leases, _v3_pending_intents_index)
LATEST = len(MIGRATIONS)

_VERSION = SchemaVersion.__table__  # type: ignore[attr-defined]


def current_version(conn: Connection) -> int:
    """The schema version the database is at; 0 for an empty database."""
    if not inspect(conn).has_table(_VERSION.name):
        return 0
    version = conn.execute(select(_VERSION.c.version).where(_VERSION.c.id == 1)).scalar()
    return int(version or 0)


def migrate(conn: Connection, label: str) -> int:
    """Bring the database behind `conn` (inside a write transaction) to `LATEST`.

    `label` names the database in the error raised when it is newer than this code.
    Returns the version found before migrating.
    """
    if conn.dialect.name == "postgresql":
        conn.execute(select(func.pg_advisory_xact_lock(PG_MIGRATION_LOCK)))
    found = current_version(conn)
    if found > LATEST:
        raise ConfigError(
            f"state database {label} is at schema version {found}, newer than this "
            f"nodus-gitops ({LATEST}): upgrade nodus-gitops (or point --state elsewhere)"
        )
    if found == LATEST:
        return found
    if found == 0:
        MIGRATIONS[0](conn)
    else:
        for migration in MIGRATIONS[found:]:
            migration(conn)
    if found == 0:
        conn.execute(_VERSION.insert().values(id=1, version=LATEST))
    else:
        conn.execute(_VERSION.update().where(_VERSION.c.id == 1).values(version=LATEST))
    return found
