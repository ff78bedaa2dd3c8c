"""Remote mode: `get`, `describe` and `logs` with `--server URL` (or NODUS_GITOPS_SERVER)
read a real `serve`'s JSON API and print what they print of the same state read locally;
each way the server fails to answer is one line with its own exit code."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.web.conftest import serve
from tests.web.seed import Seeded, seed


def cli(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("NODUS_GITOPS_")}
    return subprocess.run([sys.executable, "-m", "nodus_gitops.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120, env={**environ, **env})


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Seeded, str]]:
    s = seed(tmp_path / "state")
    url, stop = serve(s)
    yield s, url
    stop()  # type: ignore[operator]
    s.store.close()


def _without_age(text: str) -> list[list[str]]:
    """A `get` table's cells, the AGE column left out (it counts seconds as it is read)."""
    rows = [re.split(r" {3,}", line) for line in text.splitlines()]
    if not rows or "AGE" not in rows[0]:
        return rows
    at = rows[0].index("AGE")
    return [row[:at] + row[at + 1:] for row in rows]


@pytest.mark.parametrize("command", [
    ["get"], ["get", "jobs", "-o", "wide"], ["get", "pipelines"], ["get", "-o", "json"],
    ["get", "-o", "yaml"], ["get", "-o", "name"], ["get", "jobs", "--sort-by", "cost"],
    ["get", "-l", "nodus.dev/pipeline=train-eval"], ["get", "job/hello", "-o", "json"],
    ["get", "job/train-eval-prepare"], ["describe", "job/hello"], ["describe", "sweep/batch-size"],
    ["logs", "job/hello"], ["logs", "job/hello", "--index", "1"], ["logs", "job/train-eval-train"],
])
def test_remote_output_is_the_local_output_of_the_same_state(
        served: tuple[Seeded, str], tmp_path: Path, command: list[str]) -> None:
    s, url = served
    local = cli(*command, "--state-dir", str(s.state_dir), cwd=tmp_path)
    remote = cli(*command, "--server", url, cwd=tmp_path)
    assert local.returncode == remote.returncode == 0, (local.stderr, remote.stderr)
    assert remote.stdout.strip(), remote.stderr
    assert _without_age(remote.stdout) == _without_age(local.stdout)
    assert "Traceback" not in remote.stderr
    by_env = cli(*command, cwd=tmp_path, NODUS_GITOPS_SERVER=url)
    assert _without_age(by_env.stdout) == _without_age(remote.stdout)


@pytest.mark.parametrize("command", [["get", "job/zzz"], ["describe", "job/zzz"],
                                     ["logs", "job/hello", "--index", "9"]])
def test_what_is_not_there_is_said_as_locally(served: tuple[Seeded, str], tmp_path: Path,
                                                command: list[str]) -> None:
    s, url = served
    local = cli(*command, "--state-dir", str(s.state_dir), cwd=tmp_path)
    remote = cli(*command, "--server", url, cwd=tmp_path)
    assert remote.returncode == local.returncode == 1
    assert remote.stderr == local.stderr and len(remote.stderr.splitlines()) == 1


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_unreachable_server_is_one_line_and_exit_3(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    done = cli("get", "--server", url, cwd=tmp_path)
    assert done.returncode == 3
    [line] = done.stderr.splitlines()
    assert f"cannot reach {url}" in line and "NODUS_GITOPS_SERVER" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no local state made


def test_a_path_that_is_no_api_is_exit_5(served: tuple[Seeded, str], tmp_path: Path) -> None:
    _s, url = served
    done = cli("get", "--server", url + "/not-here", cwd=tmp_path)
    assert done.returncode == 5
    [line] = done.stderr.splitlines()
    assert "/not-here has no /api/v1/resources (404)" in line and "serve" in line


def test_the_dashboard_token_comes_from_the_environment(tmp_path: Path) -> None:
    s = seed(tmp_path / "state", dashboard={"token": "t0ken"})
    url, stop = serve(s)
    try:
        done = cli("get", "-o", "name", "--server", url, cwd=tmp_path)
        assert done.returncode == 4
        [line] = done.stderr.splitlines()
        assert "(401)" in line and "set NODUS_GITOPS_TOKEN" in line
        done = cli("get", "-o", "name", "--server", url, cwd=tmp_path, NODUS_GITOPS_TOKEN="no")
        assert done.returncode == 4 and "NODUS_GITOPS_TOKEN is not" in done.stderr
        done = cli("get", "-o", "name", "--server", url, cwd=tmp_path,
                   NODUS_GITOPS_TOKEN="t0ken")
        assert done.returncode == 0 and "job/hello" in done.stdout.split()
    finally:
        stop()  # type: ignore[operator]
        s.store.close()


@pytest.mark.parametrize("command, said", [
    (["logs", "job/hello", "-f"], "serves a log's tail"),
])
def test_what_the_api_does_not_serve_is_one_line_with_what_to_do(
        served: tuple[Seeded, str], tmp_path: Path, command: list[str], said: str) -> None:
    _s, url = served
    done = cli(*command, "--server", url, cwd=tmp_path)
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert said in line and "without --server" in line
    assert not (tmp_path / "out").exists()


def test_remote_watch_shows_a_change_the_server_records(served: tuple[Seeded, str],
                                                        tmp_path: Path) -> None:
    import threading
    from dataclasses import replace

    from nodus_gitops.floor.identity import ResourceKey

    s, url = served
    environ = {k: v for k, v in os.environ.items() if not k.startswith("NODUS_GITOPS_")}
    watch = subprocess.Popen([sys.executable, "-m", "nodus_gitops.cli", "get", "job/hello",
                              "--watch", "--server", url], stdout=subprocess.PIPE, text=True,
                             cwd=tmp_path, env=environ)
    guard = threading.Timer(90, watch.kill)  # the test fails, not hangs, if none comes
    guard.start()
    try:
        assert watch.stdout is not None
        phases = []
        for line in watch.stdout:
            cells = line.split()
            if cells[:1] == ["hello"]:
                phases.append(cells[1])
                if phases == ["Running"]:
                    key = ResourceKey("Job", "ml", "hello")
                    record = s.store.get_resource(key) or next(
                        r for r in s.store.list_inventory() if r.key.name == "hello")
                    s.store.upsert_resource(replace(record, phase="Succeeded"))
                if cells[1] == "Succeeded":
                    break
    finally:
        guard.cancel()
        watch.terminate()
        watch.communicate(timeout=30)
    assert phases == ["Running", "Succeeded"]
