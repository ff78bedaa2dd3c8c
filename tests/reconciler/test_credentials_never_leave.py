"""Credentials never leave the process: a password planted in a binding's URL authenticates
the fetch (over real HTTP with basic auth) and is found nowhere a user or the backend can
read: not in the state database, the state and run directories, the JSON API or the
dashboard, the checks posted, or the logs."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from urllib.parse import quote

import httpx
import pygit2
import pytest
from nodus_gitops.config import Binding, binding_from_flags, load_settings
from nodus_gitops.floor.identity import ANNOTATION_SOURCE_REPO
from nodus_gitops.floor.phases import is_terminal
from nodus_gitops.hosts.credentials import Credentials
from nodus_gitops.logging_setup import JsonFormatter
from nodus_gitops.state.store import Store
from nodus_gitops.web.server import start_server
from nodus_gitops.wiring import build_service

from tests.fixtures_git import ManifestRepo, serve_git_http

USER = "alice"
# Characters that a URL must percent-encode: the fetch must send the decoded password,
# and neither form may leak.
PASSWORD = "pl@nted:S3cret/pw"
JOB = """apiVersion: nodus.dev/v1
kind: Job
metadata:
  name: hello
spec:
  command: [python3, -c, "import os, sys; print(sorted(os.environ)); print(sys.argv)"]
"""


def leaks(data: bytes | str, password: str = PASSWORD) -> list[str]:
    """Which forms of `password` (as is, or percent-encoded as in a URL) `data` holds."""
    text = data if isinstance(data, bytes) else data.encode()
    forms = {password, quote(password, safe="")}
    return sorted(form for form in forms if form.encode() in text)


def leaks_in_files(root: Path, password: str = PASSWORD) -> dict[str, list[str]]:
    found = {str(p): leaks(p.read_bytes(), password) for p in sorted(root.rglob("*"))
             if p.is_file()}
    return {path: forms for path, forms in found.items() if forms}


def logged(caplog: pytest.LogCaptureFixture) -> str:
    """Every captured record as the service logs it: message and structured fields."""
    return "\n".join(JsonFormatter().format(r) for r in caplog.records)


def write_config(tmp: Path, url: str) -> Path:
    config = tmp / "nodus.yaml"
    config.write_text(json.dumps({
        "instance": "test",
        "stateDir": str(tmp / "state"),
        "providers": {"local": {"type": "local", "prestartSupervisor": False}},
        # Checks are pushed to the remote as git notes: the push authenticates too.
        "checks": {"gitnotes": {"push": True}},
        "repos": [{"id": "team-a", "url": url, "path": "manifests", "project": "team-a",
                   "provider": "local", "interval": "5s"}],
    }))
    return config


@pytest.fixture
def served(tmp_path: Path):
    with serve_git_http(tmp_path / "srv", auth=(USER, PASSWORD)) as server:
        repo = ManifestRepo(server.root, "private", tmp_path / "work")  # pushes by path
        repo.write("manifests/hello.yaml", JOB)
        sha = repo.commit("hello")
        repo.push()
        yield server, repo, sha


def userinfo_url(server, password: str) -> str:
    return server.url_for("private").replace("//", f"//{USER}:{quote(password, safe='')}@")


def test_a_password_in_the_url_authenticates_and_leaks_nowhere(
        served, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    server, repo, sha = served
    caplog.set_level(logging.DEBUG)
    settings = load_settings(str(write_config(tmp_path, userinfo_url(server, PASSWORD))),
                             environ={})
    clean_url = server.url_for("private")
    assert settings.binding("team-a").url == clean_url
    assert not leaks(repr(settings))

    store = Store.open(None, settings.state_dir)
    service = build_service(settings, store)
    stop = None
    try:
        report = service.reconcile("team-a")
        assert report is not None
        assert (report.result, report.commit) == ("applied", sha), report.message
        deadline = time.monotonic() + 60
        while not is_terminal(store.list_inventory()[0].phase):
            assert time.monotonic() < deadline, "the Job did not finish"
            service.refresh_all()
            time.sleep(0.2)
        record = store.list_inventory()[0]
        assert record.phase == "Succeeded", record.status

        # What the backend got carries the URL without its user-info.
        runs = list(settings.state_dir.rglob("manifest.json"))
        assert runs, "the local backend wrote no run directory"
        for run in runs:
            annotations = json.loads(run.read_text())["manifest"]["metadata"]["annotations"]
            assert annotations[ANNOTATION_SOURCE_REPO] == clean_url

        # The checks were pushed to the remote, through the same credentials.
        remote = pygit2.Repository(str(repo.bare))
        notes = [note.message for note in remote.notes("refs/notes/nodus")]
        assert notes and "nodus/test/sync" in notes[0]

        stop = start_server(service, "127.0.0.1:0")
        host, port = stop.address  # type: ignore[attr-defined]
        pages = ["/api/v1/repos", "/api/v1/syncs", f"/api/v1/syncs/{store.last_sync('team-a').id}",
                 "/api/v1/resources", "/api/v1/resources/Job/team-a/hello",
                 "/api/v1/resources/Job/team-a/hello/logs", "/api/v1/events", "/",
                 "/resources", "/resources/Job/team-a/hello", "/history"]
        with httpx.Client(base_url=f"http://{host}:{port}", timeout=10) as client:
            replies = {page: client.get(page) for page in pages}
        assert all(r.status_code == 200 for r in replies.values()), {
            p: r.status_code for p, r in replies.items()}
        assert replies["/api/v1/repos"].json()[0]["url"] == clean_url
        assert {page: leaks(r.content) for page, r in replies.items() if leaks(r.content)} == {}
        assert not leaks("\n".join(notes))
    finally:
        if stop is not None:
            stop()  # type: ignore[operator]
        store.close()

    assert settings.state_dir.joinpath("state.db").is_file()
    assert leaks_in_files(settings.state_dir) == {}
    assert not leaks(logged(caplog))


def test_a_wrong_password_in_the_url_fails_to_fetch(served, tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    server, _repo, _sha = served
    caplog.set_level(logging.DEBUG)
    wrong = "wr0ng:pl@nted"
    settings = load_settings(str(write_config(tmp_path, userinfo_url(server, wrong))),
                             environ={})
    store = Store.open(None, settings.state_dir)
    try:
        report = build_service(settings, store).reconcile("team-a")
        assert report is not None and not report.ok
        assert report.message.startswith(
            f"authentication failed for {server.url_for('private')}"), report.message
        assert store.list_inventory() == []
        last_error = store.get_binding("team-a").last_error or ""
        assert "authentication failed" in last_error
        assert not leaks(report.message, wrong) and not leaks(last_error, wrong)
    finally:
        store.close()
    assert not leaks(logged(caplog), wrong)
    assert leaks_in_files(settings.state_dir, wrong) == {}


@pytest.mark.parametrize(("given", "kept", "user", "password"), [
    ("https://alice:t%40k@git.example/x.git", "https://git.example/x.git", "alice", "t@k"),
    ("https://oauth2@git.example:8443/x.git", "https://git.example:8443/x.git", "oauth2", None),
    ("ssh://git:pw@git.example:22/x.git", "ssh://git@git.example:22/x.git", "git", "pw"),
    ("git@git.example:org/x.git", "git@git.example:org/x.git", None, None),
    ("/srv/x.git", "/srv/x.git", None, None),
])
def test_a_binding_keeps_its_url_without_secrets(given: str, kept: str, user: str | None,
                                                 password: str | None) -> None:
    binding = Binding(id="a", url=given)
    assert binding.url == kept
    creds = binding.credentials()
    if user is None:
        assert creds is None
    else:
        assert creds is not None and (creds.username, creds.password) == (user, password)
    assert "pw" not in repr(binding) and "t@k" not in repr(binding)
    assert binding_from_flags(given, "main", None, None, None, None).url == kept


def test_a_credentials_setting_wins_over_the_url(tmp_path: Path) -> None:
    file = tmp_path / "creds"
    file.write_text("username=bob\ntoken=from-file\n")
    binding = Binding(id="a", url="https://alice:in-url@git.example/x.git",
                      credentials_file=str(file))
    assert binding.credentials() == Credentials("bob", "from-file")
    env = load_settings(environ={"NODUS_GITOPS_REPO_A_CREDENTIALS_ENV": "G"},
                        bindings=(Binding(id="a", url="https://alice:in-url@git.example/x"),))
    assert env.bindings[0].credentials_env == "G"
    assert env.bindings[0].url == "https://git.example/x"


def test_url_credentials_never_follow_the_url_elsewhere() -> None:
    binding = Binding(id="a", url="https://alice:in-url@git.example/x.git")
    moved = load_settings(environ={"NODUS_GITOPS_REPO_A_URL": "https://other.example/x.git"},
                          bindings=(binding,)).bindings[0]
    assert moved.url == "https://other.example/x.git" and moved.credentials() is None
    renewed = load_settings(environ={"NODUS_GITOPS_REPO_A_URL": "https://bob:new@h.example/x"},
                            bindings=(binding,)).bindings[0]
    assert renewed.url == "https://h.example/x"
    assert renewed.credentials() == Credentials("bob", "new")
