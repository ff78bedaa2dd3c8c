"""Helpers the state tests share: a controllable clock and raw SQL outside the store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import create_engine, text


class TickingClock:
    """A clock that moves `step` forward on every reading, from a fixed start."""

    def __init__(self, step: timedelta = timedelta(seconds=1)) -> None:
        self.now = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
        self.step = step

    def __call__(self) -> datetime:
        self.now += self.step
        return self.now


def execute(url: str, *statements: str) -> list[list[tuple]]:
    """Run SQL straight against the database behind a state URL, outside the store.

    Returns each statement's rows (an empty list for one that returns none).
    """
    engine = create_engine(url)
    results: list[list[tuple]] = []
    try:
        with engine.begin() as conn:
            for statement in statements:
                result = conn.execute(text(statement))
                results.append([tuple(r) for r in result] if result.returns_rows else [])
    finally:
        engine.dispose()
    return results
