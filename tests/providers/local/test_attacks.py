"""Attacks on the local backend, each written as a merged Job manifest would try it:
real supervisors, real processes, real bubblewrap. Each asserts that the attack fails
and, where it matters, that the Job's status says why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from nodus_gitops.floor.phases import is_terminal
from nodus_gitops.providers.jsonfiles import read_json
from nodus_gitops.providers.local import limits
from nodus_gitops.providers.local.runuser import resolve as run_user

from tests.providers.local.conftest import HAS_BWRAP, Local, local_config

pytestmark = pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap is not installed")

# Tries to open each path of argv[1:] (mode r or w after a colon) and prints what came of it.
TRY_OPEN = """
import json, sys
seen = {}
for arg in sys.argv[1:]:
    path, _, mode = arg.rpartition(":")
    try:
        with open(path, "r+b" if mode == "w" else "rb") as f:
            if mode == "w":
                f.write(b"owned by a Job")
            seen[path] = "opened"
    except OSError as exc:
        seen[path] = type(exc).__name__
print(json.dumps(seen))
"""


def processes_with(token: str) -> list[int]:
    """Host pids whose command line contains `token` (a Job's own marker)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if token.encode() in cmdline and state not in ("Z", "X"):
            found.append(int(entry))
    return found


def test_an_injected_source_ref_runs_nothing_on_the_host(local, tmp_path):
    marker = tmp_path / "pwned"
    repo = tmp_path / "hello"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    injected = f"--upload-pack=touch {marker}; echo"
    by_path = local.create("by-path", command=["true"],
                           source={"git": {"repo": str(repo), "ref": injected}})
    by_url = local.create("by-url", command=["true"],
                          source={"git": {"repo": "team/hello", "ref": injected}})
    for k in (by_path, by_url):
        done = local.wait(k)
        assert done.phase == "Failed", done
        assert "source.git" in done.message and done.fix
    assert not marker.exists()
    assert "ref" in local.wait(by_url).message


def test_a_planted_0600_file_and_etc_shadow_are_unreadable(local_factory, tmp_path):
    image = tmp_path / "image"
    (image / "bin").mkdir(parents=True)
    inside = image / "planted-secret"  # in a directory the run sees (its image)
    outside = tmp_path / "host-secret"  # somewhere on the host
    for planted in (inside, outside):
        planted.write_text("s3cret")
        planted.chmod(0o600)
    local = local_factory(images={"planted": str(image / "bin")})
    k = local.create("reader", command=[sys.executable, "-c", TRY_OPEN, f"{inside}:r",
                                        f"{outside}:r", "/etc/shadow:r"], image="planted")
    done = local.wait(k)
    assert done.phase == "Succeeded", local.log(k)
    seen = json.loads(local.log(k))
    assert seen == {str(inside): "PermissionError", str(outside): "FileNotFoundError",
                    "/etc/shadow": "FileNotFoundError"}


def test_the_state_directory_config_and_repository_are_out_of_reach(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    db = state / "state.db"
    db.write_bytes(b"SQLite format 3\0")
    config = tmp_path / "config.yaml"
    config.write_text("checks: {github: {token: inline-s3cret}}\n")
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "job.yaml").write_text("kind: Job\n")
    local = Local(state / "local", local_config())
    try:
        k = local.create("writer", command=[
            sys.executable, "-c", TRY_OPEN, f"{db}:w", f"{config}:r", f"{repo / 'job.yaml'}:w",
            f"{repo / '.git' / 'HEAD'}:w", f"{local.root}:r"])
        done = local.wait(k)
    finally:
        local.cleanup()
    assert done.phase == "Succeeded", local.log(k)
    seen = json.loads(local.log(k))
    assert set(seen.values()) == {"FileNotFoundError"}, seen
    assert db.read_bytes() == b"SQLite format 3\0"
    assert (repo / "job.yaml").read_text() == "kind: Job\n"


SCAN_ENVIRON = """
import json, os, sys
token = sys.argv[1]
found = [k for k, v in os.environ.items() if token in v]
for entry in os.listdir("/proc"):
    try:
        if token.encode() in open(f"/proc/{entry}/environ", "rb").read():
            found.append(entry)
    except OSError:
        pass
try:
    open(f"/proc/{sys.argv[2]}/environ", "rb").read()
    found.append("reconciler")
except OSError as exc:
    pass
print(json.dumps(found))
"""


def test_the_reconcilers_environment_is_out_of_reach(local_factory, monkeypatch):
    token = f"reconciler-secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("NODUS_GITOPS_WEBHOOK_SECRET", token)
    local = local_factory()  # supervisors started from now on inherit nothing of it
    k = local.create("environ", command=[sys.executable, "-c", SCAN_ENVIRON, token,
                                         str(os.getpid())])
    done = local.wait(k)
    assert done.phase == "Succeeded", local.log(k)
    assert json.loads(local.log(k)) == []


HOLD_SECRET = """
import os, sys, time
open("/nodus/outputs/secret.txt", "w").write(sys.argv[1])
deadline = time.time() + 60
while not os.path.exists("/nodus/outputs/release") and time.time() < deadline:
    time.sleep(0.05)
"""

SCAN_ROOTS = """
import json, os, sys
found = []
for entry in os.listdir("/proc"):
    try:
        if sys.argv[1] in open(f"/proc/{entry}/root/nodus/outputs/secret.txt").read():
            found.append(entry)
    except OSError:
        pass
print(json.dumps(found))
"""


def test_another_runs_outputs_are_out_of_reach_through_proc(local):
    token = uuid.uuid4().hex
    holder = local.create("holder", command=[sys.executable, "-c", HOLD_SECRET, token])
    held = local.run(holder).run_outputs_for(0, 1)  # its run's own /nodus/outputs
    local.wait(holder, lambda o: (held / "secret.txt").exists())
    try:
        scanner = local.create("scanner", command=[sys.executable, "-c", SCAN_ROOTS, token])
        done = local.wait(scanner)
    finally:
        (held / "release").write_text("")
    assert done.phase == "Succeeded", local.log(scanner)
    assert json.loads(local.log(scanner)) == []
    assert local.wait(holder).phase == "Succeeded"


def test_a_fake_bwrap_on_the_manifests_path_is_never_run(local, tmp_path):
    fake = tmp_path / "fakebin"
    fake.mkdir()
    marker = tmp_path / "fake-bwrap-ran"
    (fake / "bwrap").write_text(f"#!/bin/sh\necho ran > {marker}\nexit 0\n")
    (fake / "bwrap").chmod(0o755)
    code = "import os; print(os.getuid(), os.getpid(), os.path.exists('/nodus/outputs'))"
    k = local.create("fake", command=[sys.executable, "-c", code],
                     env={"PATH": f"{fake}:/usr/local/bin:/usr/bin:/bin"})
    done = local.wait(k)
    assert done.phase == "Succeeded", done
    assert not marker.exists()
    uid, pid, nodus = local.log(k).split()
    # the default run user (nodus-run where the quick start made it, else 65534), own PID
    # namespace
    assert (int(uid), int(pid), nodus) == (run_user(None, None).uid, 2, "True")
    assert done.status["sandbox"] == "bubblewrap"


# Leaves a grandchild in a session of its own, deaf to SIGTERM, that writes a heartbeat
# (in its working directory, which outlives the run) until it is killed; then the
# command waits (stopping cleanly on SIGTERM), exits at once, or runs out of memory.
DOUBLE_FORK = """
import os, signal, sys, time
out = os.getcwd()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        n = 0
        while True:
            n += 1
            with open(os.path.join(out, "beat.tmp"), "w") as f:
                f.write(str(n))
            os.replace(os.path.join(out, "beat.tmp"), os.path.join(out, "heartbeat"))
            time.sleep(0.05)
    os._exit(0)
while not os.path.exists(os.path.join(out, "heartbeat")):
    time.sleep(0.01)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
if sys.argv[2] == "exit":
    sys.exit(0)
if sys.argv[2] == "oom":
    hog = [bytearray(1 << 20) for _ in range(1024)]
time.sleep(120)
"""


def heartbeat_stops(path: Path, timeout: float = 15.0) -> bool:
    """True once the heartbeat stays the same for half a second, within `timeout`."""
    deadline = time.monotonic() + timeout
    last = path.read_text()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = path.read_text()
        if now == last:
            return True
        last = now
    return False


ENDINGS = {  # how the Job ends: (command mode, spec, what to do, phase, reason)
    "cancel": ("wait", {}, {"state": "Cancelled"}, "Cancelled", None),
    "timeout": ("wait", {"timeout": "6s"}, None, "Failed", "DeadlineExceeded"),
    "suspend": ("wait", {}, {"state": "Suspended"}, "Suspended", None),
    "finish": ("exit", {}, None, "Succeeded", None),
    "oom": ("oom", {"resources": {"memory": "64Mi"}}, None, "Failed", "OOMKilled"),
}


@pytest.mark.parametrize("how", sorted(ENDINGS))
def test_a_double_forking_job_dies_whole(local, how):
    mode, spec, patch, phase, reason = ENDINGS[how]
    if how == "oom" and limits.cgroup_parent() is None:
        pytest.skip("the cgroup v1 memory controller is not writable here")
    token = uuid.uuid4().hex
    k = local.create(f"forker-{how}", command=[sys.executable, "-c", DOUBLE_FORK, token, mode],
                     **spec)
    beat = local.run(k).work / "heartbeat"
    local.wait(k, lambda o: beat.exists() or is_terminal(o.phase))
    if patch:
        local.patch(k, **patch)
    done = local.wait(k, lambda o: o.phase == phase or is_terminal(o.phase))
    assert (done.phase, done.reason) == (phase, reason), done
    assert beat.exists()  # the grandchild was there before the end
    assert processes_with(token) == []  # none was left when the phase was recorded
    assert heartbeat_stops(beat)
    assert read_json(local.run(k).status)["runs"] == {}


def test_sixty_jobs_leave_no_zombie_supervisor(local_factory):
    local = local_factory(prestart_supervisor=True)
    keys = [local.create(f"quick-{i}", "pass") for i in range(60)]
    for k in keys:
        assert local.wait(k, timeout=60).phase == "Succeeded"
    supervisors = [read_json(local.run(k).supervisor)["pid"] for k in keys]

    def state(pid: int) -> tuple[str, int] | None:
        """(state, parent pid), None once the process is gone (reaped)."""
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return fields[0], int(fields[1])

    deadline = time.monotonic() + 30  # let any supervisor still running exit
    while any((s := state(pid)) is not None and s[0] != "Z" for pid in supervisors):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    # No further call: the reconciler stops asking about a Job once it has finished.
    zombies = [pid for pid in supervisors if (s := state(pid)) and s == ("Z", os.getpid())]
    assert zombies == []
