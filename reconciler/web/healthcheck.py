"""The container's health check: GET /healthz of the `serve` beside it, at the address
that `serve` bound, whichever setting chose it (`--listen`, NODUS_GITOPS_LISTEN or the
config's `listen`, port 0 included). `serve` writes that address to
`<state dir>/serve.address` once it listens and removes it when it stops.

Standard library only, so it starts in tens of milliseconds. Exit 0 when healthy, else 1
with one line saying why. Run: python -m nodus_gitops.web.healthcheck [STATE_DIR]
(default: $NODUS_GITOPS_HOME, else ./.nodus-gitops, as `serve` finds it).
"""

from __future__ import annotations

import os
import sys
import urllib.request
from pathlib import Path

ADDRESS_FILE = "serve.address"
_ANY = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}  # a wildcard bind: probe here


def publish(state_dir: Path, host: str, port: int) -> Path:
    """Record where `serve` listens (written whole, then renamed: a probe never reads
    half of it)."""
    path = Path(state_dir) / ADDRESS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f".{ADDRESS_FILE}.{os.getpid()}")
    part.write_text(f"{host} {port}\n")
    part.replace(path)
    return path


def withdraw(path: Path, host: str, port: int) -> None:
    """Remove the record if it is still this server's (another may have started since)."""
    try:
        if path.read_text() == f"{host} {port}\n":
            path.unlink()
    except OSError:
        pass


def probe(state_dir: Path, timeout: float = 4.0) -> str | None:
    """None when the server recorded in `state_dir` answers /healthz with 200, else why not."""
    path = Path(state_dir) / ADDRESS_FILE
    try:
        host, port = path.read_text().split()
    except (OSError, ValueError):
        return f"no server address in {path}: is `nodus-gitops serve` running with this state dir?"
    host = _ANY.get(host, host)
    url = f"http://[{host}]:{port}/healthz" if ":" in host else f"http://{host}:{port}/healthz"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy
    try:
        with opener.open(url, timeout=timeout) as answer:
            return None if answer.status == 200 else f"{url} answered {answer.status}"
    except OSError as exc:  # URLError and HTTPError are OSErrors
        return f"{url}: {exc}"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    state_dir = Path(args[0] if args else os.environ.get("NODUS_GITOPS_HOME") or ".nodus-gitops")
    failure = probe(state_dir)
    if failure:
        print(f"unhealthy: {failure}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
