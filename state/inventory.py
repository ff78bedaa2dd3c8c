"""The inventory part of the store: the resources the reconciler created and answers for."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.state.base import StoreBase, key_is, split_key, utc
from nodus_gitops.state.labels import replace_labels
from nodus_gitops.state.models import InventoryItem
from nodus_gitops.state.records import InventoryRecord
from sqlalchemy import Row, Table, bindparam, delete, func, or_, select, update
from sqlalchemy.exc import IntegrityError

_R: Table = InventoryItem.__table__  # type: ignore[attr-defined]

UNKNOWN_PHASE = "Unknown"  # the count_by_phase key for resources with no phase yet
_TERMINAL = ("Succeeded", "Failed", "Cancelled")


class InventoryStore(StoreBase):
    """Inventory methods of `Store`: one row per `ResourceKey`, kept after TTL removal."""

    def list_inventory(
        self, binding_id: str | None = None, project: str | None = None, kind: str | None = None
    ) -> list[InventoryRecord]:
        """Every recorded resource (deleted ones included), sorted by (kind, project, name)."""
        query = select(_R).order_by(_R.c.kind, _R.c.project, _R.c.name)
        for column, value in (("binding_id", binding_id), ("project", project), ("kind", kind)):
            if value is not None:
                query = query.where(_R.c[column] == value)
        with self._read() as conn:
            return [_inventory(row) for row in conn.execute(query)]

    def each_inventory(self, binding_id: str) -> Iterator[InventoryRecord]:
        """The binding's recorded resources (deleted ones included), one at a time as the
        query returns them: a caller that keeps part of each (the sync's view of a
        100,000-resource binding) never holds every decoded row at once."""
        query = (select(_R).where(_R.c.binding_id == binding_id)
                 .order_by(_R.c.kind, _R.c.project, _R.c.name))
        with self._read() as conn:
            for row in conn.execute(query):
                yield _inventory(row)

    def list_unfinished(self, binding_id: str) -> list[InventoryRecord]:
        """The binding's resources not yet in a terminal phase (what a status refresh
        reads), without loading the finished ones."""
        query = (select(_R).where(_R.c.binding_id == binding_id, _R.c.deleted.is_(False),
                                  or_(_R.c.phase.is_(None), _R.c.phase.not_in(_TERMINAL)))
                 .order_by(_R.c.kind, _R.c.project, _R.c.name))
        with self._read() as conn:
            return [_inventory(row) for row in conn.execute(query)]

    def get_resource(self, key: ResourceKey) -> InventoryRecord | None:
        with self._read() as conn:
            row = conn.execute(select(_R).where(*key_is(_R, key))).first()
        return None if row is None else _inventory(row)

    def upsert_resource(self, record: InventoryRecord) -> None:
        """Record `record` whole; `created_at` is kept from the first write, the rest replaced."""
        self.upsert_resources([record])

    def upsert_resources(self, records: list[InventoryRecord]) -> None:
        """`upsert_resource` for many records in one statement (a sync's results)."""
        if not records:
            return
        now = self._now()
        # One row a key, the last record of it (as upserting them in turn would leave it):
        # a multi-row upsert may not touch a row twice.
        latest = {r.key: r for r in records}
        rows = [{**_values(r, now), "created_at": now} for r in latest.values()]
        stmt = self._insert(_R)
        stmt = stmt.on_conflict_do_update(
            index_elements=[_R.c.kind, _R.c.project, _R.c.name],
            set_={k: stmt.excluded[k] for k in rows[0] if k not in _KEY_AND_CREATED},
        ).returning(_R.c.id, _R.c.kind, _R.c.project, _R.c.name)
        with self._write() as conn:
            try:
                written = conn.execute(stmt, rows).all()
            except IntegrityError as exc:
                raise KeyError(f"no binding {records[0].binding_id!r}: upsert_binding first"
                               ) from exc
            replace_labels(conn, ((id, latest[ResourceKey(kind, project, name)].manifest)
                                  for id, kind, project, name in written))

    def update_status(
        self,
        key: ResourceKey,
        phase: str | None,
        reason: str | None,
        message: str | None,
        fix: str | None,
        status: dict[str, Any],
        cost_usd: str,
        finished_at: datetime | None = None,
        *,
        deleted: bool | None = None,
    ) -> bool:
        """Record what the backend says; `finished_at`/`deleted` left as they are when None.

        Returns False when the resource is not in the inventory (e.g. removed meanwhile).
        """
        values: dict[str, Any] = dict(
            phase=phase,
            reason=reason,
            message=message,
            fix=fix,
            status=status,
            cost_usd=_decimal_text(cost_usd),
            updated_at=self._now(),
        )
        if finished_at is not None:
            values["finished_at"] = utc(finished_at)
        if deleted is not None:
            values["deleted"] = deleted
        with self._write() as conn:
            return conn.execute(update(_R).where(*key_is(_R, key)).values(**values)).rowcount > 0

    def remove_resource(self, key: ResourceKey) -> bool:
        """Forget a resource (it was deleted on purpose). False when it was not recorded."""
        with self._write() as conn:
            return conn.execute(delete(_R).where(*key_is(_R, key))).rowcount > 0

    def remove_resources(self, keys: list[ResourceKey]) -> None:
        """`remove_resource` for many keys in one statement."""
        if not keys:
            return
        stmt = delete(_R).where(_R.c.kind == bindparam("k_kind"),
                                _R.c.project == bindparam("k_project"),
                                _R.c.name == bindparam("k_name"))
        with self._write() as conn:
            conn.execute(stmt, [{"k_kind": k.kind, "k_project": k.project, "k_name": k.name}
                                for k in keys])

    def count_by_phase(self, binding_id: str | None = None) -> dict[str, int]:
        """Resources per phase; those with no phase yet count under `Unknown`."""
        query = select(_R.c.phase, func.count()).group_by(_R.c.phase)
        if binding_id is not None:
            query = query.where(_R.c.binding_id == binding_id)
        counts: dict[str, int] = {}
        with self._read() as conn:
            for phase, count in conn.execute(query):
                name = phase or UNKNOWN_PHASE
                counts[name] = counts.get(name, 0) + int(count)
        return dict(sorted(counts.items()))


_KEY_AND_CREATED = frozenset({"kind", "project", "name", "created_at"})


def _values(record: InventoryRecord, now: datetime) -> dict[str, Any]:
    return dict(
        kind=record.key.kind,
        project=record.key.project,
        name=record.key.name,
        binding_id=record.binding_id,
        manifest=record.manifest,
        spec_hash=record.spec_hash,
        source_commit=record.source_commit,
        source_file=record.source_file,
        provider=record.provider,
        provider_id=record.provider_id,
        phase=record.phase,
        reason=record.reason,
        message=record.message,
        fix=record.fix,
        status=record.status,
        cost_usd=_decimal_text(record.cost_usd),
        updated_at=now,
        finished_at=None if record.finished_at is None else utc(record.finished_at),
        deleted=record.deleted,
    )


def _inventory(row: Row[Any]) -> InventoryRecord:
    key, values = split_key(row)
    del values["id"]
    values["deleted"] = bool(values["deleted"])
    return InventoryRecord(key=key, **values)


def _decimal_text(value: str) -> str:
    """`value` unchanged if it is a finite decimal number, else ValueError."""
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        number = Decimal("NaN")
    if not number.is_finite():
        raise ValueError(f"cost_usd must be a decimal number, not {value!r}")
    return str(value)
