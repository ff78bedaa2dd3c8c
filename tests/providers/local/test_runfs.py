"""A Job's files are a filesystem of its own: the kernel, not a poll, holds it to
maxOutputBytes, and the Jobs together never take the last bytes of the state directory.

Written as the attacks (issue 16 case 6) on a state directory whose whole disk is a
64 MiB tmpfs holding a real SQLite store: a burst of large files faster than any poll,
files held open after they were unlinked (no walk sees them), two Jobs each under the
cap that together would fill the disk; and then what keeps the design honest: deleting
or expiring a Job leaves no mount or loop device behind, and a restarted backend (a new
provider, a supervisor killed with -9, the mount gone as after a reboot) still reads
the outputs and the checkpoints. Real processes, real bubblewrap, real loop mounts.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.floor.phases import FIXES
from nodus_gitops.leases import LeaseKeeper
from nodus_gitops.providers.jsonfiles import read_json
from nodus_gitops.providers.local import runfs
from nodus_gitops.providers.local.procs import is_same_process
from nodus_gitops.state.store import Store

from tests.providers.local.conftest import HAS_BWRAP, PROJECT, Local, local_config
from tests.providers.local.test_lifecycle import checkpointed, started
from tests.support.local_runs import small_tmpfs

CAN_LOOP = os.geteuid() == 0 and os.path.exists("/dev/loop-control") and bool(
    runfs.find_mkfs())
needs_loop = pytest.mark.skipif(
    not (CAN_LOOP and HAS_BWRAP),
    reason="needs root, /dev/loop-control, mkfs.ext4 and bubblewrap (a run's own filesystem)")

MiB = 1 << 20

BURST = """
import os
for i in range(9):  # 63 MiB in well under a second, each file under the cap
    with open(f"burst-{i}", "wb") as f:
        f.write(b"x" * (7 << 20))
print("wrote everything")
"""
# Twelve files unlinked as soon as they are open: no walk of the directories sees them.
HIDDEN = """
import os, sys, time
held = []
for i in range(12):
    f = open(f"gone-{i}", "wb")
    os.unlink(f.name)
    held.append(f)
    try:
        f.write(b"x" * (7 << 20))
        f.flush()
    except OSError as exc:
        if HOLD:
            print("full:", exc, flush=True)
            time.sleep(60)  # keep every file open: the space stays taken
        raise
print("wrote everything")
"""
QUIET = "print('still here')"


def free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def our_mounts(root: Path) -> list[str]:
    """Mount points under `root` in this process's mount namespace."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")
        if point == str(root) or point.startswith(f"{root}/"):
            found.append(point)
    return found


def our_loops(root: Path) -> list[str]:
    """Loop devices whose backing file lies under `root` (what `losetup -a` lists)."""
    listed = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    return [line for line in listed.splitlines() if str(root) in line]


def nothing_left(root: Path, timeout: float = 10.0) -> tuple[list[str], list[str]]:
    deadline = time.monotonic() + timeout
    while True:
        left = our_mounts(root), our_loops(root)
        if left == ([], []) or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB tmpfs: the state directory's whole disk."""
    with small_tmpfs(tmp_path / "disk", "64m") as disk:
        yield disk


class StateDir:
    """A state directory on the small disk: the local backend's root and a real SQLite
    store, written to (events, lease renewals) while the Jobs run, as serve does."""

    def __init__(self, disk: Path, **config: object):
        self.disk = disk
        self.path = disk / "state"
        self.store = Store.open(None, self.path)
        self.leases = LeaseKeeper(self.store, ["w"], replica="r1", ttl=30)
        gained, _ = self.leases.tick()
        assert gained == {"w"}
        # each run's log cap counts against the floor too: a small one on a small disk
        self.local = Local(self.path / "local",
                           local_config(**{"max_log_bytes": "1Mi", **config}))
        self.failures: list[str] = []
        self.least_free = free(disk)

    def beat(self, key: ResourceKey) -> None:
        """One pass of the reconciler: a store write and a lease renewal."""
        self.least_free = min(self.least_free, free(self.disk))
        try:
            self.store.add_event(key, "Normal", "Observed", "a pass of the reconciler")
            self.leases.tick()
            if not self.leases.holds("w"):
                self.failures.append("lease lost")
        except Exception as exc:  # noqa: BLE001 - what serve logged: the disk is full
            self.failures.append(f"{type(exc).__name__}: {exc}")

    def wait(self, k: ResourceKey, until=None, timeout: float = 60.0):
        def check(o):
            self.beat(k)
            if until is None:
                return o.phase in ("Succeeded", "Failed", "Cancelled")
            return until(o) if callable(until) else o.phase == until
        return self.local.wait(k, check, timeout=timeout)

    def close(self) -> None:
        self.local.cleanup()
        for k in list(self.local.keys):
            try:
                self.local.provider.delete(k)
            except Exception:  # noqa: BLE001 - best effort: the test already failed
                pass
        self.store.close()


@pytest.fixture
def state(small_disk: Path) -> Iterator[StateDir]:
    made: list[StateDir] = []

    def make(**config: object) -> StateDir:
        s = StateDir(small_disk, **config)
        made.append(s)
        return s

    yield make  # type: ignore[misc]
    for s in made:
        s.close()


def assert_failed_at_the_cap(done, cap: int) -> None:
    assert (done.phase, done.reason) == ("Failed", "OutputLimitExceeded"), done
    assert done.fix == FIXES["OutputLimitExceeded"]
    assert f"maxOutputBytes ({cap})" in done.message


def assert_the_state_dir_still_works(s: StateDir, used_before: int, cap: int) -> None:
    assert s.failures == [], s.failures[:3]
    # the Job took at most its cap (and its filesystem's bookkeeping) of the disk
    assert s.least_free > 16 * MiB, s.least_free
    assert used_before - free(s.disk) < cap + 8 * MiB
    s.store.add_event(ResourceKey("Job", PROJECT, "after"), "Normal", "Written", "after")
    s.leases.tick()
    assert s.leases.holds("w")
    k = s.local.create("second", QUIET)
    done = s.wait(k)
    assert done.phase == "Succeeded" and s.local.log(k) == "still here", done


@needs_loop
def test_a_burst_of_files_faster_than_any_poll_stops_at_the_cap(state) -> None:
    s = state(max_output_bytes="8Mi", min_free_bytes="8Mi")
    before = free(s.disk)
    k = s.local.create("burst", BURST)
    done = s.wait(k)
    assert_failed_at_the_cap(done, 8 * MiB)
    assert "wrote everything" not in s.local.log(k)
    assert_the_state_dir_still_works(s, before, 8 * MiB)
    assert done.status["disk"] == "filesystem"


@needs_loop
@pytest.mark.parametrize("hold", [False, True], ids=["exits", "holds-them-open"])
def test_files_unlinked_while_open_count_against_the_cap(state, hold: bool) -> None:
    s = state(max_output_bytes="8Mi", min_free_bytes="8Mi")
    before = free(s.disk)
    k = s.local.create("hidden", HIDDEN.replace("HOLD", str(hold)))
    done = s.wait(k)
    assert_failed_at_the_cap(done, 8 * MiB)
    assert done.status["attempts"] == 1  # no retry: the cap is the Job's, not one run's
    assert_the_state_dir_still_works(s, before, 8 * MiB)


EMPTY_FILES = """
import os, time
try:
    for i in range(1_000_000):  # no bytes at all: inodes
        open(f"empty-{i}", "w").close()
except OSError as exc:
    print("stopped:", exc, flush=True)
time.sleep(60)
"""


@needs_loop
def test_empty_files_by_the_million_stop_at_the_cap(local_factory) -> None:
    local = local_factory(max_output_bytes="1Mi")
    k = local.create("inodes", EMPTY_FILES)
    done = local.wait(k, timeout=30)
    assert_failed_at_the_cap(done, 1 * MiB)
    files = len(os.listdir(local.run(k).work))
    assert files <= 1.1 * runfs.sizes(1 * MiB)[0] / runfs.INODE_BYTES  # the kernel's inodes


HOLDER = """
import os, time
with open(os.path.join(os.environ["NODUS_OUTPUTS_DIR"], "half"), "wb") as f:
    f.write(b"x" * (12 << 20))
while not os.path.exists(os.path.join(os.environ["NODUS_OUTPUTS_DIR"], "release")):
    time.sleep(0.05)
"""


@needs_loop
def test_jobs_each_under_the_cap_wait_instead_of_filling_the_disk_together(state) -> None:
    s = state(max_output_bytes="24Mi", min_free_bytes="8Mi")
    first = s.local.create("first", HOLDER)
    s.wait(first, lambda o: (s.local.run(first).run_outputs_for(0, 1) / "half").exists()
           and o.status["active"] == 1)
    second = s.local.create("second", QUIET)

    def pressed(o) -> bool:
        return any(c["type"] == "DiskPressure" and c["status"] == "True"
                   for c in o.status["conditions"])

    waiting = s.wait(second, pressed, timeout=30)
    assert waiting.phase == "Queued" and waiting.status["startTime"] is None
    cond = next(c for c in waiting.status["conditions"] if c["type"] == "DiskPressure")
    assert cond["reason"] == "LowDiskSpace" and "minFreeBytes" in cond["message"]
    time.sleep(1.0)  # still waiting while the first Job may write its whole cap
    assert s.local.provider.get(second).phase == "Queued"
    (s.local.run(first).run_outputs_for(0, 1) / "release").write_text("")
    assert s.wait(first).phase == "Succeeded"
    done = s.wait(second)
    assert done.phase == "Succeeded", done
    cond = next(c for c in done.status["conditions"] if c["type"] == "DiskPressure")
    assert cond["status"] == "False"
    assert s.failures == []


WRITES_OUTPUT = """
import os, time
open(os.path.join(os.environ["NODUS_OUTPUTS_DIR"], "model.bin"), "w").write("weights")
time.sleep(float(os.environ.get("LINGER", "0")))
"""
DECLARED = [{"name": "model", "path": "/nodus/outputs/model.bin"}]


@needs_loop
def test_delete_and_ttl_leave_no_mount_or_loop_device(local_factory, tmp_path: Path) -> None:
    local = local_factory()
    root = local.root
    done_k = local.create("done", WRITES_OUTPUT, outputs=DECLARED)
    running_k = local.create("running", WRITES_OUTPUT, env={"LINGER": "60"})
    ttl_k = local.create("expiring", WRITES_OUTPUT, outputs=DECLARED,
                         ttlSecondsAfterFinished=1)
    done = local.wait(done_k)
    assert done.phase == "Succeeded" and done.status["disk"] == "filesystem", done
    cond = next(c for c in done.status["conditions"] if c["type"] == "DiskLimited")
    assert (cond["status"], cond["reason"]) == ("True", "OwnFilesystem")
    local.wait(running_k, lambda o: o.status["active"] == 1)
    assert our_mounts(root)  # the running Job's filesystem
    # reading finished outputs mounts them read-only for the read, or until the Job goes
    path, _, _ = local.provider.copy_output(done_k, "model", tmp_path / "copy.bin")
    assert path.read_text() == "weights"
    location = local.provider.output_location(done_k, "model")
    assert runfs.readable(local.run(done_k).disk) is None and location.read_text() == "weights"
    local.wait(ttl_k, "Succeeded")
    local.provider.copy_output(ttl_k, "model", tmp_path / "ttl.bin")
    for k in (done_k, running_k):
        local.provider.delete(k)
    time.sleep(1.0)
    assert local.provider.get(ttl_k) is None  # expired
    assert nothing_left(root) == ([], [])
    assert sorted(p.name for p in (root / PROJECT).iterdir()) == [".tombstones"]


@needs_loop
def test_outputs_and_checkpoints_outlive_a_restart(local, tmp_path: Path) -> None:
    made = local.create("made", WRITES_OUTPUT, outputs=DECLARED)
    assert local.wait(made).phase == "Succeeded"
    later = local.reopen()  # a restarted reconciler
    path, size, sha = later.copy_output(made, "model", tmp_path / "model.bin")
    assert path.read_text() == "weights" and size == 7
    assert sha == local.provider.get(made).status["outputs"]["model"]["sha256"]

    k = local.create("resumes", checkpointed(40),
                     outputs=[{"name": "final", "path": "/nodus/outputs/final"}])
    started(local, k, 0.5)
    run = local.run(k)
    rec = next(iter(read_json(run.status)["runs"].values()))
    os.kill(local.supervisor_pid(k), signal.SIGKILL)
    deadline = time.monotonic() + 5
    while is_same_process(rec["pid"], rec["ticks"]) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not is_same_process(rec["pid"], rec["ticks"])
    saved = int((run.state_for(0) / "step").read_text())
    # as after a reboot: the Job's filesystem is no longer mounted
    subprocess.run(["umount", str(run.files)], check=True)
    assert not (run.state_for(0) / "step").exists()
    later = local.reopen()
    done = local.wait(k, provider=later, timeout=30)
    assert done.phase == "Succeeded" and done.status["recoveries"] == 1, done
    assert local.log(k) == f"start {saved}"  # resumed from the checkpoint in the image
    final, _, _ = later.copy_output(k, "final", tmp_path / "final")
    assert final.read_text() == "40"


def test_without_root_or_loop_devices_the_cap_is_polled_and_status_says_so(tmp_path) -> None:
    plan = runfs.plan(4 << 30, "auto", euid=1000)
    assert plan["type"] == "polled" and "root" in plan["problem"]
    with pytest.raises(ValueError, match="diskLimit"):
        runfs.plan(4 << 30, "filesystem", euid=1000)
    local = Local(tmp_path / "root", local_config(disk_limit="polled"))
    try:
        k = local.create("plain", "print('ran')")
        done = local.wait(k)
        assert done.phase == "Succeeded" and done.status["disk"] == "polled"
        cond = next(c for c in done.status["conditions"] if c["type"] == "DiskLimited")
        assert (cond["status"], cond["reason"]) == ("False", "Polled")
        assert "every few seconds" in cond["message"]
        assert our_mounts(local.root) == []
    finally:
        local.cleanup()


READS_INPUT = """
import os, time
print(open(os.path.join(os.environ["NODUS_INPUT_MODEL"])).read(), flush=True)
time.sleep(float(os.environ.get("LINGER", "0")))
"""


@needs_loop
def test_a_later_stage_reads_its_input_without_a_mount_on_the_host(local) -> None:
    made = local.create("make", WRITES_OUTPUT, outputs=DECLARED)
    assert local.wait(made).phase == "Succeeded"
    runfs.detach(local.run(made).files)  # as after it finished (the test's wait mounts it)
    location = local.provider.output_location(made, "model")
    assert not location.exists() and our_mounts(local.root) == []
    use = local.create("use", READS_INPUT, inputs=[{"name": "model", "path": str(location)}],
                       env={"LINGER": "2"}, parallelism=2, completions=2)
    running = local.wait(use, lambda o: o.status["active"] == 2 and "weights" in local.log(use))
    assert running.phase == "Running"
    # the reader's runs mount the earlier stage's filesystem in their own namespaces only
    assert our_mounts(local.root) == [str(local.run(use).files)]
    done = local.wait(use)
    assert done.phase == "Succeeded" and local.log(use, 1) == "weights", done
    for k in (made, use):
        local.provider.delete(k)
    assert nothing_left(local.root) == ([], [])


@needs_loop
def test_a_filesystem_that_cannot_be_made_falls_back_to_the_poll(local) -> None:
    settings = local.provider.settings()
    assert settings["disk"]["type"] == "filesystem"
    settings["disk"] = {**settings["disk"], "mkfs": "/bin/false"}  # as if mkfs broke since
    k = local.create("fallback", WRITES_OUTPUT, outputs=DECLARED)
    done = local.wait(k)
    assert done.phase == "Succeeded" and done.status["disk"] == "polled", done
    cond = next(c for c in done.status["conditions"] if c["type"] == "DiskLimited")
    assert cond["status"] == "False" and "could not be made" in cond["message"]
    assert "FilesystemUnavailable" in [e["reason"] for e in local.run(k).read_events()]
    assert (local.run(k).outputs / "model.bin").read_text() == "weights"
    assert our_mounts(local.root) == []


@needs_loop
@pytest.mark.parametrize("how", ["removed", "moved away"])
def test_a_run_directory_removed_by_hand_takes_its_filesystem_along(local, how) -> None:
    k = local.create("orphan", WRITES_OUTPUT, env={"LINGER": "60"})
    local.wait(k, lambda o: o.status["active"] == 1)
    run = local.run(k)
    rec = next(iter(read_json(run.status)["runs"].values()))
    path = run.path
    if how == "moved away":  # pytest's cleanup renames a folder before it removes it
        path = run.path.with_name("garbage")
        os.rename(run.path, path)
    shutil.rmtree(path, ignore_errors=True)  # rm -r: all but the mount point
    files = path / "disk" / "files"
    deadline = time.monotonic() + 10
    while runfs.mounted(files) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not runfs.mounted(files)  # the supervisor saw it go, ended the run, unmounted
    assert not is_same_process(rec["pid"], rec["ticks"])
    shutil.rmtree(path)
    assert nothing_left(local.root) == ([], [])
