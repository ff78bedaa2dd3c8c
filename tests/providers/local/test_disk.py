"""A Job cannot take the reconciler's disk: a log flood on a small file system is cut to
its head and tail while syncs and lease renewals go on, and new runs wait while free
space, less what the Job may write, is under the floor. (The attacks on the output cap
itself, held by a filesystem of the Job's own: test_local_runfs.py.)"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from nodus_gitops.backends import build_backend as build_provider
from nodus_gitops.config import Binding, Settings
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.floor.phases import FIXES
from nodus_gitops.leases import LeaseKeeper
from nodus_gitops.providers.local.diskuse import tree_bytes
from nodus_gitops.state.store import Store
from nodus_gitops.wiring import build_service

from tests.fixtures_git import ManifestRepo
from tests.providers.local.conftest import HAS_BWRAP, Local, local_config
from tests.support.local_runs import small_tmpfs
from tests.support.waiting import wait_for

FLOOD_JOB = """apiVersion: nodus.dev/v1
kind: Job
metadata:
  name: flood
spec:
  command:
    - python3
    - -c
    - |
      import sys
      print("first line of the flood")
      line = "x" * 1023 + "\\n"
      for _ in range(40 * 1024):
          sys.stdout.write(line)
      print("last line of the flood")
"""
QUIET_JOB = """apiVersion: nodus.dev/v1
kind: Job
metadata:
  name: quiet
spec:
  command: [python3, -c, "print('still here')"]
"""


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 24 MiB tmpfs: the state directory's whole disk."""
    with small_tmpfs(tmp_path / "disk", "24m") as disk:
        yield disk


@pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap is not installed")
def test_a_log_flood_on_a_small_disk_leaves_syncs_and_leases_working(
        small_disk: Path, manifest_repo: ManifestRepo) -> None:
    state = small_disk / "state"
    # each Job may write 2 MiB: with the floor, what the disk must have free for one
    settings = {"type": "local", "prestartSupervisor": False, "detectGpus": False,
                "maxLogBytes": "1Mi", "maxOutputBytes": "2Mi", "minFreeBytes": "4Mi"}
    store = Store.open(None, state)
    binding = Binding(id="w", url=manifest_repo.push_url, project="p")
    service = build_service(Settings(state_dir=state, bindings=(binding,)), store,
                      provider_factory=lambda name: build_provider(name, settings, state))
    leases = LeaseKeeper(store, ["w"], replica="r1", ttl=30)
    manifest_repo.write("flood.yaml", FLOOD_JOB)
    manifest_repo.commit("flood")
    manifest_repo.push()
    assert service.reconcile("w").result == "applied"
    provider = build_provider("local", settings, state)
    flood = ResourceKey("Job", "p", "flood")
    done, finished = wait_for(provider, flood, timeout=120)
    assert finished and done.phase == "Succeeded", done
    log = list(provider.logs(flood))
    assert log[0] == "first line of the flood" and log[-1] == "last line of the flood"
    assert any("bytes of this log were cut" in line for line in log)
    run_log = next((state / "local" / "p" / "flood" / "logs").glob("0-*.log"))
    assert run_log.stat().st_size < 1.1 * (1 << 20)

    gained, _ = leases.tick()
    assert gained == {"w"} and leases.holds("w")
    manifest_repo.write("quiet.yaml", QUIET_JOB)
    manifest_repo.commit("quiet")
    manifest_repo.push()
    report = service.reconcile("w")
    assert report.result == "applied", (report.result, report.message)
    leases.tick()
    assert leases.holds("w")
    quiet, finished = wait_for(provider, ResourceKey("Job", "p", "quiet"), timeout=60)
    assert finished and quiet.phase == "Succeeded"
    assert os.statvfs(small_disk).f_bavail > 0



MANY_FILES = """
import os, time
out = os.environ["NODUS_OUTPUTS_DIR"]
for i in range(40):  # 40 files of 100 KiB: none alone reaches the cap
    with open(os.path.join(out, f"part-{i}"), "wb") as f:
        f.write(b"x" * 100 * 1024)
time.sleep(60)
"""
ONE_FILE = """
import os
with open(os.path.join(os.environ["NODUS_OUTPUTS_DIR"], "big"), "wb") as f:
    for _ in range(40):
        f.write(b"x" * 100 * 1024)
"""


@pytest.mark.parametrize("how", ["many files", "one file"])
def test_a_job_writing_past_the_output_cap_fails_with_the_fix(local_factory, how):
    local = local_factory(max_output_bytes="1Mi")
    k = local.create("writer", MANY_FILES if how == "many files" else ONE_FILE)
    done = local.wait(k, timeout=30)
    assert (done.phase, done.reason) == ("Failed", "OutputLimitExceeded"), done
    assert "maxOutputBytes (1048576)" in done.message
    assert done.fix == FIXES["OutputLimitExceeded"] and "maxOutputBytes" in done.fix
    assert tree_bytes([local.run(k).outputs]) < 1.2 * (4 << 20)


def test_new_runs_wait_while_the_disk_is_under_the_floor(small_disk: Path) -> None:
    local = Local(small_disk / "local", local_config(min_free_bytes="8Mi", max_log_bytes="1Mi",
                                                     max_output_bytes="1Mi"))
    try:
        ballast = small_disk / "ballast"
        ballast.write_bytes(b"\0" * (20 << 20))  # leaves about 4 MiB of 24
        k = local.create("patient", "print('ran')")
        waiting = local.wait(k, lambda o: any(c["type"] == "DiskPressure"
                                              for c in o.status["conditions"]))
        assert waiting.phase == "Queued" and waiting.status["startTime"] is None
        cond = next(c for c in waiting.status["conditions"] if c["type"] == "DiskPressure")
        assert (cond["status"], cond["reason"]) == ("True", "LowDiskSpace")
        assert "minFreeBytes" in cond["message"]
        assert "WaitingForDisk" in [e["reason"] for e in local.run(k).read_events()]
        ballast.unlink()
        done = local.wait(k)
        assert done.phase == "Succeeded" and local.log(k) == "ran"
        cond = next(c for c in done.status["conditions"] if c["type"] == "DiskPressure")
        assert cond["status"] == "False"
    finally:
        local.cleanup()


def test_a_queue_timeout_while_waiting_for_disk_says_so(small_disk: Path) -> None:
    """placement.queueTimeout counts a wait for disk as any wait for capacity; the
    failure says what it waited for, not a GPU slot it never asked for."""
    local = Local(small_disk / "local", local_config(min_free_bytes="8Mi", max_log_bytes="1Mi",
                                                     max_output_bytes="1Mi"))
    try:
        (small_disk / "ballast").write_bytes(b"\0" * (20 << 20))
        k = local.create("impatient", "print('ran')", placement={"queueTimeout": "1s"})
        done = local.wait(k, timeout=30)
        assert (done.phase, done.reason) == ("Failed", "CapacityUnavailable"), done
        assert "the disk had no room for a new run" in done.message, done.message
        assert "GPU" not in done.message
    finally:
        local.cleanup()


# The Job makes a file, then waits until someone outside it holds the file open.
MAKES_HELD_FILE = """
import os, time
open("/nodus/work/grow", "wb").close()
while not os.path.exists("/nodus/work/held"):
    time.sleep(0.05)
"""
# A process that keeps a finished Job's file open and writes through it when told.
HOLDER = """
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)
open(sys.argv[2], "w").close()
print("held", flush=True)
for line in sys.stdin:
    os.write(fd, b"x" * (4 << 20))
    os.fsync(fd)
    print("wrote", flush=True)
"""


@pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap is not installed")
def test_a_finished_jobs_image_held_open_stays_reserved_until_it_is_released(local_factory):
    import subprocess
    import sys
    import time

    from nodus_gitops.providers.local import diskuse, runfs

    local = local_factory(max_output_bytes="16Mi")
    if local.provider.settings()["disk"]["type"] != "filesystem":
        pytest.skip("Jobs have no filesystem of their own here (root and loop devices)")
    k = local.create("kept", MAKES_HELD_FILE)
    local.wait(k, lambda o: o.status["active"] == 1)
    run = local.run(k)
    grow = run.work / "grow"
    deadline = time.monotonic() + 20
    while not grow.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(grow), str(run.work / "held")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        done = local.wait(k)
        assert done.phase == "Succeeded"
        # finished, unmounted lazily: the held file keeps the filesystem writable
        image_bytes = run.image.stat().st_size
        reserved = diskuse.reserved(local.root)
        assert reserved >= 16 << 20, (reserved, image_bytes)
        holder.stdin.write("grow\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "wrote"
        assert diskuse.reserved(local.root) >= 12 << 20  # what it may still take, counted
        local.provider.delete(k)  # the image is unlinked, still held
        assert not run.image.exists()
        assert diskuse.reserved(local.root) >= 16 << 20
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    deadline = time.monotonic() + 20
    while diskuse.reserved(local.root) and time.monotonic() < deadline:
        time.sleep(0.1)  # the last close released the filesystem, then its loop device
    assert diskuse.reserved(local.root) == 0
    assert not runfs.image_held(run.image)


LOGS_3MIB = """
import sys, time
line = "y" * 1023 + "\\n"
for _ in range(3 * 1024):
    sys.stdout.write(line)
sys.stdout.flush()
time.sleep(1)
"""


@pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap is not installed")
def test_many_parallel_runs_logging_cannot_fill_the_disk(small_disk: Path) -> None:
    """24 MiB of disk; 12 parallel runs each logging 3 MiB (under maxLogBytes) would take
    36: each run's log cap counts against the floor, so later runs wait instead."""
    local = Local(small_disk / "local", local_config(min_free_bytes="2Mi",
                                                     max_output_bytes="1Mi",
                                                     max_log_bytes="4Mi"))
    try:
        k = local.create("chatty", LOGS_3MIB, completions=12, parallelism=12)
        waiting = local.wait(k, lambda o: o.status["active"] == 0 and any(
            c["type"] == "DiskPressure" and c["status"] == "True"
            for c in o.status["conditions"]) or o.phase in ("Succeeded", "Failed"),
            timeout=120)
        assert waiting.phase == "Queued", waiting
        assert 0 < len(waiting.status["completedIndexes"]) < 12
        for log in (local.run(k).logs).glob("*.log"):
            text = log.read_text()
            assert "lost" not in text[-300:], (log.name, text[-300:])
        assert os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize >= 1 << 20
    finally:
        local.cleanup()


# Blocks past the file's end: its size stays 0 (fallocate -n, FALLOC_FL_KEEP_SIZE).
KEEPS_SIZE = """
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open("/nodus/outputs/hidden", os.O_WRONLY | os.O_CREAT, 0o600)
done = libc.fallocate(fd, 1, ctypes.c_long(0), ctypes.c_long(64 << 20))
print("allocated" if done == 0 else f"refused {ctypes.get_errno()}", flush=True)
time.sleep(60)
"""


def test_blocks_allocated_past_a_files_end_count_against_a_polled_cap(local_factory):
    local = local_factory(max_output_bytes="8Mi", disk_limit="polled")
    k = local.create("keeps-size", KEEPS_SIZE)
    done = local.wait(k, timeout=40)
    assert local.log(k).startswith("allocated"), local.log(k)
    assert (done.phase, done.reason) == ("Failed", "OutputLimitExceeded"), done
    assert done.status["disk"] == "polled"


@pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap is not installed")
def test_a_job_retried_without_end_cannot_use_up_the_disks_inodes(tmp_path: Path) -> None:
    """A disk of 600 inodes; `false` retried with a huge backoffLimit leaves a log, a
    sandbox record and a units file for every attempt: only the last few are kept, and
    when the inodes run low anyway new runs wait."""
    from nodus_gitops.providers.local.rundir import KEPT_ATTEMPTS

    with small_tmpfs(tmp_path / "disk", "64m,nr_inodes=600") as disk:
        local = Local(disk / "local", local_config(min_free_bytes="1Mi", max_log_bytes="64Ki",
                                                   max_output_bytes="1Mi"))
        try:
            k = local.create("retries", command=["false"], backoffLimit=1_000_000)
            busy = local.wait(k, lambda o: o.status["attempts"] >= 250, timeout=120)
            run = local.run(k)
            assert busy.phase in ("Running", "Queued"), busy
            assert len(list(run.logs.glob("0-*.log"))) <= KEPT_ATTEMPTS + 1
            assert len(list(run.sandboxes.glob("0-*.json"))) <= KEPT_ATTEMPTS + 1
            pruned = [e for e in run.read_events() if e["reason"] == "AttemptsPruned"]
            assert len(pruned) == 1 and f"last {KEPT_ATTEMPTS} attempts" in pruned[0]["message"]
            # other files take the disk's inodes: the Job waits instead of failing to write
            ballast = disk / "ballast"
            ballast.mkdir()
            n = 0
            while os.statvfs(disk).f_favail > 10:
                (ballast / str(n)).touch()
                n += 1
            waiting = local.wait(k, lambda o: o.status["active"] == 0 and any(
                c["type"] == "DiskPressure" and c["status"] == "True"
                for c in o.status["conditions"]), timeout=60)
            cond = next(c for c in waiting.status["conditions"] if c["type"] == "DiskPressure")
            assert "inodes free" in cond["message"], cond
            attempts = waiting.status["attempts"]
            for f in ballast.iterdir():
                f.unlink()
            resumed = local.wait(k, lambda o: o.status["attempts"] > attempts + 5, timeout=60)
            assert resumed.phase in ("Running", "Queued")
            local.patch(k, state="Cancelled")
            assert local.wait(k, timeout=60).phase == "Cancelled"
        finally:
            local.cleanup()


ONE_QUICK_ONE_SLOW = """
import os, time
if os.environ["NODUS_INDEX"] == "1":
    time.sleep(60)
"""


def test_a_runs_log_reservation_goes_when_the_run_ends(local_factory) -> None:
    """A finished run's log is on the disk already (the free space shows it): its cap
    stops being reserved when it ends, or Jobs waiting for disk would count it twice and
    could keep each other waiting for good."""
    import json
    import time

    from nodus_gitops.providers.local import diskuse

    local = local_factory(max_log_bytes="4Mi")
    k = local.create("pair", ONE_QUICK_ONE_SLOW, completions=2, parallelism=2)
    local.wait(k, lambda o: o.status["active"] == 1 and o.status["completedIndexes"] == "0")
    per_run = diskuse.log_bytes(1, 4 << 20)
    registry = local.root / diskuse.RESERVATIONS
    deadline = time.monotonic() + 20
    while True:
        [entry] = [json.loads(p.read_text()) for p in registry.glob("*.json")]
        if entry["logs"] == per_run or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert entry["logs"] == per_run, (entry["logs"], per_run)  # the running one alone
