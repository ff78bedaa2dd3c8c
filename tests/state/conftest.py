"""Fixtures for the state store tests; `state_url` (SQLite and PostgreSQL) comes from
tests/fixtures_postgres.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from nodus_gitops.state import Store

from tests.state.support import TickingClock


@pytest.fixture
def clock() -> TickingClock:
    return TickingClock()


@pytest.fixture
def open_store(state_url: str, clock: TickingClock) -> Iterator[Callable[..., Store]]:
    """Opens stores on the test's database and closes them all afterwards."""
    opened: list[Store] = []

    def _open(**kwargs: object) -> Store:
        kwargs.setdefault("clock", clock)
        store = Store.open(state_url, **kwargs)  # type: ignore[arg-type]
        opened.append(store)
        return store

    yield _open
    for store in opened:
        store.close()


@pytest.fixture
def store(open_store: Callable[..., Store]) -> Store:
    s = open_store()
    s.upsert_binding("team-a", "https://git.example/a.git", "main", "jobs", "proj-a")
    s.upsert_binding("team-b", "https://git.example/b.git", "main", "", "proj-b")
    return s
