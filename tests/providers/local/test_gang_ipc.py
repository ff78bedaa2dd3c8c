"""What the ranks of one gang use between them on one machine, as PyTorch and NCCL do:
a POSIX shared memory segment in /dev/shm, abstract and path Unix sockets, and TCP to
MASTER_ADDR:MASTER_PORT. Rank 0 makes each; rank 1 attaches to or connects to each and
both write what they saw. Jobs of other gangs reach none of them."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.providers.local.conftest import HAS_BWRAP

pytestmark = pytest.mark.skipif(not HAS_BWRAP, reason="the ranks' sandboxes need bubblewrap")

# Rank 0 makes a shared memory segment, a TCP listener on MASTER_ADDR:MASTER_PORT, an
# abstract and a path Unix socket, says so in the Job's /nodus/work (every rank sees
# it) and waits for rank 1 to be done; rank 1 tries each once and writes what it saw.
RENDEZVOUS = """
import json, os, socket, sys, time
from multiprocessing import shared_memory
rank = int(os.environ["RANK"])
addr = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
tag = os.environ["NODUS_JOB"]
ready, done = "/nodus/work/ready", "/nodus/work/done"

def until(path):
    while not os.path.exists(path):
        time.sleep(0.02)

if rank == 0:
    shm = shared_memory.SharedMemory(name="gang-" + tag, create=True, size=4096)
    shm.buf[:5] = b"hello"
    tcp = socket.create_server(addr)
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind("\\0gang-" + tag)
    abstract.listen()
    path = socket.socket(socket.AF_UNIX)
    path.bind("/nodus/work/gang.sock")
    path.listen()
    open(ready, "w").close()
    print("ready", flush=True)
    until(done)
    saw = {"shm": sorted(os.listdir("/dev/shm"))}
    shm.close()
    shm.unlink()
else:
    until(ready)
    saw = {}
    try:
        shm = shared_memory.SharedMemory(name="gang-" + tag)
        saw["shm"] = bytes(shm.buf[:5]).decode()
        shm.close()
    except OSError as exc:
        saw["shm"] = type(exc).__name__
    for name, family, where in (("tcp", socket.AF_INET, addr),
                                ("abstract", socket.AF_UNIX, "\\0gang-" + tag),
                                ("path", socket.AF_UNIX, "/nodus/work/gang.sock")):
        s = socket.socket(family)
        s.settimeout(5)
        try:
            s.connect(where)
            saw[name] = "connected"
        except OSError as exc:
            saw[name] = type(exc).__name__
        s.close()
    open(done, "w").close()
print("saw", json.dumps(saw), flush=True)
open(os.path.join(os.environ["NODUS_OUTPUTS_DIR"], "saw.json"), "w").write(json.dumps(saw))
"""


def saw(local, k) -> dict[str, dict]:
    outputs = local.run(k).outputs
    return {"rank0": json.loads((outputs / "saw.json").read_text()),
            "rank1": json.loads((outputs / "rank-1" / "saw.json").read_text())}


@pytest.mark.parametrize("network", ["shared", "none"])
def test_the_ranks_of_a_gang_reach_each_other_as_pytorch_does(local_factory, network):
    local = local_factory(network=network)
    k = local.create("gang-ipc", RENDEZVOUS, distributed={"nodes": 2})
    done = local.wait(k, timeout=60)
    assert done.phase == "Succeeded", (done, local.run(k).read_events())
    seen = saw(local, k)
    print(network, seen)
    assert seen["rank1"] == {"shm": "hello", "tcp": "connected", "abstract": "connected",
                             "path": "connected"}, seen
    assert seen["rank0"]["shm"] == ["gang-gang-ipc"], seen


# Gang "a" makes the same four things and waits for the test to release it; a rank of
# gang "b" tries each of a's (its shm name, its abstract name, its port, the path in a's
# work directory as b sees its own).
HOLDS = """
import os, socket, time
from multiprocessing import shared_memory
if os.environ["RANK"] == "0":
    shm = shared_memory.SharedMemory(name="gang-a", create=True, size=4096)
    tcp = socket.create_server(("127.0.0.1", int(os.environ["PROBE_PORT"])))
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind("\\0gang-a")
    abstract.listen()
    path = socket.socket(socket.AF_UNIX)
    path.bind("/nodus/work/gang.sock")
    path.listen()
    print("ready", flush=True)
    while not os.path.exists("/nodus/work/release"):
        time.sleep(0.02)
    shm.close()  # not unlinked: the platform removes what a gang left in /dev/shm
"""
PROBES = """
import json, os, socket
from multiprocessing import shared_memory
saw = {}
try:
    shared_memory.SharedMemory(name="gang-a").close()
    saw["shm"] = "attached"
except OSError as exc:
    saw["shm"] = type(exc).__name__
for name, family, where in (("tcp", socket.AF_INET, ("127.0.0.1", int(os.environ["PROBE_PORT"]))),
                            ("abstract", socket.AF_UNIX, "\\0gang-a"),
                            ("path", socket.AF_UNIX, "/nodus/work/gang.sock")):
    s = socket.socket(family)
    s.settimeout(5)
    try:
        s.connect(where)
        saw[name] = "connected"
    except OSError as exc:
        saw[name] = type(exc).__name__
open(os.path.join(os.environ["NODUS_OUTPUTS_DIR"], "saw.json"), "w").write(json.dumps(saw))
"""


@pytest.mark.parametrize("network", ["shared", "none", "host"])
def test_another_gang_reaches_none_of_a_gangs_shm_or_sockets(local_factory, network):
    from nodus_gitops.providers.local.gang import free_port

    if network == "shared" and shutil.which("slirp4netns") is None:
        pytest.skip("network: shared needs slirp4netns")
    local = local_factory(network=network)
    port = str(free_port())
    a = local.create("a", HOLDS, distributed={"nodes": 2}, env={"PROBE_PORT": port})
    local.wait(a, lambda o: "ready" in local.log(a, 0), timeout=60)
    b = local.create("b", PROBES, distributed={"nodes": 2}, env={"PROBE_PORT": port})
    probed = local.wait(b, timeout=60)
    (local.run(a).work / "release").touch()
    held = local.wait(a, timeout=60)
    assert (probed.phase, held.phase) == ("Succeeded", "Succeeded"), (probed, held)
    seen = json.loads((local.run(b).outputs / "saw.json").read_text())
    assert seen["shm"] == "FileNotFoundError", seen
    assert seen["abstract"] in ("ConnectionRefusedError", "PermissionError"), seen
    assert seen["path"] == "FileNotFoundError", seen
    # a loopback of the gang's own (network: shared or none); the host's, everyone's, with
    # network: host
    assert seen["tcp"] == ("connected" if network == "host" else "ConnectionRefusedError"), seen
    # what gang a left in its /dev/shm went when it finished
    assert list(local.run(a).gang_shm.iterdir()) == []


# A rank fills its /dev/shm: the Job's files, held to maxOutputBytes, not the memory.
FILLS_SHM = """
with open("/dev/shm/big", "wb") as f:
    for _ in range(40):
        f.write(b"x" * 100 * 1024)
"""


def test_a_gangs_shm_counts_against_the_jobs_disk_cap(local_factory):
    local = local_factory(max_output_bytes="1Mi")
    k = local.create("gang-shm-full", FILLS_SHM, distributed={"nodes": 2}, backoffLimit=0)
    done = local.wait(k, timeout=60)
    assert (done.phase, done.reason) == ("Failed", "OutputLimitExceeded"), done
    assert list(local.run(k).gang_shm.iterdir()) == []
