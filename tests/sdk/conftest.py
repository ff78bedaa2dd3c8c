"""A real world for the SDK tests: a bare manifests repository served over smart HTTP,
and `nodus-gitops serve --config` in a subprocess following it every second with the
local backend (simulated L4 and H100 slots) and a dashboard token. The SDK's default
client is configured from the environment, as a script's would be."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pygit2
import pytest
import yaml
from nodus_gitops import sdk as nodus

from tests.fixtures_git import GitHttpServer, ManifestRepo, git, serve_git_http
from tests.support.local_runs import stop_local_runs

PROJECT = "ml"
TOKEN = "sdk-test-token"
AUTHOR = ("Sweep Script", "sweeps@example.test")
READY_SECONDS = 30


@dataclass
class World:
    git: GitHttpServer
    repo: ManifestRepo
    api_url: str
    state_dir: Path
    cache_dir: Path
    log: Path

    @property
    def repo_url(self) -> str:
        return self.git.url_for("manifests")

    def commits(self) -> list[pygit2.Commit]:
        """The branch's commits on the server, newest first."""
        bare = pygit2.Repository(str(self.repo.bare))
        return list(bare.walk(bare.references["refs/heads/main"].target))

    def file(self, path: str) -> dict:
        bare = pygit2.Repository(str(self.repo.bare))
        tip = bare.references["refs/heads/main"].peel(pygit2.Commit)
        return yaml.safe_load(tip.tree[path].data)

    def push_other(self, path: str, text: str, message: str) -> None:
        """Another writer's commit: the test's work clone catches up, commits, pushes."""
        git("fetch", "--quiet", "origin", "main", cwd=self.repo.work)
        git("reset", "--quiet", "--hard", "FETCH_HEAD", cwd=self.repo.work)
        self.repo.write(path, text)
        self.repo.commit(message)
        self.repo.push()

    def client(self, **changes) -> nodus.Client:
        settings = dict(repo_url=self.repo_url, api_url=self.api_url, token=TOKEN,
                        project=PROJECT, author=AUTHOR, cache_dir=self.cache_dir)
        settings.update(changes)
        return nodus.Client(**settings)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(world_dir: Path, repo_url: str, port: int) -> Path:
    config = {
        "instance": "sdk-test",
        "stateDir": str(world_dir / "state"),
        "listen": f"127.0.0.1:{port}",
        "repos": [{"id": "sweeps", "url": repo_url, "branch": "main", "path": "sweeps",
                   "project": PROJECT, "interval": "1s"}],
        "providers": {"local": {"type": "local", "detectGpus": False,
                                "prestartSupervisor": False, "suspendGraceSeconds": 1,
                                "gpuSlots": [{"type": "L4"}, {"type": "H100"}]}},
        "dashboard": {"token": TOKEN},
    }
    path = world_dir / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _wait_ready(url: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + READY_SECONDS
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"nodus-gitops serve exited: {log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"nodus-gitops serve not ready: {log.read_text()[-3000:]}")


@pytest.fixture(scope="session")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    base = tmp_path_factory.mktemp("sdk")
    with serve_git_http(base / "srv") as git:
        repo = ManifestRepo(git.root, "manifests", base / "work",
                            push_url=git.url_for("manifests"))
        repo.write("sweeps/README.md", "Sweeps written by scripts with the SDK.\n")
        repo.commit("start the sweeps folder")
        repo.push()
        port = _free_port()
        config = _config(base, git.url_for("manifests"), port)
        log = base / "serve.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "nodus_gitops.cli", "serve", "--config", str(config)],
                stdout=out, stderr=subprocess.STDOUT, cwd=base,
                env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
        world = World(git, repo, f"http://127.0.0.1:{port}", base / "state", base / "cache",
                      log)
        try:
            _wait_ready(world.api_url, proc, log)
            yield world
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            stop_local_runs(base / "state" / "local")


@pytest.fixture(scope="session")
def configured(world: World) -> Iterator[World]:
    """The SDK's default client, from the environment a script would have."""
    env = {"NODUS_SDK_REPO": world.repo_url, "NODUS_API_URL": world.api_url,
           "NODUS_API_TOKEN": TOKEN, "NODUS_PROJECT": PROJECT, "GIT_AUTHOR_NAME": AUTHOR[0],
           "GIT_AUTHOR_EMAIL": AUTHOR[1], "NODUS_SDK_CACHE": str(world.cache_dir),
           "NODUS_SDK_NOT_FOUND_GRACE": "30"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    nodus.configure()
    try:
        yield world
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        nodus.configure(nodus.Client(environ={}))


def poll(check: Callable[[], object], timeout: float = 30.0, every: float = 0.2) -> object:
    """Call `check` until it returns something true; AssertionError after `timeout`."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s; last value: {last!r}")
