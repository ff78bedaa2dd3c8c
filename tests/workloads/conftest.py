"""Every test here runs its local backend under its own tmp_path: nothing of it outlives
the test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.local_runs import stop_local_runs


@pytest.fixture(autouse=True)
def _no_run_outlives_the_test(tmp_path: Path) -> Iterator[None]:
    yield
    stop_local_runs(tmp_path / "state" / "local")
