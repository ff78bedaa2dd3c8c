"""Shared fixtures. Real servers live in their own fixture modules, loaded here."""

from __future__ import annotations

import pytest

pytest_plugins = ["tests.fixtures_git", "tests.fixtures_postgres"]


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups off the items
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # There is one Slurm test cluster, and some of its tests restart its daemons: under
    # `pytest -n N --dist loadgroup` every test on it runs on the same worker, in turn.
    for item in items:
        if item.get_closest_marker("slurm") or "slurm_cluster" in item.fixturenames:
            item.add_marker(pytest.mark.xdist_group("slurm"))
