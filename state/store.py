"""The store API the reconciler uses: every method one short transaction, records out.

`Store` joins the parts: bindings, syncs, events and commit checks here, the inventory
(`state.inventory`), the intent journal (`state.journal`), leases (`state.leases`) and
webhook deliveries (`state.deliveries`), over SQLite or PostgreSQL
alike. Writes that may race (a binding, a resource, an intent, a check) are single
`INSERT ... ON CONFLICT` statements, so two replicas or processes never fail on each other.
Methods that change one row by id raise `KeyError` when there is no such row; bad enum
values raise `ValueError`. The clock is injected.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from nodus_gitops.floor.errors import ConfigError
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.floor.redaction import mask_url_passwords
from nodus_gitops.state import engine as engines
from nodus_gitops.state.base import key_is, split_key, utc_now
from nodus_gitops.state.deliveries import DeliveryStore
from nodus_gitops.state.inventory import InventoryStore
from nodus_gitops.state.journal import JournalStore
from nodus_gitops.state.leases import LeaseStore
from nodus_gitops.state.migrations import (
    current_revision,
    head,
    legacy_version,
    migrate,
    scripts,
)
from nodus_gitops.state.models import (
    CheckRecord,
    Event,
    EventType,
    InventoryItem,
    RepoBinding,
    Sync,
    SyncResult,
)
from nodus_gitops.state.records import BindingRecord, CheckRecordValue, EventRecord, SyncRecord
from sqlalchemy import Connection, Row, Table, or_, select, update
from sqlalchemy.exc import DBAPIError, IntegrityError

_B: Table = RepoBinding.__table__  # type: ignore[attr-defined]
_S: Table = Sync.__table__  # type: ignore[attr-defined]
_E: Table = Event.__table__  # type: ignore[attr-defined]
_C: Table = CheckRecord.__table__  # type: ignore[attr-defined]
_I: Table = InventoryItem.__table__  # type: ignore[attr-defined]

__all__ = ["Store", "utc_now"]


class Store(InventoryStore, JournalStore, LeaseStore, DeliveryStore):
    """The state store. Build it with `Store.open(...)`; safe to share between threads."""

    @classmethod
    def open(
        cls,
        url: str | None = None,
        state_dir: Path | None = None,
        clock: Callable[[], datetime] = utc_now,
        *,
        read_only: bool = False,
    ) -> Store:
        """Connect, migrate to the current schema, and return the store. `read_only`: for
        a reader (`plan`, `get`), which never migrates: a schema other than the current one
        is a ConfigError saying what upgrades it.

        Raises `ConfigError` naming `--state` for a bad URL, an unreachable database, or a
        database whose schema is newer than this code.
        """
        resolved = engines.resolve_url(url, state_dir)
        label = engines.display(resolved)
        engine = engines.create_state_engine(resolved, read_only=read_only)
        try:
            if read_only:
                with engine.connect() as conn:
                    _require_current(conn, label)
            else:
                with engines.write_engine(engine).begin() as conn:
                    migrate(conn, label)
        except ConfigError:
            engine.dispose()
            raise
        except DBAPIError as exc:
            engine.dispose()
            reason = mask_url_passwords(str(exc.orig).strip().splitlines()[0] if exc.orig else "")
            raise ConfigError(f"--state: cannot open state database {label}: {reason}") from exc
        return cls(engine, clock, label)

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def schema_version(self) -> str | None:
        """The Alembic revision of the schema (`migrations.head()` once open)."""
        with self._read() as conn:
            return current_revision(conn)

    # -- bindings --------------------------------------------------------------------------

    def upsert_binding(self, id: str, url: str, branch: str, path: str, project: str) -> None:
        values = dict(id=id, url=url, branch=branch, path=path, project=project)
        stmt = self._insert(_B).values(**values, updated_at=self._now())
        changed = {k: stmt.excluded[k] for k in (*values, "updated_at") if k != "id"}
        stmt = stmt.on_conflict_do_update(index_elements=[_B.c.id], set_=changed)
        with self._write() as conn:
            conn.execute(stmt)

    def get_binding(self, id: str) -> BindingRecord | None:
        with self._read() as conn:
            row = conn.execute(select(_B).where(_B.c.id == id)).first()
        return None if row is None else BindingRecord(**row._asdict())

    def list_bindings(self) -> list[BindingRecord]:
        with self._read() as conn:
            rows = conn.execute(select(_B).order_by(_B.c.id)).all()
        return [BindingRecord(**row._asdict()) for row in rows]

    def record_poll(self, binding_id: str, seen_commit: str | None, error: str | None) -> None:
        """A poll happened: remember the tip seen (kept when None) and the error, if any."""
        now = self._now()
        values: dict[str, Any] = dict(last_poll_at=now, last_error=error, updated_at=now)
        if seen_commit is not None:
            values["last_seen_commit"] = seen_commit
        with self._write() as conn:
            stmt = update(_B).where(_B.c.id == binding_id).values(**values)
            self._changed(conn, stmt, f"no binding {binding_id!r}")

    def touch_poll(self, binding_id: str) -> None:
        """A poll found the tip it last judged: only the poll's time changes."""
        now = self._now()
        with self._write() as conn:
            stmt = update(_B).where(_B.c.id == binding_id).values(last_poll_at=now,
                                                                   updated_at=now)
            self._changed(conn, stmt, f"no binding {binding_id!r}")

    def mark_applied(self, binding_id: str, commit: str) -> None:
        with self._write() as conn:
            stmt = (
                update(_B)
                .where(_B.c.id == binding_id)
                .values(last_applied_commit=commit, updated_at=self._now())
            )
            self._changed(conn, stmt, f"no binding {binding_id!r}")

    # -- syncs -----------------------------------------------------------------------------

    def start_sync(self, binding_id: str, commit: str) -> int:
        stmt = _S.insert().values(
            binding_id=binding_id,
            commit=commit,
            started_at=self._now(),
            result=SyncResult.PENDING.value,
            message="",
            plan={},
            summary={},
        )
        with self._write() as conn:
            return self._inserted(conn, stmt, binding_id)

    def finish_sync(
        self, sync_id: int, result: str, message: str, plan: dict[str, Any], summary: dict[str, Any]
    ) -> None:
        if (result := SyncResult(result)) in (SyncResult.PENDING, SyncResult.UNCHANGED,
                                              SyncResult.BACKOFF):
            raise ValueError(f"a finished sync cannot be {result.value!r}")
        result = result.value
        values = dict(
            result=result, message=message, plan=plan, summary=summary, finished_at=self._now()
        )
        with self._write() as conn:
            stmt = update(_S).where(_S.c.id == sync_id).values(**values)
            self._changed(conn, stmt, f"no sync {sync_id}")

    def abandon_pending_syncs(self, binding_id: str, message: str) -> int:
        """Finish as errors the syncs of the binding a stopped process left pending (it
        died before recording their result); returns how many."""
        with self._write() as conn:
            stmt = (update(_S).where(_S.c.binding_id == binding_id,
                                     _S.c.result == SyncResult.PENDING.value)
                    .values(result=SyncResult.ERROR.value, message=message,
                            finished_at=self._now()))
            return conn.execute(stmt).rowcount or 0

    def get_sync(self, id: int) -> SyncRecord | None:
        with self._read() as conn:
            row = conn.execute(select(_S).where(_S.c.id == id)).first()
        return None if row is None else SyncRecord(**row._asdict())

    def list_syncs(self, binding_id: str | None = None, limit: int = 50) -> list[SyncRecord]:
        """Newest first."""
        query = select(_S).order_by(_S.c.started_at.desc(), _S.c.id.desc()).limit(limit)
        if binding_id is not None:
            query = query.where(_S.c.binding_id == binding_id)
        with self._read() as conn:
            return [SyncRecord(**row._asdict()) for row in conn.execute(query)]

    def last_sync(self, binding_id: str) -> SyncRecord | None:
        syncs = self.list_syncs(binding_id, limit=1)
        return syncs[0] if syncs else None

    def has_history(self, binding_id: str) -> bool:
        """Whether the store ever recorded a sync or a resource of the binding (False on a
        new or lost store, where adoption rebuilds the inventory from the backend)."""
        with self._read() as conn:
            return any(conn.execute(select(t.c.id).where(t.c.binding_id == binding_id)
                                    .limit(1)).first() for t in (_S, _I))

    # -- events ----------------------------------------------------------------------------

    def add_event(self, key: ResourceKey, type: str, reason: str, message: str) -> int:
        stmt = _E.insert().values(
            kind=key.kind,
            project=key.project,
            name=key.name,
            at=self._now(),
            type=EventType(type).value,
            reason=reason,
            message=message,
        )
        with self._write() as conn:
            return int(conn.execute(stmt).inserted_primary_key[0])

    def add_events(self, events: list[tuple[ResourceKey, str, str, str]]) -> None:
        """Many `(key, type, reason, message)` events in one statement."""
        if not events:
            return
        now = self._now()
        rows = [dict(kind=k.kind, project=k.project, name=k.name, at=now,
                     type=EventType(t).value, reason=r, message=m) for k, t, r, m in events]
        with self._write() as conn:
            conn.execute(_E.insert(), rows)

    def list_events(self, key: ResourceKey | None = None, limit: int = 100) -> list[EventRecord]:
        """Newest first."""
        query = select(_E).order_by(_E.c.at.desc(), _E.c.id.desc()).limit(limit)
        if key is not None:
            query = query.where(*key_is(_E, key))
        with self._read() as conn:
            return [_event(row) for row in conn.execute(query)]

    # -- commit checks ---------------------------------------------------------------------

    def record_check(
        self, binding_id: str, commit: str, context: str, state: str, summary: str, target: str
    ) -> bool:
        """Record a check to post; False when this exact (state, summary) is already recorded.

        Record just before posting; a False answer means "already posted, don't post again".
        """
        stmt = self._insert(_C).values(
            binding_id=binding_id,
            commit=commit,
            context=context,
            state=state,
            summary=summary,
            posted_at=self._now(),
            target=target,
        )
        stmt = stmt.on_conflict_do_update(
            index_elements=[_C.c.commit, _C.c.context, _C.c.target],
            set_={k: stmt.excluded[k] for k in ("binding_id", "state", "summary", "posted_at")},
            where=or_(_C.c.state != stmt.excluded.state, _C.c.summary != stmt.excluded.summary),
        ).returning(_C.c.id)
        with self._write() as conn:
            try:
                return conn.execute(stmt).first() is not None
            except IntegrityError as exc:
                raise KeyError(f"no binding {binding_id!r}: upsert_binding first") from exc

    def list_checks(
        self, commit: str | None = None, binding_id: str | None = None
    ) -> list[CheckRecordValue]:
        """Newest first."""
        query = select(_C).order_by(_C.c.posted_at.desc(), _C.c.id.desc())
        if commit is not None:
            query = query.where(_C.c.commit == commit)
        if binding_id is not None:
            query = query.where(_C.c.binding_id == binding_id)
        with self._read() as conn:
            return [CheckRecordValue(**row._asdict()) for row in conn.execute(query)]


def _event(row: Row[Any]) -> EventRecord:
    key, values = split_key(row)
    return EventRecord(key=key, **values)


def _require_current(conn: Connection, label: str) -> None:
    """A reader's check instead of `migrate`: the schema must be this code's."""
    found = current_revision(conn)
    if found == head():
        return
    if found is not None and found not in {s.revision for s in scripts().walk_revisions()}:
        raise ConfigError(f"--state: the schema of {label} ({found}) is newer than this "
                          "release: use the release that wrote it")
    legacy = legacy_version(conn)
    shown = found or (f"the pre-Alembic version {legacy}" if legacy else "none (empty)")
    raise ConfigError(f"--state: the schema of {label} is {shown}, not {head()}; this "
                      "command only reads it: run `nodus-gitops reconcile` or `serve` once "
                      "with this state to create or upgrade it")

