"""kill -9 at every step of apply, then a restart: no duplicate, no lost change, and an
inventory that agrees with the backend."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from nodus_gitops.state.store import Store

from tests.fixtures_git import ManifestRepo
from tests.support.dir_provider import DirProvider

ROOT = Path(__file__).resolve().parents[2]


def job(name: str, cap: str = "1.00") -> str:
    return (f"apiVersion: nodus.dev/v1\nkind: Job\nmetadata:\n  name: {name}\nspec:\n"
            f"  command: [python3, -c, pass]\n  maxCostUSD: \"{cap}\"\n")


def run(state_url: str, tmp: Path, repo: ManifestRepo, failpoint: str | None,
        replica: str | None = None) -> int:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("NODUS_GITOPS_FAILPOINT", None)
    if failpoint:
        env["NODUS_GITOPS_FAILPOINT"] = failpoint
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.crash_runner", state_url, str(tmp / "state"),
         str(repo.bare), str(tmp / "backend"), *([replica] if replica else [])], cwd=ROOT,
        env=env, capture_output=True,
        text=True, timeout=120)
    if done.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(done.stderr)
    return done.returncode


def agrees(state_url: str, backend: DirProvider) -> dict[str, str]:
    store = Store.open(state_url)
    try:
        inventory = {r.key.name: r.manifest["spec"]["maxCostUSD"]
                     for r in store.list_inventory(binding_id="crash")}
        assert store.pending_intents() == []
    finally:
        store.close()
    live = {name: m["spec"]["maxCostUSD"] for name, m in backend.manifests().items()}
    assert inventory == live
    return live


FIRST_COMMIT = ["before-intent-create", "after-intent-create", "after-provider-create",
                "after-record-create", "after-intent-create:2", "after-provider-create:3"]
SECOND_COMMIT = ["after-intent-patch", "after-provider-patch", "after-intent-delete",
                 "after-provider-delete", "before-intent-delete", "after-intent-create"]


@pytest.mark.parametrize("failpoint", FIRST_COMMIT + [f"second/{p}" for p in SECOND_COMMIT])
def test_kill_at_each_step(failpoint: str, manifest_repo: ManifestRepo, tmp_path: Path,
                           state_url: str) -> None:
    backend = DirProvider(tmp_path / "backend")
    second = failpoint.startswith("second/")
    point = failpoint.removeprefix("second/")
    manifest_repo.write("a.yaml", job("a"))
    manifest_repo.write("b.yaml", job("b"))
    manifest_repo.write("c.yaml", job("c"))
    manifest_repo.commit("three jobs")
    manifest_repo.push()
    if second:
        assert run(state_url, tmp_path, manifest_repo, None) == 0
        manifest_repo.write("a.yaml", job("a", "2.00"))  # a patch
        manifest_repo.remove("b.yaml")  # a delete
        manifest_repo.write("d.yaml", job("d"))  # a create
        manifest_repo.commit("patch a, delete b, add d")
        manifest_repo.push()

    assert run(state_url, tmp_path, manifest_repo, point) == -signal.SIGKILL
    assert run(state_url, tmp_path, manifest_repo, None) == 0

    live = agrees(state_url, backend)
    created = backend.creations()
    assert len(created) == len(set(created)), f"duplicate creation: {created}"
    if second:
        assert live == {"a": "2.00", "c": "1.00", "d": "1.00"}
    else:
        assert live == {"a": "1.00", "b": "1.00", "c": "1.00"}


@pytest.mark.parametrize("failpoint", ["after-fetch", "after-plan", "after-intent-create",
                                       "after-provider-create", "after-provider-create:2",
                                       "after-record-create"])
def test_a_second_replica_takes_over_a_killed_one(failpoint: str, manifest_repo: ManifestRepo,
                                                   tmp_path: Path, state_url: str) -> None:
    backend = DirProvider(tmp_path / "backend")
    for name in "abc":
        manifest_repo.write(f"{name}.yaml", job(name))
    manifest_repo.commit("three jobs")
    manifest_repo.push()
    # Replica A is killed mid-sync, holding the lease; replica B waits it out, resolves
    # A's pending intents and finishes the commit.
    assert run(state_url, tmp_path, manifest_repo, failpoint, "replica-a") == -signal.SIGKILL
    assert run(state_url, tmp_path, manifest_repo, None, "replica-b") == 0
    assert agrees(state_url, backend) == {"a": "1.00", "b": "1.00", "c": "1.00"}
    created = backend.creations()
    assert sorted(created) == sorted(set(created)) and len(created) == 3
