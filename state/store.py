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

import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from nodus_gitops.floor.errors import ConfigError
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.floor.redaction import mask_url_passwords
from nodus_gitops.state import engine as engines
from nodus_gitops.state import private
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
from sqlalchemy import Connection, Row, Table, bindparam, case, or_, select, update
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
        if state_dir is not None and not read_only:
            private.secure(Path(state_dir), private.secure_state_dir)
        resolved = engines.resolve_url(url, state_dir)
        label = engines.display(resolved)
        if resolved.get_backend_name() == "sqlite" and not read_only:
            private.secure(Path(resolved.database or ""), private.secure_database_file)
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

    def __init__(self, engine: Any, clock: Callable[[], datetime], label: str) -> None:
        super().__init__(engine, clock, label)
        # Idle polls' times not yet written (see `defer_poll_times`), and what this store
        # last read or wrote of each binding's (last_seen_commit, last_error), with a
        # count of its poll writes, so that a read started before a write never passes
        # for what the row holds after it.
        self._polls_lock = threading.Lock()
        self._deferring = False
        self._pending_polls: dict[str, datetime] = {}
        self._known_polls: dict[str, tuple[str | None, str | None]] = {}
        self._poll_writes: dict[str, int] = {}

    def close(self) -> None:
        try:
            self.flush_polls()  # a normal stop loses no poll time
        finally:
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
        writes = self._poll_writes.get(id, 0)
        with self._read() as conn:
            row = conn.execute(select(_B).where(_B.c.id == id)).first()
        return None if row is None else self._polled(BindingRecord(**row._asdict()), writes)

    def list_bindings(self) -> list[BindingRecord]:
        writes = dict(self._poll_writes)
        with self._read() as conn:
            rows = conn.execute(select(_B).order_by(_B.c.id)).all()
        return [self._polled(BindingRecord(**row._asdict()), writes.get(row.id, 0))
                for row in rows]

    # -- poll times ------------------------------------------------------------------------
    #
    # A poll that finds the tip it last judged changes nothing but the binding's
    # last_poll_at. While the service runs (`defer_poll_times`), such a poll makes no
    # durable commit of its own: its time is kept here, every read of this store shows
    # it at once (the dashboard, /readyz, metrics and the API read through this store),
    # and `flush_polls` writes all of them in one transaction on the service's tick, at
    # its stop and on `close`. A crash loses at most one tick of poll times: nothing is
    # decided from them (the journal, the applied and seen commits and the errors are
    # written at once as before), and the restarted process polls every binding first.
    # Readers in other processes (`get`, another replica's /readyz) see a time at most
    # one tick old. A poll that changes the tip seen or the error is written at once.

    def defer_poll_times(self, on: bool = True) -> None:
        """Keep idle polls' times in memory until `flush_polls` (on), or write each poll
        at once again (off; what is held is written by the next `flush_polls`)."""
        self._deferring = on

    def record_poll(self, binding_id: str, seen_commit: str | None, error: str | None) -> None:
        """A poll happened: remember the tip seen (kept when None) and the error, if any."""
        now = self._now()
        known = self._known_polls.get(binding_id)
        if self._deferring and known is not None and error == known[1] and (
                seen_commit is None or seen_commit == known[0]):
            self._hold_poll(binding_id, now)  # only the time changes
            return
        values: dict[str, Any] = dict(last_poll_at=now, last_error=error, updated_at=now)
        if seen_commit is not None:
            values["last_seen_commit"] = seen_commit
        with self._write() as conn:
            stmt = update(_B).where(_B.c.id == binding_id).values(**values)
            self._changed(conn, stmt, f"no binding {binding_id!r}")
        with self._polls_lock:
            self._poll_writes[binding_id] = self._poll_writes.get(binding_id, 0) + 1
            seen = seen_commit if seen_commit is not None else (known or (None,))[0]
            if seen_commit is not None or known is not None:
                self._known_polls[binding_id] = (seen, error)
            self._drop_held(binding_id, now)

    def touch_poll(self, binding_id: str) -> None:
        """A poll found the tip it last judged: only the poll's time changes."""
        now = self._now()
        if self._deferring:
            self._hold_poll(binding_id, now)
            return
        with self._write() as conn:
            stmt = update(_B).where(_B.c.id == binding_id).values(last_poll_at=now,
                                                                   updated_at=now)
            self._changed(conn, stmt, f"no binding {binding_id!r}")

    def flush_polls(self) -> int:
        """Write the poll times held in memory, all in one transaction; how many. A time
        never replaces a later one (another replica's, or a poll written since). On a
        failure they stay held for the next flush, and the error is raised."""
        with self._polls_lock:
            held, self._pending_polls = self._pending_polls, {}
        if not held:
            return 0
        at = bindparam("at", type_=_B.c.last_poll_at.type)
        stmt = (update(_B)
                .where(_B.c.id == bindparam("binding"),
                       or_(_B.c.last_poll_at.is_(None), _B.c.last_poll_at < at))
                .values(last_poll_at=at,
                        updated_at=case((_B.c.updated_at > at, _B.c.updated_at), else_=at)))
        try:
            with self._write() as conn:
                conn.execute(stmt, [{"binding": b, "at": t} for b, t in held.items()])
        except BaseException:
            with self._polls_lock:
                for binding_id, when in held.items():
                    self._pending_polls[binding_id] = max(
                        when, self._pending_polls.get(binding_id, when))
            raise
        return len(held)

    def _hold_poll(self, binding_id: str, when: datetime) -> None:
        with self._polls_lock:
            self._pending_polls[binding_id] = max(
                when, self._pending_polls.get(binding_id, when))

    def _drop_held(self, binding_id: str, written: datetime) -> None:
        """Forget a held time that a poll written at `written` supersedes (the lock held)."""
        if (held := self._pending_polls.get(binding_id)) is not None and held <= written:
            del self._pending_polls[binding_id]

    def _polled(self, record: BindingRecord, writes: int) -> BindingRecord:
        """`record` as read, with a later poll time held in memory; learns what the row
        holds of the binding's polls, unless a poll write went in since the read began."""
        with self._polls_lock:
            if self._poll_writes.get(record.id, 0) == writes:
                self._known_polls[record.id] = (record.last_seen_commit, record.last_error)
            held = self._pending_polls.get(record.id)
        if held is None or (record.last_poll_at is not None and record.last_poll_at >= held):
            return record
        updated = record.updated_at if record.updated_at and record.updated_at > held else held
        return replace(record, last_poll_at=held, updated_at=updated)

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

