"""Faults around the reconciler: a stalling or garbage-speaking Git remote, a locked
SQLite file, a backend that fails or loses its answer. Each time: a clear error, the
last good state kept, nothing lost and nothing duplicated."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pygit2
import pytest
from nodus_gitops.config import Binding, Settings
from nodus_gitops.floor.errors import TransientError
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.providers.base import FakeProvider
from nodus_gitops.service import Service
from nodus_gitops.source import set_network_timeouts
from nodus_gitops.state.store import Store
from nodus_gitops.wiring import build_service

from tests.fixtures_git import ManifestRepo

JOB = ("apiVersion: nodus.dev/v1\nkind: Job\nmetadata:\n  name: {name}\nspec:\n"
       "  command: [python3, -c, pass]\n")


class BadServer:
    """A TCP server on 127.0.0.1 that either stalls after accepting or answers garbage."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.conns.append(conn)
            if self.mode == "garbage":
                try:
                    conn.recv(65536)
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-git-upload-"
                                 b"pack-advertisement\r\nContent-Length: 14\r\n\r\n"
                                 b"\x00\xffgarbage!!!!!")
                finally:
                    conn.close()

    def close(self) -> None:
        self.stop.set()
        for c in self.conns:
            c.close()
        self.sock.close()


def service_for(repo: ManifestRepo, tmp: Path, provider: FakeProvider, url: str | None = None,
                store: Store | None = None) -> Service:
    binding = Binding(id="f", url=url or repo.push_url, project="p")
    store = store or Store.open(None, tmp / "state")
    return build_service(Settings(state_dir=tmp / "state", bindings=(binding,)), store,
                   provider_factory=lambda _n: provider)


@pytest.mark.parametrize("mode", ["stall", "garbage"])
def test_a_bad_remote_is_a_clear_error_and_the_last_good_state_stays(
        mode: str, manifest_repo: ManifestRepo, tmp_path: Path) -> None:
    manifest_repo.write("a.yaml", JOB.format(name="a"))
    manifest_repo.commit("a")
    manifest_repo.push()
    provider = FakeProvider()
    service = service_for(manifest_repo, tmp_path, provider)
    assert service.reconcile("f").result == "applied"
    bad = BadServer(mode)
    set_network_timeouts(connect_ms=2000, io_ms=2000)
    try:
        sync = service.syncs["f"]
        sync.source._repo.remotes.set_url("origin", f"http://127.0.0.1:{bad.port}/x.git")
        start = time.monotonic()
        report = service.reconcile("f")
        assert time.monotonic() - start < 15  # bounded: no hang on a stalled remote
        assert report.result == "error" and "cannot reach" in report.message
        binding = service.store.get_binding("f")
        assert binding.last_error and binding.last_applied_commit == manifest_repo.head()
        assert {k.name for k in provider.resources} == {"a"}
        # The next tick backs off instead of hammering the remote.
        assert service.reconcile("f").result == "backoff"
    finally:
        bad.close()
        set_network_timeouts()


def test_a_locked_sqlite_file_is_waited_for_then_reported(manifest_repo: ManifestRepo,
                                                          tmp_path: Path) -> None:
    manifest_repo.write("a.yaml", JOB.format(name="a"))
    manifest_repo.commit("a")
    manifest_repo.push()
    provider = FakeProvider()
    service = service_for(manifest_repo, tmp_path, provider)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sqlite3, sys, time\n"
         "c = sqlite3.connect(sys.argv[1]); c.execute('BEGIN EXCLUSIVE')\n"
         "print('locked', flush=True); time.sleep(1.5); c.rollback()",
         str(tmp_path / "state" / "state.db")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"  # another process holds it
        report = service.reconcile("f")  # waits on the busy timeout, then goes on
    finally:
        holder.wait(timeout=30)
    assert report is not None and report.result == "applied"
    assert {k.name for k in provider.resources} == {"a"}


def test_a_create_whose_answer_was_lost_is_not_repeated(manifest_repo: ManifestRepo,
                                                        tmp_path: Path) -> None:
    """The backend made the Job, then the connection broke before the answer came."""
    lose = {"left": 1}

    def handler(op, key, arg):
        if op == "create" and lose["left"]:
            lose["left"] -= 1
            provider.resources[key] = provider.resources.get(key) or _observed(key)
            raise TransientError("connection reset by peer", delay=0)
        return None

    def _observed(key):
        from nodus_gitops.providers.base import Observed

        return Observed(key, "fake-lost", "Running")

    provider = FakeProvider(handler)
    service = service_for(manifest_repo, tmp_path, provider)
    service.syncs["f"].applier.sleep = lambda _s: None
    manifest_repo.write("a.yaml", JOB.format(name="a"))
    manifest_repo.commit("a")
    manifest_repo.push()
    report = service.reconcile("f")
    assert report.result == "applied"
    key = ResourceKey("Job", "p", "a")
    assert provider.resources[key].provider_id == "fake-lost"  # the first, kept
    assert service.store.get_resource(key).provider_id == "fake-lost"


@pytest.mark.parametrize("error", ["timeout", "500", "429"])
def test_backend_failures_are_retried_with_backoff(error: str, manifest_repo: ManifestRepo,
                                                   tmp_path: Path) -> None:
    waits: list[float] = []
    fails = {"left": 2}

    def handler(op, key, arg):
        if op == "create" and fails["left"]:
            fails["left"] -= 1
            delay = 7.0 if error == "429" else None  # Retry-After: 7
            raise TransientError(f"backend {error}", delay=delay)
        return None

    provider = FakeProvider(handler)
    service = service_for(manifest_repo, tmp_path, provider)
    service.syncs["f"].applier.sleep = waits.append
    manifest_repo.write("a.yaml", JOB.format(name="a"))
    manifest_repo.commit("a")
    manifest_repo.push()
    assert service.reconcile("f").result == "applied"
    assert len(waits) == 2
    if error == "429":
        assert waits == [7.0, 7.0]  # Retry-After honoured
    else:
        assert 0 < waits[0] <= 0.5 and waits[0] <= waits[1] * 2  # exponential, jittered
    assert [op for op, _ in provider.calls].count("create") == 3
    assert len(provider.resources) == 1


def test_backend_down_for_longer_keeps_the_commit_pending(manifest_repo: ManifestRepo,
                                                          tmp_path: Path) -> None:
    down = {"on": True}

    def handler(op, key, arg):
        if op == "create" and down["on"]:
            raise TransientError("503 service unavailable", delay=0)
        return None

    provider = FakeProvider(handler)
    service = service_for(manifest_repo, tmp_path, provider)
    service.syncs["f"].applier.sleep = lambda _s: None
    manifest_repo.write("a.yaml", JOB.format(name="a"))
    head = manifest_repo.commit("a")
    manifest_repo.push()
    assert service.reconcile("f").result == "partial"
    assert service.store.get_binding("f").last_applied_commit != head
    down["on"] = False
    assert service.reconcile("f").result == "applied"  # the same commit, retried
    assert service.store.get_binding("f").last_applied_commit == head
    assert len(provider.resources) == 1


def test_pygit2_network_timeouts_are_set() -> None:
    from nodus_gitops.source import GitSource

    GitSource("http://127.0.0.1:9/none.git", "main", Path("/tmp/nodus-timeouts"))
    assert pygit2.settings.server_timeout > 0 and pygit2.settings.server_connect_timeout > 0
