"""Turning the `--state` setting into a configured SQLAlchemy engine (SQLite or PostgreSQL).

SQLite: WAL, `busy_timeout` 5000 ms, foreign keys on, `synchronous=FULL` (the journal must
survive a power cut), and SQLAlchemy, not the `sqlite3` module, emits `BEGIN`: plain
`BEGIN` for reads, `BEGIN IMMEDIATE` on the write engine so a writer takes the lock up
front and waits its turn instead of failing on a lock upgrade. PostgreSQL goes through
psycopg 3 whatever driver the URL names. Errors name the setting and never show a password.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

from nodus_gitops.floor.errors import ConfigError
from nodus_gitops.floor.redaction import mask_url_passwords
from sqlalchemy import URL, Connection, Engine, create_engine, event, make_url
from sqlalchemy.exc import ArgumentError

WRITE_OPTION = "nodus_write"
BUSY_TIMEOUT_MS = 5000
SQLITE_DRIVERS = frozenset({"sqlite", "sqlite+pysqlite"})
POSTGRES_DRIVERS = frozenset({"postgres", "postgresql", "postgresql+psycopg"})
STATE_FILE = "state.db"  # the SQLite database in the state directory, without a state URL
_EXAMPLES = "sqlite:////var/lib/nodus-gitops/state.db or postgresql://USER@HOST:5432/DB"


def display(url: URL) -> str:
    """The URL as it may appear in messages and logs."""
    return url.render_as_string(hide_password=True)


def resolve_url(url: str | None, state_dir: Path | None) -> URL:
    """The state URL: `url` if given, else `sqlite:///<state_dir>/state.db`."""
    if url is None or not url.strip():
        if state_dir is None:
            raise ConfigError("--state: give a state database URL or a state directory")
        try:
            Path(state_dir).mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"--state: cannot create state directory {state_dir}: {exc}") from exc
        return URL.create("sqlite", database=str(Path(state_dir) / STATE_FILE))
    try:
        parsed = make_url(url.strip())
    except ArgumentError as exc:
        raise ConfigError(
            f"--state: {mask_url_passwords(url)!r} is not a database URL (for example {_EXAMPLES})"
        ) from exc
    if parsed.drivername in POSTGRES_DRIVERS:
        return parsed.set(drivername="postgresql+psycopg")
    if parsed.drivername not in SQLITE_DRIVERS:
        raise ConfigError(
            f"--state: unsupported database {parsed.drivername!r} in {display(parsed)} "
            f"(use {_EXAMPLES})"
        )
    database = parsed.database or ""
    in_memory = "mode=memory" in database or parsed.query.get("mode") == "memory"
    if database in ("", ":memory:") or in_memory:
        raise ConfigError(f"--state: {display(parsed)} must name a database file")
    if not Path(database).parent.is_dir():
        raise ConfigError(
            f"--state: the directory of {display(parsed)} does not exist: create it first"
        )
    return parsed.set(drivername="sqlite")


def create_state_engine(url: URL, *, read_only: bool = False) -> Engine:
    """An engine for a URL from `resolve_url`; SQLite connections set up as described above
    (`read_only`: a reader's, which leaves the file's journal mode as it found it)."""
    if url.get_backend_name() == "postgresql":
        return create_engine(url, pool_pre_ping=True)
    engine = create_engine(url)
    event.listen(engine, "connect", _sqlite_read if read_only else _sqlite_connect)
    event.listen(engine, "begin", _sqlite_begin)
    return engine


def write_engine(engine: Engine) -> Engine:
    """The same pool, marked so SQLite transactions begin with `BEGIN IMMEDIATE`."""
    return engine.execution_options(**{WRITE_OPTION: True})


def _sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.isolation_level = None  # SQLAlchemy emits BEGIN (see _sqlite_begin)
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        _use_wal(cursor)
        cursor.execute("PRAGMA synchronous = FULL")
        cursor.execute("PRAGMA foreign_keys = ON")
    finally:
        cursor.close()


def _sqlite_read(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.isolation_level = None
    dbapi_connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")


def _use_wal(cursor: Any) -> None:
    """Switch a new database file to WAL (a no-op once it is).

    The switch needs an exclusive lock and SQLite answers "database is locked" at once,
    without the busy handler, while another process holds one (two processes opening a
    new file together), so retry for as long as the busy timeout would have waited.
    """
    if cursor.execute("PRAGMA journal_mode").fetchone()[0] == "wal":
        return
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    delay = 0.005
    while True:
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


def _sqlite_begin(conn: Connection) -> None:
    write = conn.get_execution_options().get(WRITE_OPTION, False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")
