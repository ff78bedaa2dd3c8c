"""Idle polls' times: while the service defers them (`Store.defer_poll_times`), a poll
that changes nothing but its time makes no durable commit of its own; the times are kept
in memory, shown by this store's reads at once, and written in one batch by
`flush_polls` (the service's tick, its stop, `close`). A poll that changes the tip seen
or the error is written at once, as before."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest
from nodus_gitops.state.store import Store
from sqlalchemy import event

from tests.state.support import TickingClock, execute


@contextmanager
def commits(store: Store) -> Iterator[list[int]]:
    """Counts the transactions the store commits (the durable writes) inside the block."""
    seen: list[int] = []

    def on_commit(_conn: object) -> None:
        seen.append(1)

    event.listen(store._engine, "commit", on_commit)
    try:
        yield seen
    finally:
        event.remove(store._engine, "commit", on_commit)


def stored_poll(url: str, binding: str) -> datetime | None:
    """last_poll_at as the database holds it, read outside the store."""
    [[(value,)]] = execute(url, f"SELECT last_poll_at FROM repo_binding WHERE id = '{binding}'")
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


@pytest.fixture
def deferring(store: Store) -> Store:
    store.record_poll("team-a", "c1", None)
    store.record_poll("team-b", "c2", None)
    store.defer_poll_times()
    return store


def test_an_idle_poll_makes_no_commit_and_its_time_is_read_at_once(
        deferring: Store, state_url: str, clock: TickingClock) -> None:
    before = stored_poll(state_url, "team-a")
    deferring.get_binding("team-a")  # what the sync reads at the start of each poll
    with commits(deferring) as seen:
        deferring.record_poll("team-a", "c1", None)  # the applied tip, again
        polled = clock.now
        deferring.touch_poll("team-b")  # an invalid tip judged before, again
    assert seen == []
    assert stored_poll(state_url, "team-a") == before
    # This process's readers (dashboard, /readyz, metrics) see the poll now.
    record = deferring.get_binding("team-a")
    assert record is not None and record.last_poll_at == polled
    assert (record.last_seen_commit, record.last_error) == ("c1", None)
    listed = {b.id: b for b in deferring.list_bindings()}
    assert listed["team-a"].last_poll_at == polled
    assert listed["team-b"].last_poll_at == clock.now


def test_one_flush_writes_every_binding_polled_in_one_commit(
        deferring: Store, state_url: str) -> None:
    for binding in ("team-a", "team-b"):
        deferring.get_binding(binding)
    deferring.record_poll("team-a", "c1", None)
    deferring.touch_poll("team-b")
    shown = {b.id: b.last_poll_at for b in deferring.list_bindings()}
    with commits(deferring) as seen:
        assert deferring.flush_polls() == 2
    assert len(seen) == 1
    assert {b: stored_poll(state_url, b) for b in shown} == shown
    with commits(deferring) as seen:
        assert deferring.flush_polls() == 0  # nothing left: no empty commit
    assert seen == []


def test_a_poll_that_changes_the_tip_or_the_error_is_written_at_once(
        deferring: Store, state_url: str) -> None:
    deferring.get_binding("team-a")
    deferring.record_poll("team-a", "c1", None)  # deferred
    with commits(deferring) as seen:
        deferring.record_poll("team-a", "c3", None)  # a new tip
        deferring.record_poll("team-a", None, "remote unreachable")  # an error
    assert len(seen) == 2
    record = deferring.get_binding("team-a")
    assert record is not None
    assert (record.last_seen_commit, record.last_error) == ("c3", "remote unreachable")
    assert stored_poll(state_url, "team-a") == record.last_poll_at
    # The same error again changes only the time: deferred like any idle poll.
    with commits(deferring) as seen:
        deferring.record_poll("team-a", "c3", "remote unreachable")
    assert seen == []
    assert deferring.flush_polls() == 1


def test_a_binding_never_read_by_this_store_is_written_through(
        deferring: Store, open_store: Callable[..., Store], state_url: str,
        clock: TickingClock) -> None:
    # Without a read (or a write) of the row, a store cannot know that the poll changes
    # nothing else: another process's store, say, that only polls.
    fresh = open_store()
    fresh.defer_poll_times()
    with commits(fresh) as seen:
        fresh.record_poll("team-a", "c1", None)
    assert len(seen) == 1
    assert stored_poll(state_url, "team-a") == clock.now


def test_a_flush_never_moves_a_poll_time_back(
        deferring: Store, open_store: Callable[..., Store], state_url: str) -> None:
    deferring.get_binding("team-a")
    deferring.record_poll("team-a", "c1", None)  # kept in memory
    # Meanwhile another replica (it took the lease over) records a later poll.
    later = datetime(2031, 1, 1, tzinfo=UTC)
    other = open_store(clock=lambda: later)
    other.record_poll("team-a", "c1", None)
    deferring.flush_polls()
    assert stored_poll(state_url, "team-a") == later


def test_a_failed_flush_keeps_the_times_for_the_next(
        deferring: Store, state_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    deferring.get_binding("team-a")
    deferring.record_poll("team-a", "c1", None)
    shown = deferring.get_binding("team-a").last_poll_at

    def unreachable() -> None:
        raise ConnectionError("the store is down")

    with monkeypatch.context() as patched:
        patched.setattr(deferring, "_write", unreachable)
        with pytest.raises(ConnectionError):
            deferring.flush_polls()
    assert deferring.get_binding("team-a").last_poll_at == shown
    assert deferring.flush_polls() == 1
    assert stored_poll(state_url, "team-a") == shown


def test_stopping_deferral_and_closing_write_what_is_held(
        deferring: Store, state_url: str) -> None:
    deferring.get_binding("team-a")
    deferring.record_poll("team-a", "c1", None)
    shown = deferring.get_binding("team-a").last_poll_at
    deferring.close()  # a normal stop loses nothing
    assert stored_poll(state_url, "team-a") == shown


def test_without_deferral_every_poll_is_written_at_once(
        store: Store, state_url: str, clock: TickingClock) -> None:
    # One-off commands (`reconcile`) and tests: as before, one commit a poll.
    store.record_poll("team-a", "c1", None)
    store.get_binding("team-a")
    with commits(store) as seen:
        store.record_poll("team-a", "c1", None)
        store.touch_poll("team-b")
    assert len(seen) == 2
    assert stored_poll(state_url, "team-b") == clock.now
    assert stored_poll(state_url, "team-a") == clock.now - timedelta(seconds=1)
    with pytest.raises(KeyError):
        store.touch_poll("nope")
