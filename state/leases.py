"""The lease part of the store: one replica at a time reconciles a binding.

A lease is a row (binding, holder, expires_at, token). Taking one is a single write
transaction that reads the row (locked on PostgreSQL) and takes it when it is free,
expired or already ours; the token grows with each new holder (fencing). Replicas
heartbeat so that each can count the others and take only its share of the bindings.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from nodus_gitops.state.base import StoreBase
from nodus_gitops.state.models import Lease, Replica
from sqlalchemy import Table, delete, select, update
from sqlalchemy.exc import IntegrityError

_L: Table = Lease.__table__  # type: ignore[attr-defined]
_P: Table = Replica.__table__  # type: ignore[attr-defined]
_RENEW_CHUNK = 500  # bindings a statement (SQLite bounds the parameters of one)


class LeaseStore(StoreBase):
    def heartbeat(self, replica_id: str) -> None:
        now = self._now()
        stmt = self._insert(_P).values(id=replica_id, heartbeat_at=now)
        stmt = stmt.on_conflict_do_update(index_elements=[_P.c.id], set_={"heartbeat_at": now})
        with self._write() as conn:
            conn.execute(stmt)

    def live_replicas(self, within: timedelta) -> list[str]:
        """Replicas that heartbeat within `within`, by id."""
        since = self._now() - within
        with self._read() as conn:
            rows = conn.execute(select(_P.c.id).where(_P.c.heartbeat_at >= since)
                                .order_by(_P.c.id))
            return [r.id for r in rows]

    def forget_replica(self, replica_id: str) -> None:
        with self._write() as conn:
            conn.execute(delete(_P).where(_P.c.id == replica_id))
            conn.execute(delete(_L).where(_L.c.holder == replica_id))

    def acquire_lease(self, binding_id: str, holder: str, ttl: timedelta) -> int | None:
        """Take or renew the lease; its fencing token, or None while another holds it."""
        now = self._now()
        expires = now + ttl
        try:
            with self._write() as conn:
                row = conn.execute(select(_L).where(_L.c.binding_id == binding_id)
                                   .with_for_update()).first()
                if row is None:
                    conn.execute(_L.insert().values(binding_id=binding_id, holder=holder,
                                                    expires_at=expires, token=1))
                    return 1
                if row.holder == holder and row.expires_at >= now:
                    conn.execute(update(_L).where(_L.c.binding_id == binding_id)
                                 .values(expires_at=expires))
                    return int(row.token)
                if row.expires_at < now or row.holder == holder:
                    conn.execute(update(_L).where(_L.c.binding_id == binding_id)
                                 .values(holder=holder, expires_at=expires,
                                         token=row.token + 1))
                    return int(row.token) + 1
                return None
        except IntegrityError:  # another replica inserted it first
            return None

    def renew_leases(self, holder: str, binding_ids: list[str],
                     ttl: timedelta) -> dict[str, int]:
        """Renew every lease of `binding_ids` that `holder` holds and that has not
        expired, in one write; {binding: token} of those renewed (tokens unchanged). A
        lease not renewed here is the caller's to take again (`acquire_lease`) or lost."""
        now = self._now()
        renewed: dict[str, int] = {}
        with self._write() as conn:
            for start in range(0, len(binding_ids), _RENEW_CHUNK):
                chunk = binding_ids[start:start + _RENEW_CHUNK]
                rows = conn.execute(
                    update(_L).where(_L.c.binding_id.in_(chunk), _L.c.holder == holder,
                                     _L.c.expires_at >= now)
                    .values(expires_at=now + ttl).returning(_L.c.binding_id, _L.c.token))
                renewed.update({row.binding_id: int(row.token) for row in rows})
        return renewed

    def takeable_leases(self, binding_ids: list[str], holder: str) -> set[str]:
        """Of `binding_ids`, those whose lease is free, expired or `holder`'s, in one read:
        a replica below its share tries `acquire_lease` on these only, not once for every
        binding another replica holds (a transaction each, every tick)."""
        now = self._now()
        taken: set[str] = set()
        with self._read() as conn:
            for start in range(0, len(binding_ids), _RENEW_CHUNK):
                chunk = binding_ids[start:start + _RENEW_CHUNK]
                rows = conn.execute(select(_L.c.binding_id).where(
                    _L.c.binding_id.in_(chunk), _L.c.holder != holder, _L.c.expires_at >= now))
                taken.update(row.binding_id for row in rows)
        return set(binding_ids) - taken

    def release_lease(self, binding_id: str, holder: str) -> None:
        with self._write() as conn:
            conn.execute(update(_L).where(_L.c.binding_id == binding_id, _L.c.holder == holder)
                         .values(expires_at=datetime.fromtimestamp(0, self._now().tzinfo)))

    def lease_of(self, binding_id: str) -> tuple[str, datetime, int] | None:
        """(holder, expires_at, token) of the binding's lease."""
        with self._read() as conn:
            row = conn.execute(select(_L).where(_L.c.binding_id == binding_id)).first()
        return None if row is None else (row.holder, row.expires_at, int(row.token))
