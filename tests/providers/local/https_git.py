"""Git over HTTPS on 127.0.0.1 for source.git tests: the smart-HTTP server of
tests/fixtures_git.py behind TLS, with a self-signed certificate made by openssl."""

from __future__ import annotations

import ssl
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fixtures_git import _Server, git


@dataclass
class HttpsGit:
    root: Path
    port: int
    ca: Path  # the certificate, which is its own CA

    def url_for(self, name: str) -> str:
        return f"https://127.0.0.1:{self.port}/{name}.git"

    def repo(self, name: str, files: dict[str, str], work: Path) -> str:
        """A served repository with one commit of `files`; returns the commit id."""
        bare = self.root / f"{name}.git"
        git("init", "--quiet", "--bare", bare)
        git("init", "--quiet", "-b", "main", work)
        for path, text in files.items():
            (work / path).parent.mkdir(parents=True, exist_ok=True)
            (work / path).write_text(text)
        git("add", "--all", cwd=work)
        git("commit", "--quiet", "-m", "files", cwd=work)
        git("push", "--quiet", str(bare), "HEAD:refs/heads/main", cwd=work)
        return git("rev-parse", "HEAD", cwd=work)


def _certificate(where: Path) -> tuple[Path, Path]:
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    cert.chmod(0o644)
    return cert, key


@pytest.fixture
def https_git(tmp_path: Path) -> Iterator[HttpsGit]:
    tls = tmp_path / "tls"
    tls.mkdir()
    cert, key = _certificate(tls)
    root = tmp_path / "https-srv"
    root.mkdir()
    server = _Server(root, None)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02},
                              daemon=True)
    thread.start()
    try:
        yield HttpsGit(root, server.server_address[1], cert)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
