"""Attacks through a Job's files on the local backend: links in its outputs, special
files where the supervisor reads, and many small files. Each is a merged Job manifest
run by a real supervisor under real bubblewrap; each asserts that nothing of the host is
read or copied and that the supervisor keeps control of the Job."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from nodus_gitops.floor.errors import NotFoundError
from nodus_gitops.providers.jsonfiles import read_json
from nodus_gitops.providers.local.outputs import copy_output, output_path

from tests.providers.local.conftest import HAS_BWRAP

pytestmark = pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap is not installed")

SECRET = "host secret: never stored"


@pytest.fixture
def host_dir(tmp_path: Path) -> Path:
    """A host directory the supervisor (root) can read, with a 0600 file in it and in a
    subdirectory."""
    d = tmp_path / "host"
    (d / "sub").mkdir(parents=True)
    for f in (d / "secret.txt", d / "sub" / "secret.txt"):
        f.write_text(SECRET)
        f.chmod(0o600)
    return d


# Links /nodus/outputs/host to a directory of the host (a path that means nothing inside
# the sandbox, but everything to a supervisor that follows it on the host).
LINK_HOST = """
import os, sys
os.symlink(sys.argv[1], "/nodus/outputs/host")
"""


@pytest.mark.parametrize("declared", ["/nodus/outputs/host/secret.txt",
                                      "/nodus/outputs/host/sub"])
def test_an_output_below_a_link_out_of_the_run_is_never_read(local, host_dir, tmp_path,
                                                             declared):
    k = local.create("linked", command=[sys.executable, "-c", LINK_HOST, str(host_dir)],
                     outputs=[{"name": "loot", "path": declared}])
    done = local.wait(k)
    assert (done.phase, done.reason) == ("Failed", "InvalidOutputPath"), done
    assert "outside the outputs directory" in done.message
    assert done.status["outputs"] == {}
    with pytest.raises(NotFoundError):
        copy_output(local.root, k, "loot", tmp_path / "copy")
    with pytest.raises(NotFoundError):
        output_path(local.root, k, "loot")
    assert not (tmp_path / "copy").exists()


# A directory output with a link back to its parent (a loop), a tree of links that
# doubles at every level, and a link to a file inside the outputs: the walk stays finite
# and the file link is stored under its name.
LOOPS = """
import os
d = "/nodus/outputs/d"
os.makedirs(d + "/level0")
open(d + "/a.txt", "w").write("a")
os.symlink("..", d + "/loop")
os.symlink("a.txt", d + "/also-a.txt")
for i in range(40):
    os.makedirs(f"{d}/level{i + 1}")
    os.symlink(f"../level{i + 1}", f"{d}/level{i}/left")
    os.symlink(f"../level{i + 1}", f"{d}/level{i}/right")
"""


def test_links_that_loop_or_fan_out_in_an_output_keep_the_supervisor_in_control(local,
                                                                               tmp_path):
    k = local.create("loops", LOOPS, outputs=[{"name": "d", "path": "/nodus/outputs/d"}])
    done = local.wait(k, timeout=60)
    assert done.phase == "Succeeded", (done, local.log(k))
    assert done.status["outputs"]["d"]["size"] == 2  # a.txt and also-a.txt
    copied, size, _ = copy_output(local.root, k, "d", tmp_path / "copy")
    assert size == 2
    assert sorted(p.name for p in copied.iterdir() if p.is_file()) == ["a.txt", "also-a.txt"]
    assert (copied / "also-a.txt").read_text() == "a" and not (copied / "loop").exists()


# Many names for one file (links and hard links): what a copy would write counts every
# name, so it is held to maxOutputBytes like the files themselves.
FAN_OUT = """
import os
d = "/nodus/outputs/d"
os.makedirs(d)
with open(d + "/big", "wb") as f:
    f.write(b"x" * (256 << 10))
for i in range(40):
    os.symlink("big", f"{d}/soft-{i}")
    os.link(d + "/big", f"{d}/hard-{i}")
"""


def test_an_output_that_names_one_file_many_times_is_held_to_the_cap(local_factory):
    local = local_factory(max_output_bytes="4Mi")
    k = local.create("fan", FAN_OUT, outputs=[{"name": "d", "path": "/nodus/outputs/d"}])
    done = local.wait(k)
    assert (done.phase, done.reason) == ("Failed", "OutputLimitExceeded"), done
    assert "maxOutputBytes" in done.message and done.status["outputs"] == {}


# Leaves a grandchild deaf to SIGTERM that keeps turning the declared output into a link
# to the host and back, then exits 0: the supervisor hashes only once it has ended.
FLIPPER = """
import os, signal, sys, time
out = "/nodus/outputs/model"
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:
            for make in (lambda p: os.symlink(sys.argv[1], p),
                         lambda p: open(p, "w").write("weights")):
                make(out + ".new")
                os.replace(out + ".new", out)
    os._exit(0)
while not os.path.lexists(out):
    time.sleep(0.01)
time.sleep(0.5)
"""


def test_an_output_flipped_to_a_link_by_a_survivor_never_reads_the_host(local, host_dir,
                                                                       tmp_path):
    secret = host_dir / "secret.txt"
    k = local.create("flipper", command=[sys.executable, "-c", FLIPPER, str(secret)],
                     outputs=[{"name": "model", "path": "/nodus/outputs/model"}])
    done = local.wait(k)
    model = local.run(k).outputs / "model"
    if done.phase == "Succeeded":  # the grandchild was killed while it was the file
        assert done.status["outputs"]["model"]["size"] == len("weights")
        copied, _, _ = copy_output(local.root, k, "model", tmp_path / "copy")
        assert copied.read_text() == "weights"
    else:  # killed while it was the link
        assert (done.phase, done.reason) == ("Failed", "InvalidOutputPath"), done
        assert model.is_symlink()
    time.sleep(0.2)
    assert model.is_symlink() == (done.phase != "Succeeded")  # nobody flips it any more


# Makes its units file (which the supervisor reads every second) a FIFO that no one will
# ever write, then waits past its timeout.
UNITS_FIFO = """
import os, time
os.mkfifo(os.environ["NODUS_UNITS_FILE"])
time.sleep(120)
"""


def test_a_units_file_made_a_fifo_does_not_stall_the_supervisor(local):
    k = local.create("fifo", UNITS_FIFO, timeout="3s")
    done = local.wait(k, timeout=30)
    assert (done.phase, done.reason) == ("Failed", "DeadlineExceeded"), done


# Writes 96 MiB to its units file without a newline, then waits to be cancelled.
UNITS_FLOOD = """
import os, time
with open(os.environ["NODUS_UNITS_FILE"], "wb") as f:
    for _ in range(96):
        f.write(b"u" * (1 << 20))
open("/nodus/outputs/written", "w").close()
time.sleep(120)
"""


def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) << 10
    raise AssertionError(f"no VmHWM for {pid}")


def test_a_units_file_without_newlines_does_not_swell_the_supervisor(local):
    k = local.create("units-flood", UNITS_FLOOD)
    run = local.run(k)
    local.wait(k, lambda o: (run.run_outputs_for(0, 1) / "written").exists())
    pid = local.supervisor_pid(k)
    for _ in range(2):  # two heartbeats: each reads the units file, then writes the status
        before = run.status.stat().st_mtime_ns
        local.wait(k, lambda o, b=before: run.status.stat().st_mtime_ns != b)
    peak = _peak_rss(pid)
    local.patch(k, state="Cancelled")
    assert local.wait(k).phase == "Cancelled"
    assert peak < 64 << 20, f"the supervisor's peak RSS was {peak >> 20} MiB"


# 3000 empty files and 500 empty directories: no bytes, but inodes and directory blocks.
EMPTY_FILES = """
import os, time
out = "/nodus/outputs"
for i in range(3000):
    open(f"{out}/f{i}", "w").close()
for i in range(500):
    os.mkdir(f"{out}/d{i}")
time.sleep(60)
"""


def test_many_empty_files_count_against_the_output_cap(local_factory):
    local = local_factory(max_output_bytes="4Mi")
    k = local.create("inodes", EMPTY_FILES)
    done = local.wait(k, timeout=40)
    assert (done.phase, done.reason) == ("Failed", "OutputLimitExceeded"), done
    assert read_json(local.run(k).status)["runs"] == {}


def test_an_image_whose_directory_holds_the_state_is_refused(tmp_path):
    """An image mapped to a virtualenv that also holds the state directory would bind
    the state (the database, other Jobs' run directories) into every run of it."""
    from tests.providers.local.conftest import Local, local_config

    state = tmp_path / "srv" / "state"
    state.mkdir(parents=True)
    (state / "state.db").write_text("SQLite format 3")
    (tmp_path / "srv" / "bin").mkdir()
    local = Local(state / "local", local_config(images={"wide": str(tmp_path / "srv" / "bin")}))
    try:
        k = local.create("wide", command=[sys.executable, "-c", f"print(open("
                                          f"{str(state / 'state.db')!r}).read())"],
                         image="wide")
        done = local.wait(k)
    finally:
        local.cleanup()
    assert (done.phase, done.reason) == ("Failed", "ImagePullFailed"), local.log(k)
    assert "state directory" in done.message and local.log(k) == ""


# Writes a little everywhere in the sandbox's own file systems and reports their sizes.
SCRATCH = """
import json, os
seen = {}
for d in ("/", "/nodus", "/dev", "/dev/shm", "/tmp"):
    path = os.path.join(d, "scratch")
    try:
        with open(path, "wb") as f:
            f.write(b"x" * 4096)
        os.unlink(path)
        st = os.statvfs(d)
        seen[d] = st.f_blocks * st.f_frsize
    except OSError as exc:
        seen[d] = exc.strerror
print(json.dumps(seen))
"""


def test_only_tmp_and_dev_shm_take_memory_and_both_are_capped(local):
    """The sandbox's root and /dev are tmpfs: writable, they would hold whatever a run
    writes in RAM, past /tmp's cap and any output cap."""
    k = local.create("scratch", SCRATCH, resources={"memory": "256Mi"})
    done = local.wait(k)
    assert done.phase == "Succeeded", local.log(k)
    seen = json.loads(local.log(k))
    assert {d: seen[d] for d in ("/", "/nodus", "/dev")} == dict.fromkeys(
        ("/", "/nodus", "/dev"), "Read-only file system")
    assert seen["/tmp"] == seen["/dev/shm"] == 256 << 20


def test_cp_never_replaces_a_device_a_fifo_a_socket_or_a_link(local, tmp_path):
    """The copy takes its place by rename: over a device node (as root, /dev/null), a
    FIFO or a symbolic link it would put a regular file in their place. It refuses, and
    leaves each as it was; into a directory, or through a link to one, it still copies."""
    import os
    import socket
    import stat

    from nodus_gitops.floor.errors import ConfigError
    from nodus_gitops.providers.local.outputs import copy_output

    k = local.create("report", "open('/nodus/outputs/r.json', 'w').write('{}')",
                     outputs=[{"name": "report", "path": "/nodus/outputs/r.json"}])
    assert local.wait(k).phase == "Succeeded"
    device, fifo, link, sock = (tmp_path / n for n in ("null", "fifo", "link", "sock"))
    if os.geteuid() == 0:  # /dev/null's own numbers
        os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    os.mkfifo(fifo)
    (tmp_path / "kept.json").write_text("kept")
    link.symlink_to(tmp_path / "kept.json")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(sock))
    try:
        for dest in (device, fifo, link, sock):
            if not os.path.lexists(dest):
                continue
            before = os.lstat(dest)
            with pytest.raises(ConfigError, match="cp writes a regular file in its place"):
                copy_output(local.root, k, "report", dest)
            after = os.lstat(dest)
            assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino), dest
    finally:
        listener.close()
    assert (tmp_path / "kept.json").read_text() == "kept"
    (tmp_path / "dir").mkdir()
    (tmp_path / "to-dir").symlink_to(tmp_path / "dir")
    copied, _, _ = copy_output(local.root, k, "report", tmp_path / "to-dir")
    assert copied == tmp_path / "to-dir" / "r.json" and (tmp_path / "dir" / "r.json").exists()
