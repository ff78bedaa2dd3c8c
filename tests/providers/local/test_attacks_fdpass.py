"""Attacks between Jobs that share the host's network namespace (`network: host`; with
`network: shared`, the default, each run has a namespace of its own and these sockets
are apart anyway): passing an open directory to another Job over an abstract Unix
socket, and what such a descriptor would let the other Job do, swapping a finished
output for a link to a host file that a later stage takes as its input. Real
supervisors, real bubblewrap."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest
from nodus_gitops.providers.local import landlock

from tests.providers.local.conftest import HAS_BWRAP

pytestmark = pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap is not installed")
needs_scoping = pytest.mark.skipif(landlock.scoping() is not None,
                                   reason=f"{landlock.scoping()}")

SECRET = "host secret: never read by a run"


@pytest.fixture
def local(local_factory):
    """Runs in the host's network namespace: only the Landlock scope keeps them apart."""
    return local_factory(network="host")

# The keeper listens on an abstract socket and waits for a descriptor.
KEEPER = """
import array, socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind("\\0" + sys.argv[1])
s.listen()
print("listening", flush=True)
s.settimeout(float(sys.argv[2]))
try:
    conn, _ = s.accept()
    fds = array.array("i")
    msg, anc, _, _ = conn.recvmsg(16, socket.CMSG_SPACE(4))
    print("got", len(anc), "descriptors", flush=True)
except OSError as exc:
    print("no one came:", type(exc).__name__, flush=True)
"""

# The thief sends a descriptor of its own /nodus/outputs to whoever listens there.
THIEF = """
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect("\\0" + sys.argv[1])
except OSError as exc:
    print("refused:", exc.errno, flush=True)
    sys.exit(0)
fd = os.open("/nodus/outputs", os.O_RDONLY | os.O_DIRECTORY)
s.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fd.to_bytes(4, sys.byteorder))])
print("sent", flush=True)
"""


@needs_scoping
def test_a_job_cannot_pass_a_descriptor_to_another_job_over_an_abstract_socket(local):
    name = f"nodus-keeper-{os.getpid()}"
    keeper = local.create("keeper", command=[sys.executable, "-c", KEEPER, name, "8"])
    local.wait(keeper, lambda o: "listening" in local.log(keeper))
    thief = local.create("thief", command=[sys.executable, "-c", THIEF, name])
    done = local.wait(thief)
    assert done.phase == "Succeeded", local.log(thief)
    assert local.log(thief).startswith("refused: 1"), local.log(thief)  # EPERM: scoped
    assert local.wait(keeper, timeout=30).phase == "Succeeded"
    assert "no one came" in local.log(keeper), local.log(keeper)
    cond = next(c for c in done.status["conditions"] if c["type"] == "Sandboxed")
    assert "Landlock domain of its own" in cond["message"]


@needs_scoping
def test_a_run_cannot_reach_the_hosts_abstract_sockets(local):
    name = f"nodus-host-{os.getpid()}"
    host = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    host.bind("\0" + name)
    host.listen()
    try:
        k = local.create("reach", command=[sys.executable, "-c", THIEF, name])
        assert local.wait(k).phase == "Succeeded"
        assert local.log(k).startswith("refused: 1"), local.log(k)
    finally:
        host.close()


# Two processes of one run (a launcher and its worker, as NCCL's are) still talk.
WITHIN = """
import os, socket, sys, time
name = "\\0" + sys.argv[1]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(name)
s.listen()
if os.fork() == 0:
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.connect(name)
    c.sendall(b"hello from the worker")
    os._exit(0)
conn, _ = s.accept()
print(conn.recv(64).decode(), flush=True)
os.wait()
"""


def test_the_processes_of_one_run_still_reach_each_others_abstract_sockets(local):
    k = local.create("within", command=[sys.executable, "-c", WITHIN, f"nodus-w-{os.getpid()}"])
    assert local.wait(k).phase == "Succeeded", local.log(k)
    assert local.log(k) == "hello from the worker"


WRITES_DIR_OUTPUT = """
import os, time
os.makedirs("/nodus/outputs/model")
open("/nodus/outputs/model/weights.txt", "w").write("weights")
while not os.path.exists("/nodus/work/go"):
    time.sleep(0.05)
"""


# Reads its input; the index WAIT names then waits for the test.
READS_INPUT = """
import os, time
d = os.environ["NODUS_INPUT_MODEL"]
print(sorted(os.listdir(d)), flush=True)
for name in os.listdir(d):
    print(open(os.path.join(d, name)).read(), flush=True)
while os.environ.get("WAIT") == os.environ["NODUS_INDEX"] and not os.path.exists("/nodus/work/go"):
    time.sleep(0.05)
"""


@pytest.fixture
def host_dir(tmp_path: Path) -> Path:
    host = tmp_path / "host"
    host.mkdir()
    (host / "secret.txt").write_text(SECRET)
    return host


def made_output(local) -> tuple[int, Path]:
    """A finished stage's output, and a descriptor of that Job's files kept from while it
    ran: what a keeper Job got passed (the files' root here; a Job's own /nodus/outputs
    serves the same), which keeps the filesystem alive and writable after it finished."""
    made = local.create("make", WRITES_DIR_OUTPUT,
                        outputs=[{"name": "model", "path": "/nodus/outputs/model"}])
    local.wait(made, lambda o: o.status["active"] == 1)
    run = local.run(made)
    held = os.open(run.files, os.O_RDONLY | os.O_DIRECTORY)
    (run.work / "go").touch()
    assert local.wait(made).phase == "Succeeded"
    return held, Path(local.provider.output_location(made, "model"))


def swap_for_link(held: int, location: Path, target: Path) -> None:
    """Through the descriptor: the output becomes a link to a host directory (a
    RENAME_EXCHANGE has the same end)."""
    name = f"outputs/{location.name}"
    os.rename(name, f"{name}.moved", src_dir_fd=held, dst_dir_fd=held)
    os.symlink(target, name, dir_fd=held)


def test_an_output_swapped_for_a_link_before_a_later_stage_starts_fails_it(local, host_dir):
    held, location = made_output(local)
    swap_for_link(held, location, host_dir)
    os.close(held)
    use = local.create("use", READS_INPUT, inputs=[{"name": "model", "path": str(location)}])
    done = local.wait(use)
    assert SECRET not in local.log(use)
    assert (done.phase, done.reason) == ("Failed", "StorageUnavailable"), done
    assert "input model" in done.message and "is a symbolic link" in done.message


def test_an_output_swapped_for_a_link_while_a_later_stage_runs_is_never_bound(local, host_dir):
    held, location = made_output(local)
    use = local.create("use", READS_INPUT, inputs=[{"name": "model", "path": str(location)}],
                       completions=2, parallelism=1, backoffLimit=0, env={"WAIT": "0"})
    local.wait(use, lambda o: "weights" in local.log(use, 0))
    swap_for_link(held, location, host_dir)  # after the host looked at it
    os.close(held)
    (local.run(use).work / "go").touch()
    done = local.wait(use)
    log = local.log(use, 1)
    assert SECRET not in log and "secret.txt" not in log, log
    assert done.phase == "Failed", done
    assert "is a symbolic link" in log, log


def test_an_image_mapped_through_a_link_of_the_hosts_still_runs(local_factory, tmp_path):
    """The runtime is the host's, named by its config (a mapped image behind a link, as
    /opt/venvs -> /srv/venvs often is): bound from its real path, at the path it names."""
    real = tmp_path / "srv" / "tools"
    (real / "bin").mkdir(parents=True)
    (real / "bin" / "tool").write_text("#!/bin/sh\necho from-the-image\n")
    (real / "bin" / "tool").chmod(0o755)
    (tmp_path / "opt").symlink_to(tmp_path / "srv")
    local = local_factory(images={"nodus/tools": str(tmp_path / "opt" / "tools" / "bin")})
    k = local.create("linked-image", command=["tool"], image="nodus/tools")
    done = local.wait(k)
    assert done.phase == "Succeeded", local.log(k)
    assert local.log(k) == "from-the-image"
