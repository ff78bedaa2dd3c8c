"""The journal part of the store: intents written before each provider call, then resolved.

`add_intent` commits before it returns, so an intent survives a `kill -9` that follows;
the idempotency key is unique, so journalling the same call twice yields one intent.
"""

from __future__ import annotations

from typing import Any

from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.floor.results import JournalOp
from nodus_gitops.state.base import StoreBase, split_key
from nodus_gitops.state.models import Intent, IntentState
from nodus_gitops.state.records import IntentRecord
from sqlalchemy import Row, Table, bindparam, select, update
from sqlalchemy.exc import IntegrityError

_I: Table = Intent.__table__  # type: ignore[attr-defined]


class JournalStore(StoreBase):
    """Journal methods of `Store`: intents pending until completed or failed."""

    def add_intent(
        self,
        binding_id: str,
        sync_id: int | None,
        action: str,
        key: ResourceKey,
        spec_hash: str,
        idempotency_key: str,
        payload: dict[str, Any],
    ) -> int:
        """Journal a provider call before making it; committed on return.

        A second call with the same `idempotency_key` changes nothing and returns the id of
        the intent already recorded.
        """
        stmt = (
            self._insert(_I)
            .values(
                binding_id=binding_id,
                sync_id=sync_id,
                action=JournalOp(action).value,
                kind=key.kind,
                project=key.project,
                name=key.name,
                spec_hash=spec_hash,
                idempotency_key=idempotency_key,
                payload=payload,
                state=IntentState.PENDING.value,
                outcome={},
                created_at=self._now(),
            )
            .on_conflict_do_nothing(index_elements=[_I.c.idempotency_key])
            .returning(_I.c.id)
        )
        existing = select(_I.c.id).where(_I.c.idempotency_key == idempotency_key)
        with self._write() as conn:
            try:
                new_id = conn.execute(stmt).scalar()
            except IntegrityError as exc:
                raise KeyError(f"no binding {binding_id!r} or sync {sync_id}") from exc
            return int(new_id if new_id is not None else conn.execute(existing).scalar_one())

    def add_intents(self, intents: list[dict[str, Any]]) -> dict[str, tuple[int, str]]:
        """`add_intent` for many, in one statement: each dict has binding_id, sync_id,
        action, key, spec_hash, idempotency_key and payload. Returns, per idempotency
        key, the intent's id and state (an intent journaled before keeps its state)."""
        if not intents:
            return {}
        now = self._now()
        rows = [dict(binding_id=i["binding_id"], sync_id=i["sync_id"],
                     action=JournalOp(i["action"]).value, kind=i["key"].kind,
                     project=i["key"].project, name=i["key"].name, spec_hash=i["spec_hash"],
                     idempotency_key=i["idempotency_key"], payload=i["payload"],
                     state=IntentState.PENDING.value, outcome={}, created_at=now)
                for i in intents]
        stmt = self._insert(_I).on_conflict_do_nothing(index_elements=[_I.c.idempotency_key])
        keys = [r["idempotency_key"] for r in rows]
        with self._write() as conn:
            try:
                conn.execute(stmt, rows)
            except IntegrityError as exc:
                raise KeyError(f"no binding {rows[0]['binding_id']!r}") from exc
            found = conn.execute(select(_I.c.id, _I.c.idempotency_key, _I.c.state)
                                 .where(_I.c.idempotency_key.in_(keys)))
            return {r.idempotency_key: (int(r.id), r.state) for r in found}

    def finish_intents(self, results: list[tuple[int, bool, dict[str, Any]]]) -> None:
        """Mark many intents done (True) or failed (False) with their outcomes."""
        if not results:
            return
        now = self._now()
        stmt = update(_I).where(_I.c.id == bindparam("i_id")).values(
            state=bindparam("i_state"), outcome=bindparam("i_outcome"), done_at=now)
        with self._write() as conn:
            conn.execute(stmt, [
                {"i_id": id, "i_outcome": outcome,
                 "i_state": (IntentState.DONE if ok else IntentState.FAILED).value}
                for id, ok, outcome in results])

    def complete_intent(self, id: int, outcome: dict[str, Any]) -> None:
        self._finish_intent(id, IntentState.DONE, outcome)

    def fail_intent(self, id: int, outcome: dict[str, Any]) -> None:
        self._finish_intent(id, IntentState.FAILED, outcome)

    def _finish_intent(self, id: int, state: IntentState, outcome: dict[str, Any]) -> None:
        values = dict(state=state.value, outcome=outcome, done_at=self._now())
        with self._write() as conn:
            self._changed(conn, update(_I).where(_I.c.id == id).values(**values), f"no intent {id}")

    def get_intent(self, id: int) -> IntentRecord | None:
        with self._read() as conn:
            row = conn.execute(select(_I).where(_I.c.id == id)).first()
        return None if row is None else _intent(row)

    def pending_intents(self, binding_id: str | None = None) -> list[IntentRecord]:
        """Intents not yet resolved, oldest first."""
        query = select(_I).where(_I.c.state == IntentState.PENDING.value).order_by(_I.c.id)
        if binding_id is not None:
            query = query.where(_I.c.binding_id == binding_id)
        with self._read() as conn:
            return [_intent(row) for row in conn.execute(query)]


def _intent(row: Row[Any]) -> IntentRecord:
    key, values = split_key(row)
    return IntentRecord(key=key, **values)
