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


def test_a_replica_below_its_share_tries_only_the_leases_it_can_take(state_url: str) -> None:
    """Three replicas on 1,000 bindings: 3 x 334 > 1,000, so one is always below its
    share. It must not try a transaction for each binding the others hold, every tick
    (at 1,000 bindings those ticks took longer than the lease itself)."""
    bindings = [f"team-{n}" for n in range(60)]
    with Store.open(state_url) as store:
        for binding in bindings:
            store.upsert_binding(binding, "u", "main", "", "p")
        first = LeaseKeeper(store, bindings, replica="one", ttl=15)
        second = LeaseKeeper(store, bindings, replica="two", ttl=15)
        assert len(first.tick()[0]) == 60  # alone: all of them
        second.tick()  # two live replicas now: a share of 30, none free yet
        first.tick()  # gives back its surplus of 30
        gained, _ = second.tick()
        assert len(gained) == 30 and not set(first.held) & set(second.held)
        third = LeaseKeeper(store, bindings, replica="three", ttl=15)
        tries = []
        original = store.acquire_lease
        store.acquire_lease = lambda *a: tries.append(a[0]) or original(*a)  # type: ignore[method-assign]
        gained, _ = third.tick()  # below its share of 20, every lease held by another
        assert gained == set() and tries == []
        first.tick()  # gives back 10 of its 30
        gained, _ = third.tick()
        assert len(gained) == 10 and sorted(tries) == sorted(gained)
