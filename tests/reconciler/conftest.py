"""Fixtures of the command line's tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """For a command run in this process: no user config, no nodus-gitops variables."""
    for name in [n for n in os.environ if n.startswith("NODUS_GITOPS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    return tmp_path
