"""What every part of the store shares: one engine, one clock, one short transaction a call.

`StoreBase` holds the engine and the injected clock and gives the parts (`inventory`,
`journal`, `store`) `_read()` and `_write()` transactions, a dialect-matched `INSERT` that
knows `ON CONFLICT`, and the helpers that turn rows keyed by (kind, project, name) into
records keyed by `ResourceKey`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import UTC, datetime
from typing import Any

from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.state import engine as engines
from sqlalchemy import Connection, Engine, Insert, Row, Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError


def utc_now() -> datetime:
    return datetime.now(UTC)


class StoreBase:
    """The engine, the clock and the transaction helpers; see `state.store.Store`."""

    def __init__(self, engine: Engine, clock: Callable[[], datetime], label: str) -> None:
        self._engine = engine
        self._writer = engines.write_engine(engine)
        self._clock = clock
        self._pg = engine.dialect.name == "postgresql"
        self._batch = threading.local()
        # SQLite has one writer at a time, and its busy handler polls: with many threads
        # of this process queued on it, one could wait past the busy timeout and fail.
        # They queue on this lock instead (as long as it takes); the busy timeout is left
        # for other processes' writers. PostgreSQL's writers need no queue.
        self._writers: AbstractContextManager[Any] = (
            nullcontext() if self._pg else threading.RLock())
        self.label = label

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        batch = getattr(self._batch, "conn", None)
        if batch is not None:  # inside `batch()`: one transaction for all of it
            yield batch
            return
        with self._writers, self._writer.begin() as conn:
            yield conn

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Every write made in this thread inside the block commits together, once, at
        its end (or none of them does). Reads inside still see only committed data."""
        if getattr(self._batch, "conn", None) is not None:
            yield
            return
        with self._writers, self._writer.begin() as conn:
            self._batch.conn = conn
            try:
                yield
            finally:
                self._batch.conn = None

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        with self._engine.connect() as conn:
            yield conn

    def _insert(self, table: Table) -> Any:
        return (postgresql.insert if self._pg else sqlite.insert)(table)

    def _now(self) -> datetime:
        return utc(self._clock(), "the store's clock")

    @staticmethod
    def _changed(conn: Connection, stmt: Any, what: str) -> None:
        if conn.execute(stmt).rowcount == 0:
            raise KeyError(what)

    @staticmethod
    def _inserted(conn: Connection, stmt: Insert, binding_id: str) -> int:
        try:
            return int(conn.execute(stmt).inserted_primary_key[0])
        except IntegrityError as exc:
            raise KeyError(f"no binding {binding_id!r}: upsert_binding first") from exc


def key_is(table: Table, key: ResourceKey) -> tuple[Any, ...]:
    """The WHERE clauses selecting `key` in a table with kind, project and name columns."""
    c = table.c
    return (c.kind == key.kind, c.project == key.project, c.name == key.name)


def split_key(row: Row[Any]) -> tuple[ResourceKey, dict[str, Any]]:
    """A row's `ResourceKey` and its other columns."""
    values = row._asdict()
    key = ResourceKey(values.pop("kind"), values.pop("project"), values.pop("name"))
    return key, values


def utc(value: datetime, what: str = "finished_at") -> datetime:
    """`value` in UTC; ValueError for a naive datetime."""
    if value.tzinfo is None:
        raise ValueError(f"{what} must be timezone-aware, not naive {value!r}")
    return value.astimezone(UTC)
