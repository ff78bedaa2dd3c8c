"""A real `nodus-gitops serve` logs JSON only, one object a line, whatever its clients do:
a page read, a request line that is not HTTP, clients that reset half-way through their
headers, and the stop on SIGTERM. Nothing in plain text on stdout or stderr (no server
banner, no traceback)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.fixtures_git import ManifestRepo
from tests.test_quickstart import free_port
from tests.web.test_server_slow_clients import abort

RESETS = 50


def test_serve_writes_json_lines_only(tmp_path: Path) -> None:
    repo = ManifestRepo(tmp_path / "remote", "manifests", tmp_path / "work")
    repo.write("README.md", "no manifests yet\n")
    repo.commit("start")
    repo.push()
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-P", "-m", "nodus_gitops.cli", "serve", "--repo", str(repo.bare),
         "--path", "manifests", "--listen", f"127.0.0.1:{port}", "--interval", "1s"],
        cwd=tmp_path, env={**os.environ, "NODUS_GITOPS_HOME": str(tmp_path / "state")},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                page = httpx.get(f"http://127.0.0.1:{port}/", timeout=5)
                break
            except httpx.TransportError:
                assert server.poll() is None, server.communicate()
                assert time.monotonic() < deadline, "serve never answered"
                time.sleep(0.1)
        assert page.status_code == 200
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
            assert b"400" in sock.recv(65536)  # a Bad Request, in any shape
        for _ in range(RESETS):
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX")
            abort(sock)
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            out, err = server.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            raise
    assert server.returncode == 0, err
    lines = [line for line in (out + err).splitlines() if line.strip()]
    assert lines, "serve logged nothing"
    for line in lines:
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            raise AssertionError(f"not a JSON line: {line!r}") from None
        assert isinstance(entry, dict) and {"time", "level", "logger", "message"} <= set(entry)
    messages = [json.loads(line)["message"] for line in lines]
    assert "serving" in messages
