"""Fixtures for the dashboard tests: a seeded store behind the real server on a free port."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from nodus_gitops.web.server import start_server

from tests.web.seed import Seeded, seed


@pytest.fixture
def seeded(tmp_path: Path) -> Iterator[Seeded]:
    s = seed(tmp_path / "state")
    yield s
    s.store.close()


def serve(s: Seeded) -> tuple[str, object]:
    stop = start_server(s.service, "127.0.0.1:0")
    host, port = stop.address  # type: ignore[attr-defined]
    return f"http://{host}:{port}", stop


@pytest.fixture
def server_url(seeded: Seeded) -> Iterator[str]:
    url, stop = serve(seeded)
    yield url
    stop()  # type: ignore[operator]


@pytest.fixture
def client(server_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server_url, timeout=10) as c:
        yield c
