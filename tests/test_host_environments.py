"""The quick start on the hosts users really have, each simulated in a mount namespace of
the test's own (`tests.support.hostsim`), never by changing this machine's devices: the
user runs `serve` on the examples, then `get`, `describe` and `doctor`. Where the host can
contain runs, every example Succeeds; where it cannot, every Job fails SandboxUnavailable
with one message naming the real cause and a fix that keeps runs contained first, and
`doctor` names the same cause and exits 1."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.hostsim import HOSTSIM
from tests.test_quickstart import clone_with_examples, free_port, serve_until

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="simulating a host mounts: needs root"),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap"),
    pytest.mark.skipif(not os.path.exists("/dev/net/tun"), reason="no tun device to simulate"),
]
EXAMPLES = {("Job", "hello"), ("Job", "indexed-outputs"), ("Pipeline", "train-eval"),
            ("Sweep", "batch-size")}
NOBODY = "65534:65534"


@dataclass
class Host:
    """A simulated host (`hostsim` flags) and the quick start's clone and state on it."""

    flags: list[str]
    clone: Path
    env: dict[str, str]
    python: list[str]

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.command(*args), cwd=self.clone, env=self.env, text=True,
                              capture_output=True, timeout=timeout)

    def command(self, *args: str) -> list[str]:
        return [*HOSTSIM, *self.flags, "--",
                *self.python, *args]

    def serve_until_finished(self) -> list[dict]:
        """`serve` on the examples until every one ended; the API's rows."""
        port = free_port()
        return serve_until(
            self.command("serve", "--repo", ".", "--path", "examples-repo", "--listen",
                         f"127.0.0.1:{port}", "--interval", "1s"), self.clone, self.env, port,
            lambda rows: {(r["kind"], r["name"]) for r in rows} == EXAMPLES and all(
                r["phase"] in ("Succeeded", "Failed") for r in rows), 150)

    def jobs(self) -> dict[str, dict]:
        got = self.run("get", "jobs", "-o", "json")
        assert got.returncode == 0, got.stderr
        return {o["name"]: o for o in json.loads(got.stdout)}

    def doctor(self) -> tuple[int, dict]:
        done = self.run("doctor", "-o", "json")
        return done.returncode, json.loads(done.stdout)


@pytest.fixture
def host() -> Iterator[Callable[..., Host]]:
    made: list[Path] = []

    def make(*flags: str, user: str | None = None) -> Host:
        # under /tmp, not pytest's 0700 folder: an ordinary user must reach it
        where = Path(tempfile.mkdtemp(prefix="nodus-host-", dir="/tmp"))
        made.append(where)
        where.chmod(0o755)
        clone = clone_with_examples(where)
        env = {**os.environ, "NODUS_GITOPS_HOME": str(where / "state"), "HOME": str(where)}
        env.pop("NODUS_GITOPS_CONFIG", None)
        python = [sys.executable, "-P", "-m", "nodus_gitops.cli"]
        if user is not None:
            python = _python_for(user)
            uid, gid = (int(x) for x in user.split(":"))
            for path in (where, *where.rglob("*")):
                os.lchown(path, uid, gid)
        return Host([*flags, *(["--user", user] if user else [])], clone, env, python)

    yield make
    for where in made:
        shutil.rmtree(where, ignore_errors=True)


def _python_for(user: str) -> list[str]:
    """The CLI as an ordinary user can start it: this venv's interpreter may live under
    /root (0700), so Debian's Python 3.11 with this venv's packages added as a site."""
    site = sysconfig.get_paths()["purelib"]
    system = "/usr/bin/python3.11"
    probe = subprocess.run(
        [*HOSTSIM, "--user", user, "--", system,
         "-c", f"import site; site.addsitedir({site!r}); import nodus_gitops.cli"],
        capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"an ordinary user cannot start this checkout's CLI: {probe.stderr[-300:]}")
    return [system, "-c", f"import site, sys; site.addsitedir({site!r}); "
            "from nodus_gitops.cli import main; sys.exit(main())"]


def _failed_for_the_host(rows: list[dict], jobs: dict[str, dict]) -> list[dict]:
    """Every example ended Failed / SandboxUnavailable; the Jobs as `get` shows them (one
    message, one fix among them)."""
    assert {(r["kind"], r["name"], r["phase"]) for r in rows} == {
        (kind, name, "Failed") for kind, name in EXAMPLES}, rows
    statuses = [jobs[name] for name in ("hello", "indexed-outputs")]
    assert {s["reason"] for s in statuses} == {"SandboxUnavailable"}, statuses
    assert len({s["message"] for s in statuses}) == 1 and len({s["fix"] for s in statuses}) == 1
    return statuses


def _doctor_names(host: Host, problem: str, fix: str) -> None:
    code, report = host.doctor()
    assert code == 1 and report["ok"] is False, report
    failing = [c for c in report["checks"] if not c["ok"]]
    assert any(c["problem"] and c["problem"] in problem and c["fix"] == fix
               for c in failing), (problem, failing)


def test_a_tun_device_only_root_may_open_still_gives_every_run_its_network(host) -> None:
    """The default network (shared) where /dev/net/tun is `crw------- root root`, as this
    project's machines boot: the reconciler (root) opens the device for each run."""
    h = host("--tun", "0600")
    rows = h.serve_until_finished()
    assert {(r["kind"], r["name"], r["phase"]) for r in rows} == {
        (kind, name, "Succeeded") for kind, name in EXAMPLES}, rows
    assert h.jobs()["hello"]["status"]["sandbox"] == "bubblewrap"
    code, report = h.doctor()
    assert code == 0, report
    tun = next(c for c in report["checks"] if "tun" in c["name"])
    assert tun["ok"] and "crw-------" in tun["seen"] and "root" in tun["seen"], tun


def test_no_tun_device_fails_jobs_with_the_cause_and_no_host_network(host) -> None:
    h = host("--tun", "absent")
    rows = h.serve_until_finished()
    (status, *_) = _failed_for_the_host(rows, h.jobs())
    assert "/dev/net/tun does not exist" in status["message"], status
    assert status["fix"].startswith("load the tun module (modprobe tun)")
    assert "--device /dev/net/tun" in status["fix"] and "network: none" in status["fix"]
    assert "network: host" not in status["fix"]
    _doctor_names(h, status["message"], status["fix"])


def test_a_reconciler_that_is_not_root_on_a_closed_tun_device_says_how_to_open_it(host):
    h = host("--tun", "0600", user=NOBODY)
    rows = h.serve_until_finished()
    (status, *_) = _failed_for_the_host(rows, h.jobs())
    assert "the run user (uid 65534) cannot open /dev/net/tun (crw-------" in status["message"]
    assert "the reconciler is not root" in status["message"]
    assert status["fix"].startswith("make the device 0666 as udev does"), status["fix"]
    assert "run the reconciler as root" in status["fix"] and "network: none" in status["fix"]
    assert "network: host" not in status["fix"]
    _doctor_names(h, status["message"], status["fix"])


def test_a_reconciler_that_is_not_root_runs_every_example_as_its_own_user(host) -> None:
    """Where udev made the device 0666, an ordinary user's reconciler contains its runs
    in namespaces of their own, as its own uid (it cannot switch users)."""
    h = host("--tun", "0666", user=NOBODY)
    rows = h.serve_until_finished()
    assert {r["phase"] for r in rows} == {"Succeeded"}, rows
    assert h.jobs()["hello"]["status"]["runAs"].startswith("65534:65534 (the reconciler's own")
    code, report = h.doctor()
    assert code == 0, report


def test_no_loop_devices_hold_outputs_by_polling_and_doctor_says_so(host) -> None:
    h = host("--tun", "0600", "--no-loop")
    rows = h.serve_until_finished()
    assert {r["phase"] for r in rows} == {"Succeeded"}, rows
    code, report = h.doctor()
    assert code == 0, report
    disk = next(c for c in report["checks"] if "loop" in c["name"] or "disk" in c["name"])
    assert "polled" in disk["seen"] and "no loop devices" in disk["seen"], disk


def test_without_bubblewrap_jobs_fail_with_the_install_line(host) -> None:
    h = host("--tun", "0600", "--no-bwrap")
    rows = h.serve_until_finished()
    (status, *_) = _failed_for_the_host(rows, h.jobs())
    assert status["message"] == "bubblewrap (bwrap) is not installed on the reconciler's PATH"
    assert status["fix"].startswith("install bubblewrap (apt-get install bubblewrap")
    _doctor_names(h, status["message"], status["fix"])


def test_the_simulation_leaves_the_machines_own_device_as_it_was() -> None:
    before = os.stat("/dev/net/tun")
    seen = subprocess.run([*HOSTSIM, "--tun", "0600", "--", "stat", "-c", "%A", "/dev/net/tun"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert seen == "crw-------"
    after = os.stat("/dev/net/tun")
    assert (after.st_mode, after.st_uid, after.st_rdev) == (before.st_mode, before.st_uid,
                                                             before.st_rdev)


def test_a_user_who_cannot_read_the_state_is_told_so_without_a_traceback(host) -> None:
    """The state directory is its owner's alone (0700): another user's `get` says which
    path it could not read and what to do, and exits 1."""
    h = host("--tun", "0600", user=NOBODY)
    private = Path(tempfile.mkdtemp(prefix="nodus-private-", dir="/tmp"))  # root's, 0700
    try:
        (private / "state.db").write_text("")
        for args in (("get", "--state-dir", str(private)),
                     ("describe", "job/hello", "--state-dir", str(private))):
            done = h.run(*args)
            assert done.returncode == 1, done
            assert "Traceback" not in done.stderr, done.stderr
            assert f"{private}" in done.stderr and "permission denied" in done.stderr
    finally:
        shutil.rmtree(private, ignore_errors=True)


def test_validate_names_what_this_user_cannot_read_and_never_says_valid(host) -> None:
    """A folder or a file of the tree this user may not read is a problem of the run
    (exit 1), not left out of a "valid" verdict."""
    h = host(user=NOBODY)
    tree = h.clone / "tree"
    (tree / "closed").mkdir(parents=True)
    (tree / "closed" / "bad.yaml").write_text("kind: Job\n")
    (tree / "secret.yaml").write_text("kind: Job\n")
    (tree / "ok.yaml").write_text((h.clone / "examples-repo" / "jobs" / "hello.yaml")
                                  .read_text())
    for path in (tree, tree / "closed", tree / "secret.yaml", tree / "ok.yaml"):
        os.chown(path, 0, 0)  # root's: the ordinary user may not read two of them
    (tree / "closed").chmod(0o700)
    (tree / "secret.yaml").chmod(0o600)
    done = h.run("validate", str(tree))
    assert done.returncode == 1, done
    assert "Traceback" not in done.stderr and "valid" not in done.stdout.split(":")[-1:]
    shown = done.stdout + done.stderr
    assert f"{tree}/closed:1: cannot be read by this user" in shown, shown
    assert f"{tree}/secret.yaml:1: cannot be read by this user" in shown, shown
