"""Which bindings this replica reconciles: leases in the shared state store.

Every replica heartbeats, counts the live ones, and holds at most its fair share of the
bindings (ceil(bindings / replicas)), preferring bindings by a hash of (binding,
replica) so that replicas spread instead of racing for the same ones. A lease not
renewed within `ttl` (a dead replica) is free for another to take; a replica with more
than its share (one joined) gives the surplus back.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterable
from datetime import timedelta

from nodus_gitops.state.store import Store

log = logging.getLogger("nodus_gitops.leases")
DEFAULT_TTL = 15.0


def replica_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class LeaseKeeper:
    def __init__(self, store: Store, bindings: Iterable[str], *, replica: str | None = None,
                 ttl: float = DEFAULT_TTL, clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.bindings = sorted(bindings)
        self.replica = replica or replica_name()
        self.ttl = ttl
        self.clock = clock
        self.held: dict[str, int] = {}  # binding -> fencing token
        self.renewed_at: dict[str, float] = {}

    def _rank(self, binding: str) -> str:
        return hashlib.sha256(f"{binding}/{self.replica}".encode()).hexdigest()

    def holds(self, binding: str) -> bool:
        """True while this replica's lease on `binding` cannot have expired."""
        renewed = self.renewed_at.get(binding)
        return binding in self.held and renewed is not None and (
            self.clock() - renewed < self.ttl)

    def tick(self, busy: Iterable[str] = ()) -> tuple[set[str], set[str]]:
        """Heartbeat, renew, take this replica's share, give back any surplus (never a
        binding in `busy`: one syncing now is given back on a later tick, once done).
        Returns (bindings gained, bindings lost)."""
        ttl = timedelta(seconds=self.ttl)
        self.store.heartbeat(self.replica)
        replicas = max(1, len(self.store.live_replicas(ttl)))
        share = math.ceil(len(self.bindings) / replicas)
        gained, lost = set(), set()
        renewed = self._renew_held(ttl)
        for binding in list(self.held):
            token = renewed.get(binding)
            if token is None or token != self.held[binding]:
                lost.add(binding)  # it expired and another replica took it
                self.held.pop(binding)
                self.renewed_at.pop(binding, None)
            else:
                self.renewed_at[binding] = self.clock()
        wanted = [b for b in self.bindings if b not in self.held] \
            if len(self.held) < share else []
        takeable = self.store.takeable_leases(wanted, self.replica) if wanted else set()
        for binding in sorted(takeable, key=self._rank):
            if len(self.held) >= share:
                break
            token = self.store.acquire_lease(binding, self.replica, ttl)
            if token is not None:
                self.held[binding] = token
                self.renewed_at[binding] = self.clock()
                gained.add(binding)
        busy = set(busy)
        idle = [b for b in sorted(self.held, key=self._rank, reverse=True) if b not in busy]
        surplus = idle[:max(0, len(self.held) - share)]
        for binding in surplus:
            self.release(binding)
            lost.add(binding)
        if gained or lost:
            log.info("leases changed", extra={"replica": self.replica, "gained": sorted(gained),
                                              "lost": sorted(lost), "share": share})
        return gained, lost

    def take_all(self) -> list[str]:
        """For a one-off command: take every binding's lease, or none; returns the
        bindings another replica holds (nothing taken then)."""
        ttl = timedelta(seconds=self.ttl)
        busy = []
        for binding in self.bindings:
            token = self.store.acquire_lease(binding, self.replica, ttl)
            if token is None:
                busy.append(binding)
            else:
                self.held[binding] = token
                self.renewed_at[binding] = self.clock()
        if busy:
            for binding in list(self.held):
                self.release(binding)
        return busy

    def renew(self) -> None:
        """Renew what is held, taking nothing new."""
        renewed = self._renew_held(timedelta(seconds=self.ttl))
        for binding, token in list(self.held.items()):
            if renewed.get(binding) == token:
                self.renewed_at[binding] = self.clock()
            else:
                self.held.pop(binding)

    def _renew_held(self, ttl: timedelta) -> dict[str, int | None]:
        """{binding: token} for every held binding: the unexpired ones renewed in one
        write; each of the others taken again on its own (a new token if another replica
        held it meanwhile, None while one does)."""
        renewed: dict[str, int | None] = dict(
            self.store.renew_leases(self.replica, sorted(self.held), ttl))
        for binding in self.held:
            if binding not in renewed:
                renewed[binding] = self.store.acquire_lease(binding, self.replica, ttl)
        return renewed

    def release(self, binding: str) -> None:
        self.store.release_lease(binding, self.replica)
        self.held.pop(binding, None)
        self.renewed_at.pop(binding, None)

    def release_all(self) -> None:
        """A clean stop: give every lease back so another replica takes over at once."""
        for binding in list(self.held):
            self.release(binding)
        self.store.forget_replica(self.replica)

    def holder_of(self, binding: str) -> str | None:
        lease = self.store.lease_of(binding)
        return lease[0] if lease else None
