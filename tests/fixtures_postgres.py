"""PostgreSQL for tests: the server on 127.0.0.1:5432 (trust auth, database `test`).

Each use gets a fresh schema of its own (via `search_path` in the URL), dropped
afterwards. A test marked `postgres_restart` has the server to itself: it waits for the
other users (other pytest-xdist workers, other sessions on this machine) to finish, and
they wait for it. Tests are skipped, saying why, only when nothing listens on the server's
port; CI starts the server. Set NODUS_TEST_POSTGRES_URL to use another server.
"""

from __future__ import annotations

import fcntl
import os
import socket
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import create_engine, make_url, text

PG_URL = os.environ.get(
    "NODUS_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


def _pg_refuses() -> str | None:
    url = make_url(PG_URL)
    host, port = url.host or "127.0.0.1", url.port or 5432
    try:
        socket.create_connection((host, port), timeout=2).close()
    except OSError as exc:
        return f"PostgreSQL at {host}:{port} refuses connections ({exc})"
    return None


_LOCKS = Path(tempfile.gettempdir())


@contextmanager
def _server_use(exclusive: bool) -> Iterator[None]:
    """Shared use of the server, or exclusive use (a restart). The gate is taken first by
    both, so a waiting restart lets no new shared user in and is not starved."""
    gate, use = (os.open(_LOCKS / f"nodus-test-postgres.{name}", os.O_RDONLY | os.O_CREAT,
                         0o644) for name in ("gate", "lock"))
    try:
        fcntl.flock(gate, fcntl.LOCK_EX)
        fcntl.flock(use, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        if not exclusive:
            fcntl.flock(gate, fcntl.LOCK_UN)
        yield
    finally:
        os.close(use)  # closing unlocks
        os.close(gate)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "postgres_restart: the test restarts the PostgreSQL "
                            "server, so it runs while no other test uses it")


@pytest.fixture
def pg_state_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A URL to an empty PostgreSQL schema of its own, dropped afterwards."""
    reason = _pg_refuses()
    if reason:
        pytest.skip(reason)
    with _server_use(request.node.get_closest_marker("postgres_restart") is not None):
        yield from _schema()


def _schema() -> Iterator[str]:
    schema = f"nodus_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(PG_URL, pool_pre_ping=True)  # survives a server restart
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    try:
        yield f"{PG_URL}?options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def state_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL to an empty state database of each kind."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'state.db'}"
    return request.getfixturevalue("pg_state_url")


