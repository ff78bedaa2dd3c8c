"""A real `nodus-gitops serve` on stderr: off a terminal (or with `--log-format json`)
every line is a JSON object, the scheduler's own warnings included; with `--log-format
text` a person reads one short line for each sync that did something: the time, the
binding, the short commit, the result and what it did."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import httpx
import pytest
import yaml

from tests.fixtures_git import GitHttpServer, ManifestRepo, _GitHttpHandler, serve_git_http
from tests.support.local_runs import stop_local_runs
from tests.support.serving import wait_until
from tests.test_quickstart import free_port

BINDING = "examples"
SKIPPED = "skipped: maximum number of running instances reached"
JOB = ("apiVersion: nodus.dev/v1\nkind: Job\nmetadata:\n  name: {name}\nspec:\n"
       "  command: [python3, -c, pass]\n  maxCostUSD: \"0.25\"\n")


class _FetchesHeld(_GitHttpHandler):
    """Answers a fetch (git-upload-pack) only once the test opens the server's gate; a
    push (git-receive-pack) at once."""

    def _cgi(self, body: bytes) -> None:
        if "git-upload-pack" in self.path:
            self.server.gate.wait(timeout=120)  # type: ignore[attr-defined]
        super()._cgi(body)


@contextmanager
def _held_git_http(root: Path) -> Iterator[tuple[GitHttpServer, threading.Event]]:
    """A Git server whose fetches wait for the event it yields to be set."""
    with serve_git_http(root) as git:
        gate = threading.Event()
        git._server.gate = gate  # type: ignore[attr-defined]
        git._server.RequestHandlerClass = _FetchesHeld
        try:
            yield git, gate
        finally:
            gate.set()


class Serve:
    """`nodus-gitops serve` on one binding, its stderr read line by line as it comes."""

    def __init__(self, tmp_path: Path, repo_url: str, *flags: str) -> None:
        self.state = tmp_path / "state"
        self.url = f"http://127.0.0.1:{free_port()}"
        config = tmp_path / "config.yaml"
        config.write_text(yaml.safe_dump({
            "stateDir": str(self.state), "listen": self.url.removeprefix("http://"),
            "repos": [{"id": BINDING, "url": repo_url, "branch": "main", "path": "manifests",
                       "interval": "1s"}],
            "providers": {"local": {"type": "local", "detectGpus": False,
                                    "prestartSupervisor": False}},
            "checks": {"gitnotes": False}}))
        env = {k: v for k, v in os.environ.items() if not k.startswith("NODUS_GITOPS_")}
        self.proc = subprocess.Popen(
            [sys.executable, "-P", "-m", "nodus_gitops.cli", "serve", "--config", str(config),
             *flags], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def wait_line(self, matches, what: str) -> str:
        def found() -> bool:
            assert self.proc.poll() is None, "\n".join(self.lines)
            return any(matches(line) for line in self.lines)

        wait_until(found, f"{what} in serve's stderr:\n" + "\n".join(self.lines), timeout=90)
        return next(line for line in self.lines if matches(line))

    def polled_since_last_sync(self) -> bool:
        """Whether the binding was polled after its last sync finished (the API's view)."""
        try:
            [repo] = httpx.get(f"{self.url}/api/v1/repos", timeout=5).json()
        except httpx.TransportError:
            return False
        last = repo["lastSync"]
        if not (last and last["finishedAt"] and repo["lastPollAt"]):
            return False
        return (datetime.fromisoformat(repo["lastPollAt"])
                > datetime.fromisoformat(last["finishedAt"]))

    def stop(self) -> str:
        """SIGTERM, then what it wrote to stdout (all of stderr is in `lines`)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            out, _ = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        self._reader.join(timeout=30)
        stop_local_runs(self.state / "local")
        return out


def _repo(git: GitHttpServer, tmp_path: Path, files: dict[str, str]) -> ManifestRepo:
    repo = ManifestRepo(git.root, "manifests", tmp_path / "work",
                        push_url=git.url_for("manifests"))
    for path, text in files.items():
        repo.write(path, text)
    repo.commit("start")
    repo.push()
    return repo


@pytest.mark.parametrize("flags", [[], ["--log-format", "json"]], ids=["piped", "json"])
def test_every_line_is_json_when_the_scheduler_skips_a_poll(tmp_path: Path,
                                                            flags: list[str]) -> None:
    with _held_git_http(tmp_path / "srv") as (git, gate):
        repo = _repo(git, tmp_path, {"manifests/README.md": "no manifests yet\n"})
        serve = Serve(tmp_path, git.url_for("manifests"), *flags)
        try:
            # The first sync waits in its fetch: the poll due a second later is skipped.
            serve.wait_line(lambda line: SKIPPED in line, "the scheduler's skipped poll")
            gate.set()
            serve.wait_line(lambda line: "sync finished" in line, "the first sync's end")
        finally:
            gate.set()
            out = serve.stop()
    assert serve.proc.returncode == 0, "\n".join(serve.lines)
    assert out == ""
    entries = []
    for line in serve.lines:
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            raise AssertionError(f"not a JSON line: {line!r}") from None
        assert isinstance(entry, dict) and {"time", "level", "logger", "message"} <= set(entry)
        entries.append(entry)
    [skipped, *_] = [e for e in entries if SKIPPED in e["message"]]
    assert skipped["level"] == "warning" and skipped["logger"].startswith("apscheduler.")
    [finished] = [e for e in entries if e["message"] == "sync finished"]
    assert (finished["binding"], finished["commit"], finished["result"]) == (
        BINDING, repo.head(), "noop")
    assert (finished["counts"], finished["summary"]) == ({}, "nothing to do")


def test_text_shows_each_sync_that_did_something_as_one_line(tmp_path: Path) -> None:
    with serve_git_http(tmp_path / "srv") as git:
        repo = _repo(git, tmp_path, {"manifests/a.yaml": JOB.format(name="a")})
        first = repo.head()
        serve = Serve(tmp_path, git.url_for("manifests"), "--log-format", "text")
        try:
            applied = serve.wait_line(lambda line: f"  {first[:7]}  " in line,
                                      "the first commit's outcome")
            wait_until(serve.polled_since_last_sync, "a poll that found nothing new")
            repo.write("manifests/b.yaml", JOB.format(name="b") + "  timeout: 10x\n")
            second = repo.commit("an invalid manifest")
            repo.push()
            invalid = serve.wait_line(lambda line: f"  {second[:7]}  " in line,
                                      "the second commit's outcome")
        finally:
            serve.stop()
    assert re.fullmatch(rf"\d\d:\d\d:\d\d  {BINDING}  {first[:7]}  applied  1 created",
                        applied), applied
    assert re.fullmatch(rf"\d\d:\d\d:\d\d  {BINDING}  {second[:7]}  invalid  1 problem; "
                        "nothing applied", invalid), invalid
    # The polls between them found nothing new and said nothing.
    outcomes = [line for line in serve.lines if f"  {BINDING}  " in line]
    assert outcomes == [applied, invalid], "\n".join(serve.lines)
    assert not any(line.lstrip().startswith("{") for line in serve.lines), serve.lines
