"""A replica renews the leases it holds in one write, not one write per binding: with a
thousand bindings a tick of one write each (each a durable commit) left little of the
store for the syncs. Renewal keeps its rules: only a lease this replica holds and that
has not expired is renewed, with its token unchanged."""

from __future__ import annotations

import time
from datetime import timedelta

from nodus_gitops.leases import LeaseKeeper
from nodus_gitops.state import Store
from sqlalchemy import event

TTL = timedelta(seconds=2)


def test_renews_only_the_unexpired_leases_of_the_holder(state_url: str) -> None:
    with Store.open(state_url) as store:
        for binding in ("a", "b", "c"):
            store.upsert_binding(binding, "u", "main", "", "p")
        assert store.acquire_lease("a", "one", TTL) == 1
        assert store.acquire_lease("b", "two", TTL) == 1
        assert store.acquire_lease("c", "one", timedelta(seconds=0.3)) == 1
        time.sleep(0.5)  # c has expired
        assert store.renew_leases("one", ["a", "b", "c"], TTL) == {"a": 1}
        assert store.acquire_lease("b", "one", TTL) is None  # still two's
        assert store.acquire_lease("c", "two", TTL) == 2  # c was free to take


def test_a_tick_renews_every_held_lease_in_one_write(state_url: str) -> None:
    bindings = [f"team-{n}" for n in range(200)]
    with Store.open(state_url) as store:
        for binding in bindings:
            store.upsert_binding(binding, "u", "main", "", "p")
        keeper = LeaseKeeper(store, bindings, replica="one", ttl=15)
        gained, _ = keeper.tick()
        assert gained == set(bindings)
        held = dict(keeper.held)
        commits = []
        event.listen(store._engine, "commit", lambda _conn: commits.append(1))
        gained, lost = keeper.tick()
        assert (gained, lost) == (set(), set())
        assert keeper.held == held and all(keeper.holds(b) for b in bindings)
        assert len(commits) <= 3  # the heartbeat and the renewal, not one per binding
