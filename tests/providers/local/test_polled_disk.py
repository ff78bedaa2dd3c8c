"""A polled disk cap (a reconciler that cannot give each Job a filesystem of its own:
`diskLimit: polled`, what a reconciler that is not root gets) holds against what a walk
of the Job's directories cannot see.

Written as the attacks, real processes (bubblewrap where installed): files opened,
unlinked and written while held open (no walk sees them); one file written as fast as
the disk takes it, which the poll can never catch in time (RLIMIT_FSIZE stops it).
"""

from __future__ import annotations

import os
import re

import pytest
from nodus_gitops.floor.phases import FIXES
from nodus_gitops.providers.local import diskuse

MiB = 1 << 20
CAP = 8 * MiB

# Eight files of half the cap each (4x the cap in all, each under RLIMIT_FSIZE), unlinked
# as soon as they are open and held: no name of them is left for a walk to find.
HIDES = """
import os, signal, time
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # the stop waits for "holding"
where = os.environ.get("NODUS_OUTPUTS_DIR", ".") if WHERE == "outputs" else "."
held = []
for i in range(8):
    f = open(os.path.join(where, f"gone-{i}"), "wb")
    os.unlink(f.name)
    f.write(b"x" * (4 << 20))
    f.flush()
    held.append(f)
print("holding", flush=True)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
time.sleep(30)
"""


def assert_failed_at_the_cap(done) -> None:
    assert (done.phase, done.reason) == ("Failed", "OutputLimitExceeded"), done
    assert done.fix == FIXES["OutputLimitExceeded"]
    assert f"maxOutputBytes ({CAP})" in done.message, done.message


def hidden(message: str) -> int:
    """The bytes of them in files deleted while open, as the status' message says."""
    found = re.search(r"\((\d+) of them in \d+ files? its processes deleted while still "
                      r"open\)", message)
    assert found, message
    return int(found.group(1))


def counted(message: str) -> int:
    """The bytes the supervisor counted, as the status' message says."""
    found = re.search(r"wrote (\d+) bytes", message)
    assert found, message
    return int(found.group(1))


@pytest.mark.parametrize("where", ["outputs", "work"])
def test_files_unlinked_while_held_open_count_against_a_polled_cap(local_factory, where):
    local = local_factory(max_output_bytes="8Mi", disk_limit="polled")
    k = local.create("hides", HIDES.replace("WHERE", repr(where)))
    done = local.wait(k, timeout=60)
    assert done.status["disk"] == "polled"
    cond = next(c for c in done.status["conditions"] if c["type"] == "DiskLimited")
    assert "hold open after deleting them" in cond["message"], cond
    assert local.log(k).startswith("holding"), local.log(k)
    assert_failed_at_the_cap(done)
    # the walk finds only empty directories (a few KiB): what took the count past the
    # cap is what the unlinked files held, however many of them the poll found written
    assert counted(done.message) > CAP, done.message
    assert hidden(done.message) > counted(done.message) - MiB, done.message
    assert done.status["attempts"] == 1  # no retry: the cap is the Job's


# One file of 3x the cap, as fast as the disk takes it; the Job then stays, so that only
# the cap (not the run's end) can stop it, and takes the stop only once it has said what
# it could write.
FLOODS = """
import os, signal, time
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # the stop waits for the report
path = os.path.join(os.environ.get("NODUS_OUTPUTS_DIR", "."), "flood")
chunk = b"x" * (1 << 20)
with open(path, "wb", buffering=0) as f:
    try:
        for _ in range(24):
            f.write(chunk)
    except OSError as exc:
        print("refused:", exc.strerror, flush=True)
    f.flush()
    os.fsync(f.fileno())
    st = os.fstat(f.fileno())
print("size", st.st_size, "allocated", st.st_blocks * 512, flush=True)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
time.sleep(30)
"""


def test_one_file_written_past_a_polled_cap_never_takes_more_than_the_cap(local_factory):
    local = local_factory(max_output_bytes="8Mi", disk_limit="polled")
    k = local.create("floods", FLOODS)
    done = local.wait(k, timeout=60)
    log = local.log(k)
    assert "refused: File too large" in log, log  # EFBIG: RLIMIT_FSIZE, not the poll
    size, allocated = map(int, re.search(r"size (\d+) allocated (\d+)", log).groups())
    # one byte past the cap (so that the poll sees it passed), never a block more
    assert size == CAP + 1, log
    assert allocated <= CAP + 4096, log
    assert_failed_at_the_cap(done)


HOLDS = """
import os, sys
path = sys.argv[1]
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
again = os.open(path, os.O_RDONLY)  # a second descriptor of the same file
os.unlink(path)
os.posix_fallocate(fd, 0, 3 << 20)
memory = os.memfd_create("not-the-disk")  # memory, not the disk
os.ftruncate(memory, 5 << 20)
os.write(memory, b"x" * (1 << 20))
kept = open(path + "-kept", "wb")  # a name left: the walk counts it
kept.write(b"x" * (1 << 20))
kept.flush()
print("ready", flush=True)
sys.stdin.read()
"""


def test_open_deleted_files_of_a_process_are_counted_once(tmp_path):
    """The accounting itself, on a real process: a file unlinked and held open twice
    (two descriptors, one inode) counts once, by its allocated blocks; a memory file and
    a file that still has a name do not count; once the process is gone, nothing does."""
    import subprocess
    import sys

    holder = subprocess.Popen([sys.executable, "-c", HOLDS, str(tmp_path / "gone")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)  # not a capture file
    disk = {os.stat(tmp_path).st_dev}
    try:
        assert holder.stdout.readline() == "ready\n"
        assert diskuse.open_deleted([holder.pid], disk) == (3 * MiB, 1)
        assert diskuse.open_deleted([holder.pid], {os.stat("/proc").st_dev}) == (0, 0)
    finally:
        holder.communicate("")
    assert diskuse.open_deleted([holder.pid], disk) == (0, 0)
