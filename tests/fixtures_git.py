"""Real Git servers for tests: smart HTTP via `git http-backend`, git:// via `git daemon`.

Loaded as a pytest plugin by tests/conftest.py. Everything binds to 127.0.0.1 on a free
port and is stopped by the fixture that started it; nothing here is mocked.
"""

from __future__ import annotations

import base64
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

HTTP_BACKEND = "/usr/lib/git-core/git-http-backend"
GIT = shutil.which("git") or "git"
# Identity and isolation for every git CLI call the tests make.
_GIT_ID = ["-c", "user.name=t", "-c", "user.email=t@e", "-c", "init.defaultBranch=main"]


class _GitHttpHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as libgit2 expects
    disable_nagle_algorithm = True  # FINDINGS: libgit2 loses ~40 ms a fetch otherwise
    server: _Server

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self._cgi(b"")

    def do_POST(self) -> None:  # noqa: N802
        self._cgi(self._read_body())

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass  # keep pytest output clean

    def _read_body(self) -> bytes:
        # libgit2 writes a POST's headers and body separately; ACK the headers now, or its
        # Nagle waits out our delayed ACK (~40 ms) before sending the body.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            # libgit2 pushes chunked; a CGI needs a plain body with a length.
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()  # the CRLF after each chunk
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _authorized_user(self) -> str | None:
        """The user name when auth passes (or "" when the server has none), else None."""
        if self.server.auth is None:
            return ""
        header = self.headers.get("Authorization", "")
        if not header.startswith("Basic "):
            return None
        try:
            user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        except ValueError:
            return None
        return user if (user, password) == self.server.auth else None

    def _cgi(self, body: bytes) -> None:
        started = time.perf_counter()
        try:
            self._answer(body)
        finally:
            with self.server.counting:
                self.server.busy_seconds += time.perf_counter() - started

    def _answer(self, body: bytes) -> None:
        with self.server.counting:
            self.server.requests += 1
        user = self._authorized_user()
        if user is None:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        path, _, query = self.path.partition("?")
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": str(self.server.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "GIT_CONFIG_NOSYSTEM": "1",
            "HOME": str(self.server.root),
            # Let pushes in with or without a REMOTE_USER.
            "GIT_CONFIG_COUNT": "1",
            "GIT_CONFIG_KEY_0": "http.receivepack",
            "GIT_CONFIG_VALUE_0": "true",
            "GATEWAY_INTERFACE": "CGI/1.1",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_USER": user,
            "REMOTE_ADDR": self.client_address[0],
        }
        for header, var in (
            ("Content-Encoding", "HTTP_CONTENT_ENCODING"),
            ("Git-Protocol", "HTTP_GIT_PROTOCOL"),
        ):
            if header in self.headers:
                env[var] = self.headers[header]
        out = subprocess.run(
            [HTTP_BACKEND], input=body, env=env, capture_output=True, check=False
        ).stdout
        head, _, payload = out.partition(b"\r\n\r\n")  # http-backend ends lines with CRLF
        status, headers = 200, []
        for line in head.decode("latin-1").splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.split()[0])
            elif name:
                headers.append((name, value.strip()))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, root: Path, auth: tuple[str, str] | None) -> None:
        super().__init__(("127.0.0.1", 0), _GitHttpHandler)
        self.root = root
        self.auth = auth
        self.counting = threading.Lock()  # requests are answered on threads of their own
        self.requests = 0
        self.busy_seconds = 0.0  # spent answering requests (git http-backend included)


class GitHttpServer:
    """Serves every bare repo under `root` at http://127.0.0.1:PORT/<name>.git."""

    def __init__(self, root: Path, auth: tuple[str, str] | None = None) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self._server = _Server(root, auth)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )  # shutdown() waits up to one poll interval
        self._thread.start()

    @property
    def requests(self) -> int:
        """How many HTTP requests the server has answered (a cost meter for tests)."""
        return self._server.requests

    @property
    def busy_seconds(self) -> float:
        """Time spent answering requests, to tell the server's share of a client's wait."""
        return self._server.busy_seconds

    def url_for(self, name: str) -> str:
        name = name if name.endswith(".git") else f"{name}.git"
        return f"http://127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


@contextmanager
def serve_git_http(root: Path, auth: tuple[str, str] | None = None) -> Iterator[GitHttpServer]:
    server = GitHttpServer(root, auth)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def git_http_server(tmp_path: Path) -> Iterator[GitHttpServer]:
    with serve_git_http(tmp_path / "srv") as server:
        yield server


def git(*args: str | Path, cwd: Path | None = None) -> str:
    """Run the git CLI (tests only) and return its stripped stdout."""
    done = subprocess.run(
        [GIT, *_GIT_ID, *map(str, args)], cwd=cwd, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise AssertionError(f"git {' '.join(map(str, args))} failed: {done.stderr}")
    return done.stdout.strip()


class ManifestRepo:
    """A bare repo `<root>/<name>.git` plus a work clone that tests edit, commit and push."""

    def __init__(self, root: Path, name: str, work: Path, push_url: str | None = None) -> None:
        self.bare = root / f"{name}.git"
        self.work = work
        self.branch = "main"
        self.push_url = push_url or str(self.bare)
        git("init", "--quiet", "--bare", self.bare)
        git("init", "--quiet", work)
        git("remote", "add", "origin", push_url or self.bare, cwd=work)

    def write(self, path: str, text: str) -> None:
        target = self.work / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)

    def remove(self, path: str) -> None:
        git("rm", "--quiet", path, cwd=self.work)

    def rename(self, old: str, new: str) -> None:
        (self.work / new).parent.mkdir(parents=True, exist_ok=True)
        git("mv", old, new, cwd=self.work)

    def commit(self, message: str = "change") -> str:
        git("add", "--all", cwd=self.work)
        git("commit", "--quiet", "--allow-empty", "-m", message, cwd=self.work)
        return self.head()

    def head(self) -> str:
        return git("rev-parse", "HEAD", cwd=self.work)

    def push(self, force: bool = False) -> None:
        git("push", "--quiet", *(["--force"] if force else []), "origin",
            f"HEAD:refs/heads/{self.branch}", cwd=self.work)

    def reset_hard_to_new_history(self, files: dict[str, str] | None = None) -> str:
        """Replace the branch with one unrelated root commit; push(force=True) to publish."""
        git("checkout", "--quiet", "--orphan", "new-history", cwd=self.work)
        git("rm", "--quiet", "-r", "-f", "--ignore-unmatch", ".", cwd=self.work)
        for path, text in (files or {"jobs/rewritten.yaml": "kind: Job\n"}).items():
            self.write(path, text)
        sha = self.commit("new history")
        git("branch", "--quiet", "-M", self.branch, cwd=self.work)
        return sha


@pytest.fixture
def manifest_repo(git_http_server: GitHttpServer, tmp_path: Path) -> ManifestRepo:
    """An empty manifests repo served by `git_http_server`; pushes go over HTTP."""
    return ManifestRepo(git_http_server.root, "manifests", tmp_path / "work",
                        push_url=git_http_server.url_for("manifests"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def git_daemon(git_http_server: GitHttpServer) -> Iterator[str]:
    """git:// over the same root as `git_http_server`; yields the base URL (no slash)."""
    port = _free_port()
    proc = subprocess.Popen(
        [GIT, "daemon", "--listen=127.0.0.1", f"--port={port}", "--export-all",
         "--reuseaddr", f"--base-path={git_http_server.root}", str(git_http_server.root)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("git daemon did not start") from None
                time.sleep(0.05)
        yield f"git://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)

