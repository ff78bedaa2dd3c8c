"""Schema migrations with Alembic, run on open inside the store's one write transaction.

The Alembic environment ships in the package (state/alembic: env.py, script.py.mako,
versions/) and runs from code, with no alembic.ini: `migrate` hands Alembic the open
`Connection` in `config.attributes["connection"]`, so every revision, and the version
row, commit together with the store's transaction, or not at all.

On PostgreSQL that transaction first takes `pg_advisory_xact_lock`, so replicas starting
together migrate once; on SQLite the store opens write transactions with `BEGIN IMMEDIATE`,
which serialises them the same way. Either way the revision is read only once the lock is
held, and a database at a revision this code does not know is refused, untouched.

`state/models.py` always describes the head revision; tests/state/test_migrations.py
fails when they differ. For a schema change, edit the models, then let Alembic write the
revision (compared with a scratch database at head) and review it:

    python -m nodus_gitops.state.alembic revision -m "what changes"

A revision must not commit. On SQLite, `PRAGMA foreign_keys` cannot change inside the
transaction, so a batch operation that recreates a table others reference (repo_binding,
sync) needs its referring rows handled in the revision itself.

Databases made by the ordered migrations that came before (a `schema_version` row at 1, 2
or 3, and no Alembic revision) get the steps they missed, are stamped with revision 0001
(version 3's schema exactly) and go on from there; their row is set to `LEGACY_GUARD`, as
on a new database, so those older releases refuse the database rather than recreate it.
"""

from __future__ import annotations

import functools
from typing import Any, Literal

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.operations import Operations
from alembic.script import ScriptDirectory
from nodus_gitops.floor.errors import ConfigError
from nodus_gitops.state.models import SchemaVersion
from sqlalchemy import Connection, func, inspect, select
from sqlalchemy.types import TypeDecorator
from sqlmodel import SQLModel

SCRIPT_LOCATION = "nodus_gitops.state:alembic"

# Any constant shared by every nodus-gitops process: b"nodusgit" read as a signed int64.
PG_MIGRATION_LOCK = int.from_bytes(b"nodusgit", "big", signed=True)

BASELINE = "0001"  # the revision that is the ordered migrations' version 3
LEGACY_LATEST = 3  # the last version of the ordered migrations
LEGACY_GUARD = 4  # schema_version from Alembic on: newer than any release before it knows

_VERSION = SchemaVersion.__table__  # type: ignore[attr-defined]


def alembic_config(connection: Connection | None = None) -> Config:
    """Alembic's configuration for the package's environment, on `connection`."""
    config = Config()
    config.set_main_option("script_location", SCRIPT_LOCATION)
    config.attributes["connection"] = connection
    return config


@functools.cache
def _scripts(location: str) -> ScriptDirectory:
    config = Config()
    config.set_main_option("script_location", location)
    return ScriptDirectory.from_config(config)


def scripts() -> ScriptDirectory:
    """The revisions this code knows."""
    return _scripts(SCRIPT_LOCATION)


def head() -> str:
    """The revision `migrate` brings a database to."""
    revision = scripts().get_current_head()
    assert revision is not None, f"no revisions in {SCRIPT_LOCATION}"
    return revision


def render_item(type_: str, obj: Any, _autogen_context: Any) -> str | Literal[False]:
    """Autogenerate writes the models' `TypeDecorator`s (`UTCDateTime`, SQLModel's
    `AutoString`) as the SQLAlchemy type they store, so revisions never import models."""
    if type_ == "type" and isinstance(obj, TypeDecorator):
        return f"sa.{obj.impl!r}"
    return False


def context_options(connection: Connection) -> dict[str, Any]:
    """What env.py passes to `context.configure` besides the connection (also what the
    drift test compares with)."""
    return dict(
        target_metadata=SQLModel.metadata,
        render_item=render_item,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite's ALTER TABLE is thin
        compare_type=True,
    )


def current_revision(conn: Connection) -> str | None:
    """The Alembic revision the database is at; None before any."""
    return MigrationContext.configure(conn).get_current_revision()


def legacy_version(conn: Connection) -> int | None:
    """The `schema_version` row of the ordered migrations; None without one."""
    if not inspect(conn).has_table(_VERSION.name):
        return None
    version = conn.execute(select(_VERSION.c.version).where(_VERSION.c.id == 1)).scalar()
    return None if version is None else int(version)


def migrate(conn: Connection, label: str) -> str | None:
    """Bring the database behind `conn` (inside a write transaction) to `head()`.

    `label` names the database in the error raised when its revision is unknown (newer
    than this code). Returns the Alembic revision found (None: a new database, or one of
    the ordered migrations).
    """
    if conn.dialect.name == "postgresql":
        conn.execute(select(func.pg_advisory_xact_lock(PG_MIGRATION_LOCK)))
    found = current_revision(conn)
    known = {script.revision for script in scripts().walk_revisions()}
    if found is not None and found not in known:
        raise ConfigError(
            f"state database {label} is at schema revision {found}, newer than this "
            f"nodus-gitops ({head()}): upgrade nodus-gitops (or point --state elsewhere)"
        )
    if found == head():
        return found
    config = alembic_config(conn)
    if found is None and (legacy := legacy_version(conn)) is not None:
        _upgrade_legacy(conn, legacy, label)
        command.stamp(config, BASELINE)
    command.upgrade(config, "head")
    return found


def _upgrade_legacy(conn: Connection, version: int, label: str) -> None:
    """Bring a database of the ordered migrations to their version 3 (revision 0001),
    with their own steps as they ran then, frozen here."""
    if not 1 <= version <= LEGACY_LATEST:
        raise ConfigError(
            f"state database {label} has schema_version {version} and no Alembic revision: "
            f"not a database this nodus-gitops can upgrade (point --state elsewhere)"
        )
    op = Operations(MigrationContext.configure(conn))
    if version < 2:  # version 2: leases and replica heartbeats
        op.create_table(
            "lease",
            sa.Column("binding_id", sa.String(length=200), nullable=False),
            sa.Column("holder", sa.String(), nullable=False),
            sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
            sa.Column("token", sa.Integer(), nullable=False),
            sa.PrimaryKeyConstraint("binding_id"),
        )
        op.create_table(
            "replica",
            sa.Column("id", sa.String(length=200), nullable=False),
            sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
            sa.PrimaryKeyConstraint("id"),
        )
        op.create_index("ix_replica_heartbeat_at", "replica", ["heartbeat_at"])
    if version < 3:  # version 3: pending intents by (binding_id, state), not state alone
        op.create_index("ix_intent_binding_state", "intent", ["binding_id", "state"])
        op.drop_index("ix_intent_state", "intent", if_exists=True)
    conn.execute(_VERSION.update().where(_VERSION.c.id == 1).values(version=LEGACY_GUARD))
