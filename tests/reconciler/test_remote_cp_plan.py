"""Remote mode for `cp` and `plan`: real Jobs run to the end on the local backend, then a
real server over the same state answers `cp --server` with the stored output (checked
on both ends against the SHA-256 recorded when the Job finished) and `plan --server`
with the plan the local `plan` prints, masked as the dashboard masks."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from nodus_gitops.config import load_settings
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.remote import Client, RemoteError
from nodus_gitops.remote_copy import copy_remote_output
from nodus_gitops.state.store import Store
from nodus_gitops.web.server import start_server
from nodus_gitops.wiring import build_service

from tests.support.local_runs import stop_local_runs

ROOT = Path(__file__).resolve().parents[2]
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@e", "-c", "init.defaultBranch=main"]
TOKEN = "t0ken-for-cp"

MANIFESTS = """\
apiVersion: nodus.dev/v1
kind: Job
metadata:
  name: report
spec:
  command: [sh, -c, "printf '{\\"loss\\": 0.1}' > $NODUS_OUTPUTS_DIR/report.json;
    mkdir -p $NODUS_OUTPUTS_DIR/shards/deep; echo a > $NODUS_OUTPUTS_DIR/shards/a;
    echo b > $NODUS_OUTPUTS_DIR/shards/deep/b"]
  outputs:
    - {name: report, path: /nodus/outputs/report.json}
    - {name: shards, path: /nodus/outputs/shards}
---
apiVersion: nodus.dev/v1
kind: Pipeline
metadata:
  name: te
spec:
  stages:
    - name: prep
      template:
        command: [sh, -c, "printf rows > $NODUS_OUTPUTS_DIR/data.txt"]
        outputs: [{name: data, path: /nodus/outputs/data.txt}]
"""


@dataclass
class Served:
    config: Path
    repo: Path
    state: Path
    url: str


def cli(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("NODUS_GITOPS_")}
    return subprocess.run([sys.executable, "-m", "nodus_gitops.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300, env={**environ, **env})


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("remote-cp")
    repo = tmp / "repo"
    repo.mkdir()
    (repo / "all.yaml").write_text(MANIFESTS)
    subprocess.run([*GIT, "init", "-q", str(repo)], check=True)
    subprocess.run([*GIT, "-C", str(repo), "add", "."], check=True)
    subprocess.run([*GIT, "-C", str(repo), "commit", "-qm", "outputs"], check=True)
    config = tmp / "config.yaml"
    config.write_text(f"stateDir: {tmp / 'state'}\n"
                      f"repos:\n  - {{id: c, url: {repo}, project: a}}\n"
                      "providers:\n  local: {type: local, network: none}\n"
                      "checks: {gitnotes: false}\n"
                      f"dashboard: {{token: {TOKEN}}}\n")
    try:
        done = cli("reconcile", "--timeout", "240", "--config", str(config), cwd=tmp)
        assert "Traceback" not in done.stderr and done.returncode == 0, done.stdout + done.stderr
        settings = load_settings(str(config))
        store = Store.open(state_dir=settings.state_dir)
        stop = start_server(build_service(settings, store), "127.0.0.1:0")
        host, port = stop.address  # type: ignore[attr-defined]
        try:
            yield Served(config, repo, tmp / "state", f"http://{host}:{port}")
        finally:
            stop()
            store.close()
    finally:
        stop_local_runs(tmp / "state" / "local")


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file()}


@pytest.mark.parametrize("source, dest", [("job/report:outputs/report", "report.json"),
                                          ("job/report:outputs/shards", "shards"),
                                          ("job/te-prep:outputs/data", "data.txt")])
def test_cp_from_a_server_writes_what_the_local_cp_writes(
        served: Served, tmp_path: Path, source: str, dest: str) -> None:
    (tmp_path / "local").mkdir()
    (tmp_path / "remote").mkdir()
    local = cli("cp", source, "local", "--config", str(served.config), cwd=tmp_path)
    remote = cli("cp", source, "remote", "--server", served.url, cwd=tmp_path,
                 NODUS_GITOPS_TOKEN=TOKEN)
    assert local.returncode == remote.returncode == 0, (local.stderr, remote.stderr)
    assert remote.stdout.replace("remote/", "local/") == local.stdout
    written = tmp_path / "remote" / dest
    assert written.exists()
    if written.is_dir():
        assert _tree(written) == _tree(tmp_path / "local" / dest)
        assert _tree(written) == {"a": b"a\n", "deep/b": b"b\n"}
    else:
        assert written.read_bytes() == (tmp_path / "local" / dest).read_bytes()
    # no partial copy left beside it
    assert sorted(p.name for p in (tmp_path / "remote").iterdir()) == [dest]


def test_cp_needs_the_dashboards_token(served: Served, tmp_path: Path) -> None:
    done = cli("cp", "job/report:outputs/report", "out", "--server", served.url, cwd=tmp_path)
    assert done.returncode == 4 and "set NODUS_GITOPS_TOKEN" in done.stderr
    assert not (tmp_path / "out").exists()


def test_a_server_without_a_login_sends_no_output(served: Served, tmp_path: Path) -> None:
    settings = load_settings(str(served.config))
    object.__setattr__(settings, "dashboard", {})
    with Store.open(state_dir=settings.state_dir) as store:
        stop = start_server(build_service(settings, store), "127.0.0.1:0")
        host, port = stop.address  # type: ignore[attr-defined]
        try:
            done = cli("cp", "job/report:outputs/report", "out", "--server",
                       f"http://{host}:{port}", cwd=tmp_path)
        finally:
            stop()
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert "answered 403" in line and "dashboard.tokenEnv" in line
    assert not (tmp_path / "out").exists()


def test_an_output_the_server_lacks_is_one_line(served: Served, tmp_path: Path) -> None:
    done = cli("cp", "job/report:outputs/nope", "out", "--server", served.url, cwd=tmp_path,
               NODUS_GITOPS_TOKEN=TOKEN)
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert "no stored output 'nope'" in line and "report, shards" in line


def test_an_output_that_no_longer_matches_its_record_is_refused(served: Served,
                                                               tmp_path: Path) -> None:
    """The server checks its copy against the recorded digest before sending any of it
    (here the record is what changed: the stored bytes lie in the Job's own filesystem)."""
    run = next((served.state / "local").glob("*/report"))
    original = (run / "status.json").read_text()
    status = json.loads(original)
    assert status["outputs"]["report"]["sha256"] == hashlib.sha256(b'{"loss": 0.1}').hexdigest()
    status["outputs"]["report"]["sha256"] = hashlib.sha256(b"something else").hexdigest()
    try:
        (run / "status.json").write_text(json.dumps(status))
        done = cli("cp", "job/report:outputs/report", "out", "--server", served.url,
                   cwd=tmp_path, NODUS_GITOPS_TOKEN=TOKEN)
    finally:
        (run / "status.json").write_text(original)
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert "answered 409" in line and "does not match the recorded" in line
    assert not (tmp_path / "out").exists()


class _Tampering(http.server.BaseHTTPRequestHandler):
    """A server that sends other bytes than the digest it names (a proxy that changed
    them, a truncated transfer)."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = b"not the report"
        self.send_response(200)
        self.send_header("X-Nodus-Output-Sha256", hashlib.sha256(b"the report").hexdigest())
        self.send_header("X-Nodus-Output-Type", "file")
        self.send_header("X-Nodus-Output-Name", "report.json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


def test_bytes_that_do_not_match_the_recorded_digest_are_not_written(tmp_path: Path) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Tampering)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = Client(f"http://127.0.0.1:{server.server_address[1]}")
        with pytest.raises(RemoteError, match="not the recorded"):
            copy_remote_output(client, ResourceKey("Job", "a", "report"), "report",
                               tmp_path / "report.json")
    finally:
        server.shutdown()
    assert list(tmp_path.iterdir()) == []


def _commit(repo: Path, text: str, message: str) -> str:
    (repo / "all.yaml").write_text(text)
    subprocess.run([*GIT, "-C", str(repo), "commit", "-qam", message], check=True)
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()


def test_plan_from_a_server_prints_what_the_local_plan_prints(served: Served,
                                                              tmp_path: Path) -> None:
    env = {"NODUS_GITOPS_TOKEN": TOKEN}
    for output in ("text", "json"):
        local = cli("plan", "--config", str(served.config), "-o", output, cwd=tmp_path)
        remote = cli("plan", "--server", served.url, "-o", output, cwd=tmp_path, **env)
        assert local.returncode == remote.returncode == 0, (local.stderr, remote.stderr)
        assert remote.stdout == local.stdout
    secret = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
    head = _commit(served.repo, MANIFESTS.replace(
        "  name: report\n", f"  name: report\n  annotations: {{note: {secret}}}\n"),
        "a note on the report")
    try:
        local = cli("plan", "--config", str(served.config), cwd=tmp_path)
        remote = cli("plan", "--server", served.url, "--binding", "c", cwd=tmp_path, **env)
        # a finished run is not patched (noop, exit 0), and the plan shows what changed
        assert local.returncode == remote.returncode == 0, (local.stderr, remote.stderr)
        assert f"Plan for commit {head[:12]}" in remote.stdout
        assert "Job/report" in remote.stdout and "metadata.annotations:" in remote.stdout
        # the secret is the one difference: shown where the repository is, masked remotely
        assert secret in local.stdout
        assert secret not in remote.stdout
        assert (_unmasked(remote.stdout, local.stdout, secret).splitlines()
                == local.stdout.splitlines())
        remote_json = cli("plan", "--server", served.url, "-o", "json", cwd=tmp_path, **env)
        assert remote_json.returncode == 0 and f'"commit": "{head}"' in remote_json.stdout
        assert secret not in remote_json.stdout
        # an older commit by its SHA, as locally
        old = subprocess.run(["git", "-C", str(served.repo), "rev-parse", "HEAD~1"],
                             check=True, capture_output=True, text=True).stdout.strip()
        remote_old = cli("plan", "--server", served.url, "--ref", old, cwd=tmp_path, **env)
        assert remote_old.returncode == 0, remote_old.stderr
        # changes pending: exit 2 on both, the same text
        _commit(served.repo, MANIFESTS + "---\napiVersion: nodus.dev/v1\nkind: Job\n"
                "metadata: {name: extra}\nspec:\n  command: [echo, hi]\n", "one more Job")
        local = cli("plan", "--config", str(served.config), cwd=tmp_path)
        remote = cli("plan", "--server", served.url, cwd=tmp_path, **env)
        assert local.returncode == remote.returncode == 2, (local.stderr, remote.stderr)
        assert remote.stdout == local.stdout and "create   Job/extra" in remote.stdout
    finally:
        subprocess.run([*GIT, "-C", str(served.repo), "reset", "-q", "--hard", old],
                       check=True)


def _unmasked(remote: str, local: str, secret: str) -> str:
    """`remote` with each masked line replaced by the local line it stands for."""
    lines = []
    for r, line in zip(remote.splitlines(), local.splitlines(), strict=True):
        lines.append(line if r != line and secret in line else r)
    return "\n".join(lines)


@pytest.mark.parametrize("args, code, said", [
    (["--repo", "."], 2, "--repo: with --server the server plans a binding it serves"),
    (["--binding", "zzz"], 1, "no repo binding 'zzz'"),
    (["--ref", "no-such-branch"], 1, "ref 'no-such-branch' not found"),
    (["--ref=--upload-pack=touch /tmp/x"], 1, "is not a branch, tag, SHA or ref name"),
])
def test_what_a_server_cannot_plan_is_one_line(served: Served, tmp_path: Path,
                                               args: list[str], code: int, said: str) -> None:
    done = cli("plan", "--server", served.url, *args, cwd=tmp_path,
               NODUS_GITOPS_TOKEN=TOKEN)
    assert done.returncode == code, done.stderr
    [line] = done.stderr.splitlines()
    assert said in line


def test_the_plan_endpoint_refuses_other_sites_and_gets(served: Served) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=served.url, timeout=60) as http:
        assert http.post("/api/v1/repos/c/plan").status_code == 401
        refused = http.post("/api/v1/repos/c/plan", headers={
            **auth, "Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"})
        assert refused.status_code == 403
        assert http.get("/api/v1/repos/c/plan", headers=auth).status_code == 405
        answer = http.post("/api/v1/repos/c/plan", headers=auth)
        assert answer.status_code == 200
        assert set(answer.json()) == {"binding", "commit", "exitCode", "text", "json"}
