"""The state directory as another local user meets it: with the umask most systems give
(022), after the store is opened and a sync ran (its Git mirror fetched, its database in
WAL mode), the directory is 0700 and nothing under it
is readable, writable or searchable by group or others. A directory an earlier version
left looser is tightened, and the log says so once, naming the path and its old mode."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from nodus_gitops.config import Binding, Settings
from nodus_gitops.providers.base import FakeProvider
from nodus_gitops.state.store import Store
from nodus_gitops.wiring import build_service
from nodus_gitops.workloads import CompositeProvider

from tests.fixtures_git import ManifestRepo

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _modes(root: Path) -> dict[str, int]:
    found = {".": stat.S_IMODE(root.lstat().st_mode)}
    for folder, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            path = Path(folder) / name
            found[str(path.relative_to(root))] = stat.S_IMODE(path.lstat().st_mode)
    return found


def _open_to_others(root: Path) -> dict[str, str]:
    return {p: f"{m:04o}" for p, m in _modes(root).items() if m & 0o077}


def _sync(state: Path, repo: ManifestRepo) -> Store:
    """The examples pushed, and one sync of them applied; the store left open."""
    for path in sorted((ROOT / "examples-repo").rglob("*.yaml")):
        repo.write(str(path.relative_to(ROOT / "examples-repo")), path.read_text())
    repo.commit("the examples")
    repo.push()
    settings = Settings(state_dir=state, bindings=(
        Binding(id="examples", url=str(repo.push_url), project="p"),))
    store = Store.open(None, state)
    fake = FakeProvider()
    service = build_service(settings, store, provider_factory=lambda _n: CompositeProvider(
        fake, state / "workloads"))
    (report,) = service.reconcile_all()
    assert report.result == "applied", report
    return store


def test_nothing_under_the_state_directory_is_open_to_other_users(
        umask_022: None, manifest_repo: ManifestRepo, tmp_path: Path) -> None:
    state = tmp_path / "state"
    store = _sync(state, manifest_repo)
    try:
        modes = _modes(state)
        # What the sync wrote is there: the database with its WAL, and a mirror.
        assert {"state.db", "state.db-wal", "state.db-shm"} <= set(modes), sorted(modes)
        assert any(p.startswith("mirrors/") and p.endswith(".pack") for p in modes)
        assert modes["."] == 0o700
        assert _open_to_others(state) == {}
    finally:
        store.close()
    assert _open_to_others(state) == {}


def test_a_looser_state_directory_is_tightened_and_said_once(
        umask_022: None, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    state = tmp_path / "state"
    Store.open(None, state).close()
    # As an earlier version left it under umask 022.
    state.chmod(0o755)
    (state / "state.db").chmod(0o644)
    (state / "mirrors").chmod(0o755)
    os.removexattr(state / "mirrors", "system.posix_acl_default")
    old = state / "mirrors" / "old.pack"
    old.write_bytes(b"x")
    old.chmod(0o444)
    with caplog.at_level(logging.WARNING, logger="nodus_gitops.state"):
        Store.open(None, state).close()
        Store.open(None, state).close()
    said = [r for r in caplog.records if r.name.startswith("nodus_gitops.state")]
    assert [r.getMessage() for r in said] == [
        f"state directory {state} was mode 0755, readable by other local users: now 0700",
        f"state directory {state / 'mirrors'} was mode 0755, readable by other local users: "
        "now 0700",
        f"state file {state / 'state.db'} was mode 0644, readable by other local users: "
        "now 0600"]
    assert said[0].path == str(state) and said[0].old_mode == "0755"  # type: ignore[attr-defined]
    assert _open_to_others(state) == {}


def test_a_new_state_directory_is_made_private_without_a_warning(
        umask_022: None, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    state = tmp_path / "a" / "state"
    with caplog.at_level(logging.WARNING):
        Store.open(None, state).close()
    assert not caplog.records
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert _open_to_others(state) == {}


def test_a_read_only_open_changes_nothing(umask_022: None, tmp_path: Path) -> None:
    state = tmp_path / "state"
    Store.open(None, state).close()
    state.chmod(0o755)
    Store.open(None, state, read_only=True).close()
    assert stat.S_IMODE(state.stat().st_mode) == 0o755


def test_a_database_file_named_by_url_is_made_0600(umask_022: None, tmp_path: Path) -> None:
    db = tmp_path / "elsewhere" / "nodus.db"
    db.parent.mkdir()
    store = Store.open(f"sqlite:///{db}")
    store.upsert_binding("b", "https://git.example/b.git", "main", "", "p")
    store.close()
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in db.parent.iterdir()}
    assert modes and all(m == 0o600 for m in modes.values()), modes
