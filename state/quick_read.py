"""A read-only view of a SQLite state through the standard library's `sqlite3` alone.

`get` and `describe` read a few rows and end; loading SQLAlchemy, SQLModel and Alembic
to do it cost them most of a second of start-up. `QuickReader` answers the store's
reads those commands make (`list_inventory`, `get_resource`, `list_events`) from the
same tables and hands out the same records, and only for a database whose schema is
exactly `HEAD_REVISION`: `open_quick` returns None for anything else (another schema,
a file SQLite cannot open), and the caller opens the full `Store`, whose messages say
what is wrong. A test checks `HEAD_REVISION` against Alembic's head and that both
readers return equal records.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.state.records import EventRecord, InventoryRecord

HEAD_REVISION = "0004"  # state/alembic/versions' newest revision
BUSY_TIMEOUT_S = 5.0  # as the store's: a writer's transaction is short

_INVENTORY = ("kind, project, name, binding_id, manifest, spec_hash, source_commit, "
              "source_file, provider, provider_id, phase, reason, message, fix, status, "
              "cost_usd, created_at, updated_at, finished_at, deleted")
_EVENTS = "id, kind, project, name, at, type, reason, message"


def open_quick(database: Path) -> QuickReader | None:
    """A reader of the SQLite file `database` when its schema is this code's, else None.
    Opened read-only: it never creates, migrates or changes the file."""
    try:
        conn = sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro", uri=True,
                               timeout=BUSY_TIMEOUT_S)
    except sqlite3.Error:
        return None
    try:
        row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.Error:
        row = None
    if row is None or row[0] != HEAD_REVISION:
        conn.close()
        return None
    return QuickReader(conn)


class QuickReader:
    """The reads of `Store` that `get` and `describe` make; see the module's docstring."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def list_inventory(self, binding_id: str | None = None, project: str | None = None,
                       kind: str | None = None) -> list[InventoryRecord]:
        """As `Store.list_inventory`: deleted ones included, by (kind, project, name)."""
        where, params = _filters({"binding_id": binding_id, "project": project, "kind": kind})
        rows = self._conn.execute(f"SELECT {_INVENTORY} FROM inventory{where} "
                                  "ORDER BY kind, project, name", params)
        return [_inventory(row) for row in rows]

    def get_resource(self, key: ResourceKey) -> InventoryRecord | None:
        row = self._conn.execute(f"SELECT {_INVENTORY} FROM inventory "
                                 "WHERE kind = ? AND project = ? AND name = ?",
                                 (key.kind, key.project, key.name)).fetchone()
        return None if row is None else _inventory(row)

    def list_events(self, key: ResourceKey | None = None, limit: int = 100
                    ) -> list[EventRecord]:
        """As `Store.list_events`: newest first."""
        where, params = _filters({} if key is None else {
            "kind": key.kind, "project": key.project, "name": key.name})
        rows = self._conn.execute(f"SELECT {_EVENTS} FROM event{where} "
                                  "ORDER BY at DESC, id DESC LIMIT ?", (*params, limit))
        return [EventRecord(id=id, key=ResourceKey(kind, project, name), at=_utc(at),
                            type=type, reason=reason, message=message)
                for id, kind, project, name, at, type, reason, message in rows]

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> QuickReader:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def _filters(columns: dict[str, str | None]) -> tuple[str, tuple[str, ...]]:
    """A WHERE clause for the columns given a value (names are this module's own)."""
    chosen = {c: v for c, v in columns.items() if v is not None}
    if not chosen:
        return "", ()
    return " WHERE " + " AND ".join(f"{c} = ?" for c in chosen), tuple(chosen.values())


def _inventory(row: tuple[Any, ...]) -> InventoryRecord:
    (kind, project, name, binding_id, manifest, spec_hash, source_commit, source_file,
     provider, provider_id, phase, reason, message, fix, status, cost_usd, created_at,
     updated_at, finished_at, deleted) = row
    return InventoryRecord(
        key=ResourceKey(kind, project, name), binding_id=binding_id,
        manifest=json.loads(manifest), spec_hash=spec_hash, source_commit=source_commit,
        source_file=source_file, provider=provider, provider_id=provider_id, phase=phase,
        reason=reason, message=message, fix=fix, status=json.loads(status),
        cost_usd=cost_usd, created_at=_utc(created_at), updated_at=_utc(updated_at),
        finished_at=_utc(finished_at), deleted=bool(deleted))


def _utc(text: str | None) -> datetime | None:
    """A timestamp as SQLAlchemy stores it on SQLite (naive UTC text), aware again."""
    return None if text is None else datetime.fromisoformat(text).replace(tzinfo=UTC)
