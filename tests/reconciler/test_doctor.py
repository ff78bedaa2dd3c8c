"""`nodus-gitops doctor` as people run it: on this machine (real bubblewrap, slirp4netns,
Landlock, loop devices), against a real Git server, real SQLite and PostgreSQL. Every
line is a check (`ok`, `note` or `FAIL`, its name, what was seen), a failure's fix on the
line under it; it exits 1 when anything fails, and never creates or migrates a state."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from nodus_gitops.cli import main
from nodus_gitops.providers.local import hostcheck, limits
from nodus_gitops.state.migrations import head
from nodus_gitops.state.store import Store
from sqlalchemy import create_engine, inspect

from tests.fixtures_git import GitHttpServer, ManifestRepo

ROOT = Path(__file__).resolve().parents[2]
LOCAL_CHECKS = ("bubblewrap", "user namespaces", "slirp4netns", "tun device", "Landlock",
                "disk limit", "memory cgroup", "run user", "disk space", "inodes",
                "local backend can run Jobs")
COMMON_CHECKS = ("config", "state directory", "state database", "git", "libgit2")
LINE = re.compile(r"^(ok  |note|FAIL) [^:]+: \S")


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """This process's environment without a nodus-gitops setting or a user config."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NODUS_GITOPS_")}
    return {**env, "XDG_CONFIG_HOME": str(tmp_path / "xdg"), "HOME": str(tmp_path), **extra}


def doctor(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nodus_gitops.cli", "doctor", *args],
                          cwd=tmp_path, env=_env(tmp_path, **env), capture_output=True,
                          text=True, timeout=300)


def lines_of(out: str) -> dict[str, tuple[str, str | None]]:
    """Each check's line by its name, with the fix line under it (or None)."""
    lines = out.splitlines()
    found = {}
    for i, line in enumerate(lines):
        if LINE.match(line):
            name = line[5:].split(": ", 1)[0]
            fix = lines[i + 1] if i + 1 < len(lines) and lines[i + 1].startswith("  fix: ") \
                else None
            found[name] = (line, fix)
    return found


def pushed(repo: ManifestRepo) -> ManifestRepo:
    repo.write("jobs/hello.yaml", "apiVersion: nodus.dev/v1\nkind: Job\nmetadata:\n"
               "  name: hello\nspec:\n  command: [python3, -c, pass]\n")
    repo.commit("hello")
    repo.push()
    return repo




def test_doctor_passes_on_this_machine_with_every_check(manifest_repo, tmp_path) -> None:
    url = pushed(manifest_repo).push_url
    state = tmp_path / "state"
    done = doctor(tmp_path, "--state-dir", str(state), "--repo", url, "--branch", "main")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    found = lines_of(done.stdout)
    binding = next(n for n in found if n.startswith("remote "))
    for name in (*COMMON_CHECKS, *LOCAL_CHECKS, binding):
        assert name in found, (name, done.stdout)
        assert not found[name][0].startswith("FAIL"), found[name]
    assert f"branch main at {manifest_repo.head()[:12]}" in found[binding][0]
    for line in done.stdout.splitlines():  # a check, or the fix under one: nothing else
        assert LINE.match(line) or line.startswith("  fix: "), line
    assert done.stdout.splitlines()[-1].startswith("ok   local backend can run Jobs: ")
    assert not state.exists(), "doctor made the state directory"


def test_json_report_has_every_check_with_its_fields(manifest_repo, tmp_path) -> None:
    url = pushed(manifest_repo).push_url
    done = doctor(tmp_path, "--state-dir", str(tmp_path / "s"), "--repo", url, "-o", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is True
    names = {c["name"] for c in report["checks"]}
    assert set(COMMON_CHECKS) | set(LOCAL_CHECKS) <= names
    for check in report["checks"]:
        assert {"name", "ok", "seen", "problem", "fix", "group"} <= set(check), check
        assert check["ok"] is (check["problem"] is None)
    groups = {c["name"]: c["group"] for c in report["checks"]}
    assert groups["bubblewrap"] == "local" and groups["state database"] == "state"


def test_a_binding_whose_remote_does_not_exist_fails_that_check(
        git_http_server: GitHttpServer, manifest_repo, tmp_path) -> None:
    missing = git_http_server.url_for("no-such-repo")
    done = doctor(tmp_path, "--state-dir", str(tmp_path / "s"), "--repo", missing)
    assert done.returncode == 1, done.stdout + done.stderr
    found = lines_of(done.stdout)
    [(line, fix)] = [v for n, v in found.items() if n.startswith("remote ")]
    assert line.startswith("FAIL remote ") and missing in line, line
    assert fix and "--repo" in fix, fix
    assert found["local backend can run Jobs"][0].startswith("ok "), done.stdout

    url = pushed(manifest_repo).push_url  # the repository exists, the branch does not
    done = doctor(tmp_path, "--state-dir", str(tmp_path / "s"), "--repo", url,
                  "--branch", "no-such-branch")
    assert done.returncode == 1
    [(line, fix)] = [v for n, v in lines_of(done.stdout).items() if n.startswith("remote ")]
    assert line.startswith("FAIL ") and "branch 'no-such-branch' not found" in line, line


def test_a_password_in_a_remote_url_is_never_shown(manifest_repo, tmp_path) -> None:
    url = pushed(manifest_repo).push_url.replace("http://", "http://someone:pw-4-the-repo@")
    done = doctor(tmp_path, "--state-dir", str(tmp_path / "s"), "--repo", url, "-o", "json")
    assert "pw-4-the-repo" not in done.stdout + done.stderr
    assert done.returncode == 0, done.stdout


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the socket is


def test_postgresql_at_a_closed_port_fails_the_store_naming_the_setting(tmp_path) -> None:
    url = f"postgresql+psycopg://nodus:s3cret-pg-pw@127.0.0.1:{_closed_port()}/test"
    done = doctor(tmp_path, "--state-dir", str(tmp_path / "s"), "--state", url)
    assert done.returncode == 1, done.stdout + done.stderr
    line, fix = lines_of(done.stdout)["state database"]
    assert line.startswith("FAIL state database: ") and "127.0.0.1" in line, line
    assert fix and "--state" in fix, fix
    assert "s3cret-pg-pw" not in done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def test_postgresql_reachable_is_read_never_migrated(pg_state_url, isolated, capsys) -> None:
    args = ["doctor", "--state-dir", str(isolated / "s"), "--state", pg_state_url]
    assert main(args) == 0
    line, _ = lines_of(capsys.readouterr().out)["state database"]
    assert line.startswith("ok   state database: ") and "empty" in line, line
    engine = create_engine(pg_state_url)
    try:
        with engine.connect() as conn:
            assert inspect(conn).get_table_names() == [], "doctor created tables"
    finally:
        engine.dispose()

    Store.open(pg_state_url).close()  # what serve does: migrate to head
    assert main(args) == 0
    line, _ = lines_of(capsys.readouterr().out)["state database"]
    assert line.startswith("ok   ") and f"schema revision {head()}" in line, line


def test_sqlite_state_shows_its_schema_revision(isolated, capsys) -> None:
    state = isolated / "s"
    assert main(["doctor", "--state-dir", str(state)]) == 0
    out = capsys.readouterr().out
    assert "none yet" in lines_of(out)["state database"][0], out
    assert not state.exists()

    Store.open(None, state).close()
    assert main(["doctor", "--state-dir", str(state), "-o", "json"]) == 0
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert f"schema revision {head()}" in checks["state database"]["seen"]
    assert "writable" in checks["state directory"]["seen"]


def test_without_bubblewrap_it_fails_with_the_hosts_cause_and_fix(tmp_path) -> None:
    """PATH holds only git and python: the line, its fix and the verdict are hostcheck's,
    as a Job's SandboxUnavailable message is."""
    only = Path(tempfile.mkdtemp(prefix="nodus-no-bwrap-", dir=tmp_path))
    (only / "git").symlink_to("/usr/bin/git")
    (only / "python3").symlink_to(sys.executable)
    done = doctor(tmp_path, "--state-dir", str(tmp_path / "s"), PATH=str(only))
    assert done.returncode == 1, done.stdout + done.stderr
    missing = hostcheck.bubblewrap(None)
    found = lines_of(done.stdout)
    line, fix = found["bubblewrap"]
    assert line == f"FAIL bubblewrap: not installed: {missing.problem}", line
    assert fix == f"  fix: {missing.fix}"
    line, fix = found["local backend can run Jobs"]
    assert line.startswith("FAIL ") and missing.problem in line, line
    assert fix == f"  fix: {missing.fix}"
    assert found["git"][0].startswith("ok   git: git version"), found["git"]
    assert "Traceback" not in done.stderr


def test_a_check_that_breaks_is_that_checks_failure(isolated, capsys, monkeypatch) -> None:
    def broken() -> None:
        raise RuntimeError("the memory controller exploded")

    monkeypatch.setattr(limits, "cgroup_parent", broken)
    assert main(["doctor", "--state-dir", str(isolated / "s")]) == 1
    out = capsys.readouterr().out
    line, fix = lines_of(out)["memory cgroup"]
    assert line.startswith("FAIL ") and "the memory controller exploded" in line, line
    assert fix is not None
    assert lines_of(out)["local backend can run Jobs"][0].startswith("ok ")


def test_a_config_that_cannot_be_read_is_a_failed_check(isolated, capsys) -> None:
    config = isolated / "config.yaml"
    config.write_text("repos:\n  - id: a\n    url: x\n    coments: true\n")
    assert main(["doctor", "--config", str(config)]) == 1
    line, fix = lines_of(capsys.readouterr().out)["config"]
    assert line.startswith("FAIL config: ") and "coments" in line, line
    assert fix is not None


def test_a_local_setting_that_cannot_work_names_the_setting(isolated, capsys) -> None:
    config = isolated / "config.yaml"
    config.write_text("providers:\n  local:\n    type: local\n    network: everywhere\n")
    assert main(["doctor", "--config", str(config), "--state-dir", str(isolated / "s")]) == 1
    line, fix = lines_of(capsys.readouterr().out)["local backend can run Jobs"]
    assert line.startswith("FAIL ") and "providers.local.network: 'everywhere'" in line, line
    assert fix is not None
