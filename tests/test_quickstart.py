"""The README's quick start, as a new user runs it: `serve --repo . --path examples-repo`
on a fresh clone turns every example into real processes, contained by bubblewrap, that
reach Succeeded, with outputs and hashes visible to `get` and `describe`; SIGTERM stops
it cleanly."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.fixtures_git import git

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clone_with_examples(tmp: Path) -> Path:
    """A fresh clone of this repository whose examples-repo/ is the working tree's
    (committed or not), as a new user's clone would have it."""
    clone = tmp / "clone"
    git("clone", "--quiet", ROOT, clone)
    git("-C", clone, "rm", "-r", "--quiet", "--ignore-unmatch", "examples-repo")
    subprocess.run(["cp", "-r", str(ROOT / "examples-repo"), str(clone)], check=True)
    git("-C", clone, "add", "examples-repo")
    git("-C", clone, "-c", "user.name=t", "-c", "user.email=t@e", "commit", "--quiet",
        "--allow-empty", "-m", "examples as in the working tree")
    return clone


def serve_until(command: list[str], cwd: Path, env: dict[str, str], port: int,
                finished: Callable[[list[dict]], bool], seconds: float,
                while_serving: Callable[[], None] | None = None) -> list[dict]:
    """Run `serve` (`command`, listening on `port`) until `finished` holds for the API's
    resources (or `seconds` passed), call `while_serving`, then stop it with SIGTERM: it
    must exit 0 without a traceback. The resources it served last."""
    server = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    rows: list[dict] = []
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                rows = httpx.get(f"http://127.0.0.1:{port}/api/v1/resources", timeout=5).json()
            except httpx.HTTPError:
                rows = []
            if finished(rows):
                break
            assert server.poll() is None, server.stdout.read()  # type: ignore[union-attr]
            time.sleep(0.5)
        if while_serving is not None:
            while_serving()
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            out, _ = server.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            raise
    assert server.returncode == 0 and "Traceback" not in out, out
    return rows


def test_serve_runs_every_example_to_succeeded(tmp_path: Path) -> None:
    clone = clone_with_examples(tmp_path)
    port = free_port()
    env = {**os.environ, "NODUS_GITOPS_HOME": str(tmp_path / "state")}

    def dashboard_up() -> None:
        page = httpx.get(f"http://127.0.0.1:{port}/", timeout=5)
        assert page.status_code == 200 and "examples-repo" in page.text

    resources = serve_until(
        [sys.executable, "-P", "-m", "nodus_gitops.cli", "serve", "--repo", ".", "--path",
         "examples-repo", "--listen", f"127.0.0.1:{port}", "--interval", "1s"], clone, env,
        port, lambda rows: len(rows) == 4 and all(r["phase"] == "Succeeded" for r in rows),
        120, dashboard_up)
    assert {(r["kind"], r["name"], r["phase"]) for r in resources} == {
        ("Job", "hello", "Succeeded"), ("Job", "indexed-outputs", "Succeeded"),
        ("Pipeline", "train-eval", "Succeeded"), ("Sweep", "batch-size", "Succeeded")}

    cli = [sys.executable, "-P", "-m", "nodus_gitops.cli"]
    got = subprocess.run([*cli, "get", "-o", "json"], cwd=clone, env=env, text=True,
                         capture_output=True, check=True)
    by_name = {o["name"]: o for o in json.loads(got.stdout)}
    if shutil.which("bwrap"):  # every example ran contained, none of them knowing it
        for name in ("hello", "indexed-outputs"):
            assert by_name[name]["status"]["sandbox"] == "bubblewrap", by_name[name]["status"]
    report = by_name["hello"]["status"]["outputs"]["report"]
    assert report["size"] > 0 and len(report["sha256"]) == 64
    assert by_name["indexed-outputs"]["status"]["completedIndexes"] == "0-3"
    assert [s["phase"] for s in by_name["train-eval"]["status"]["stages"]] == ["Succeeded"] * 3
    sweep = by_name["batch-size"]["status"]
    assert len(sweep["cells"]) == 6 and {"byCost", "byThroughput"} <= set(sweep["best"])
    described = subprocess.run([*cli, "describe", "job/hello"], cwd=clone, env=env, text=True,
                               capture_output=True, check=True).stdout
    assert report["sha256"] in described
    copied = subprocess.run([*cli, "cp", "job/hello:outputs/report", str(tmp_path / "r.json")],
                            cwd=clone, env=env, text=True, capture_output=True, check=True)
    assert report["sha256"][:12] in copied.stdout
    assert json.loads((tmp_path / "r.json").read_text())["index"] == "0"
