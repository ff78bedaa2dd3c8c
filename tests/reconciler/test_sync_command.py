"""`nodus-gitops sync BINDING` asks a real `serve` to fetch now (the refresh endpoint, as a
client with no Origin) and, with `--wait`, follows that poll to its result and exits by
it. The serve tracks a real Git repository that the test pushes to."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from nodus_gitops.config import Binding, Settings
from nodus_gitops.providers.base import FakeProvider
from nodus_gitops.state.store import Store
from nodus_gitops.web.server import start_server
from nodus_gitops.wiring import build_service

from tests.fixtures_git import ManifestRepo

JOB = ("apiVersion: nodus.dev/v1\nkind: Job\nmetadata:\n  name: {name}\nspec:\n"
       "  command: [python3, -c, pass]\n  maxCostUSD: \"0.25\"\n")


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("NODUS_GITOPS_")}
    return subprocess.run([sys.executable, "-m", "nodus_gitops.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=180, env=environ)


@pytest.fixture
def serving(manifest_repo: ManifestRepo, tmp_path: Path) -> Iterator[tuple[str, Store]]:
    manifest_repo.write("a.yaml", JOB.format(name="a"))
    manifest_repo.commit("a")
    manifest_repo.push()
    store = Store.open(None, tmp_path / "state")
    provider = FakeProvider()
    service = build_service(
        Settings(state_dir=tmp_path / "state",
                 bindings=(Binding(id="team", url=manifest_repo.push_url, project="p"),)),
        store, provider_factory=lambda _n: provider)
    stop = start_server(service, "127.0.0.1:0")
    host, port = stop.address  # type: ignore[attr-defined]
    yield f"http://{host}:{port}", store
    stop()
    service.close()
    store.close()


def test_sync_wait_follows_each_poll_to_its_result(
        serving: tuple[str, Store], manifest_repo: ManifestRepo, tmp_path: Path) -> None:
    url, store = serving
    done = cli("sync", "team", "--server", url, "--wait", "--timeout", "2m", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    [sync] = store.list_syncs("team")
    assert sync.result == "applied"
    assert done.stdout.strip() == (f"team: applied at {manifest_repo.head()[:12]}: "
                                   f"{sync.message} (sync {sync.id})")

    # Nothing pushed since: the poll finds nothing new, and records no sync.
    done = cli("sync", "team", "--server", url, "--wait", "--timeout", "2m", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"team: unchanged at {manifest_repo.head()[:12]}")
    assert len(store.list_syncs("team")) == 1

    # An invalid manifest: the sync says so, and the command fails by it.
    manifest_repo.write("b.yaml", "kind: Job\n")
    sha = manifest_repo.commit("bad")
    manifest_repo.push()
    done = cli("sync", "team", "--server", url, "--wait", "--timeout", "2m", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    newest = store.list_syncs("team")[0]
    assert newest.result == "invalid" and newest.commit == sha
    assert done.stdout.startswith(f"team: invalid at {sha[:12]}")


def test_sync_without_wait_only_asks(serving: tuple[str, Store], tmp_path: Path) -> None:
    url, _store = serving
    done = cli("sync", "team", "--server", url, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout == f"team: sync requested from {url}\n"


def test_sync_names_what_is_wrong_in_one_line(serving: tuple[str, Store],
                                              tmp_path: Path) -> None:
    url, _store = serving
    done = cli("sync", "nope", "--server", url, "--wait", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [f"nodus-gitops sync: no repo binding 'nope' on {url}"]
    done = cli("sync", "team", cwd=tmp_path)
    assert done.returncode == 2 and "--server URL or set NODUS_GITOPS_SERVER" in done.stderr
    done = cli("sync", "team", "--server", url, "--timeout", "1x", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
