"""/readyz says a binding cannot read its branch: a real repository on disk, a real Service
and store behind the real server. Ready after a good poll; 503 naming the binding and the
reason once the tracked branch is deleted, or the remote is gone; ready again once a poll
reads the branch."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from nodus_gitops.config import Binding, Settings
from nodus_gitops.providers.base import FakeProvider
from nodus_gitops.service import Service
from nodus_gitops.state.store import Store
from nodus_gitops.web.server import start_server
from nodus_gitops.wiring import build_service

from tests.fixtures_git import ManifestRepo, git
from tests.reconciler.test_reconcile import job

BINDING = "team-r"


@pytest.fixture
def repo(tmp_path: Path) -> ManifestRepo:
    repo = ManifestRepo(tmp_path / "remote", "manifests", tmp_path / "work")
    repo.write("manifests/a.yaml", job("a"))
    repo.commit("a job")
    repo.push()
    return repo


@pytest.fixture
def served(repo: ManifestRepo, tmp_path: Path) -> Iterator[tuple[Service, str]]:
    store = Store.open(state_dir=tmp_path / "state")
    binding = Binding(id=BINDING, url=str(repo.bare), path="manifests", project="team-r")
    settings = Settings(state_dir=tmp_path / "state", instance="test", bindings=(binding,))
    service = build_service(settings, store, provider_factory=lambda _name: FakeProvider())
    service.follow_up = False
    stop = start_server(service, "127.0.0.1:0")
    host, port = stop.address  # type: ignore[attr-defined]
    try:
        yield service, f"http://{host}:{port}"
    finally:
        stop()  # type: ignore[operator]
        store.close()


def readyz(url: str) -> httpx.Response:
    return httpx.get(f"{url}/readyz", timeout=10)


def test_a_deleted_branch_is_not_ready_until_it_is_back(
        served: tuple[Service, str], repo: ManifestRepo) -> None:
    service, url = served
    assert service.reconcile(BINDING, force=True).result == "applied"  # type: ignore[union-attr]
    assert (readyz(url).status_code, readyz(url).json()) == (200, {"status": "ready"})

    git("-C", repo.bare, "update-ref", "-d", "refs/heads/main")
    service.reconcile(BINDING, force=True)
    response = readyz(url)
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "not ready"
    [reason] = body["reasons"]
    assert reason.startswith(f"{BINDING}: cannot read its branch: ")
    assert "branch 'main' not found" in reason

    repo.push()
    assert service.reconcile(BINDING, force=True) is not None
    assert readyz(url).status_code == 200


def test_a_remote_that_is_gone_is_not_ready(served: tuple[Service, str],
                                            repo: ManifestRepo) -> None:
    service, url = served
    assert service.reconcile(BINDING, force=True).result == "applied"  # type: ignore[union-attr]
    shutil.rmtree(repo.bare)
    service.reconcile(BINDING, force=True)
    response = readyz(url)
    assert response.status_code == 503
    [reason] = response.json()["reasons"]
    assert reason.startswith(f"{BINDING}: cannot read its branch: ")
    assert str(repo.bare) in reason
