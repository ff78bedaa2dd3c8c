"""A run's network on the local backend: with `network: shared` (the default) a Job has a
network of its own with outbound access through slirp4netns and reaches nothing on the
host's loopback (a trust-auth PostgreSQL, the reconciler's own API); `network: host`
is the host's network namespace, loopback included; a machine without slirp4netns
refuses `network: shared` instead of falling back to the host's network. Real
supervisors, real bubblewrap, real slirp4netns, real sockets."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from nodus_gitops.providers.jsonfiles import read_json
from nodus_gitops.providers.local import procs

from tests.providers.local.conftest import HAS_BWRAP
from tests.providers.local.test_sandbox import answering_hello

HAS_SLIRP = shutil.which("slirp4netns") is not None
pytestmark = [pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap is not installed")]
slirp_only = pytest.mark.skipif(not HAS_SLIRP, reason="slirp4netns is not installed")


@contextmanager
def hello_server(host: str) -> Iterator[int]:
    """A TCP server on `host` that answers 'hello' to every connection; yields its port."""
    server = socket.create_server((host, 0))
    with answering_hello(server):
        yield server.getsockname()[1]


def host_address() -> str | None:
    """The host's first address that is not a loopback one (`hostname -I`)."""
    try:
        out = subprocess.run(["hostname", "-I"], capture_output=True, text=True,
                             timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return next((a for a in out.split() if ":" not in a and not a.startswith("127.")), None)


# Connects to every host:port given; prints {address: "hello" or the error's errno name}.
CONNECT = """
import errno, json, socket, sys
seen = {}
for where in sys.argv[1:]:
    host, _, port = where.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=5) as s:
            seen[where] = s.recv(5).decode()
    except OSError as exc:
        seen[where] = errno.errorcode.get(exc.errno, type(exc).__name__)
print(json.dumps(seen))
"""


def connect(local, name: str, *where: str, **spec) -> tuple[object, dict[str, str]]:
    k = local.create(name, command=[sys.executable, "-c", CONNECT, *where], **spec)
    done = local.wait(k, timeout=60)
    assert done.phase == "Succeeded", (done, local.log(k))
    return done, json.loads(local.log(k).splitlines()[-1])


def sandboxed(done) -> str:
    return next(c for c in done.status["conditions"] if c["type"] == "Sandboxed")["message"]


@slirp_only
def test_a_job_reaches_nothing_on_the_hosts_loopback(local_factory):
    """The attack: a service on the host's 127.0.0.1 (a trust-auth database, the
    dashboard's API), tried at 127.0.0.1 and at slirp4netns' gateway 10.0.2.2."""
    local = local_factory()
    with hello_server("127.0.0.1") as port:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            assert s.recv(5) == b"hello"  # the host itself reaches it
        done, seen = connect(local, "loopback", f"127.0.0.1:{port}", f"10.0.2.2:{port}")
    # the run's own loopback has no such port; slirp4netns refuses its gateway's
    assert seen[f"127.0.0.1:{port}"] == "ECONNREFUSED", seen
    assert seen[f"10.0.2.2:{port}"] in ("ECONNREFUSED", "ENETUNREACH", "EHOSTUNREACH"), seen
    assert done.status["network"] == "shared"
    assert "outbound through slirp4netns" in sandboxed(done)
    assert "loopback (127.0.0.1, 10.0.2.2) is unreachable" in sandboxed(done)


@slirp_only
def test_a_job_still_reaches_the_hosts_other_addresses(local_factory):
    """What 'Jobs download data' needs: outbound connections leave through slirp4netns."""
    address = host_address()
    if address is None:
        pytest.skip("this machine has no address but a loopback one (hostname -I)")
    local = local_factory()
    with hello_server(address) as port:
        _, seen = connect(local, "outbound", f"{address}:{port}")
    assert seen == {f"{address}:{port}": "hello"}, seen


@slirp_only
def test_network_host_keeps_the_hosts_network_loopback_included(local_factory):
    local = local_factory(network="host")
    with hello_server("127.0.0.1") as port:
        done, seen = connect(local, "host-net", f"127.0.0.1:{port}")
    assert seen == {f"127.0.0.1:{port}": "hello"}, seen
    assert done.status["network"] == "host"
    assert "network: host: the host's own, its loopback services included" in sandboxed(done)


# Rank 0 listens on MASTER_PORT; rank 1 connects to it; both try the host's loopback.
GANG = """
import errno, json, os, socket, sys, time
rank = int(os.environ["RANK"])
addr = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
saw = {}
if rank == 0:
    server = socket.create_server(addr)
    server.settimeout(30)
    conn, _ = server.accept()
    saw["peer"] = conn.recv(5).decode()
else:
    for _ in range(600):
        try:
            with socket.create_connection(addr, timeout=5) as s:
                s.sendall(b"rank1")
            saw["peer"] = "connected"
            break
        except ConnectionRefusedError:
            time.sleep(0.05)
for where in sys.argv[1:]:
    host, _, port = where.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=5) as s:
            saw[where] = s.recv(5).decode()
    except OSError as exc:
        saw[where] = errno.errorcode.get(exc.errno, type(exc).__name__)
open(os.path.join(os.environ["NODUS_OUTPUTS_DIR"], "saw.json"), "w").write(json.dumps(saw))
"""


@slirp_only
@pytest.mark.skipif(os.geteuid() != 0, reason="a gang's own network namespace needs root")
def test_the_ranks_of_a_gang_share_one_network_through_one_slirp4netns(local_factory):
    local = local_factory()
    outside = host_address()
    with hello_server("127.0.0.1") as port, \
            (hello_server(outside) if outside else hello_server("127.0.0.1")) as out_port:
        targets = [f"127.0.0.1:{port}", f"10.0.2.2:{port}"]
        if outside:
            targets.append(f"{outside}:{out_port}")
        k = local.create("gang-net", command=[sys.executable, "-c", GANG, *targets],
                         distributed={"nodes": 2})
        done = local.wait(k, timeout=90)
    assert done.phase == "Succeeded", (done, local.run(k).read_events())
    outputs = local.run(k).outputs
    rank0 = json.loads((outputs / "saw.json").read_text())
    rank1 = json.loads((outputs / "rank-1" / "saw.json").read_text())
    assert (rank0["peer"], rank1["peer"]) == ("rank1", "connected"), (rank0, rank1)
    for saw in (rank0, rank1):
        assert saw[targets[0]] == "ECONNREFUSED", saw
        assert saw[targets[1]] in ("ECONNREFUSED", "ENETUNREACH", "EHOSTUNREACH"), saw
        if outside:
            assert saw[targets[2]] == "hello", saw
    started = next(e for e in local.run(k).read_events() if e["reason"] == "GangStarted")
    assert "outbound through slirp4netns (pid " in started["message"], started
    pid = int(started["message"].split("slirp4netns (pid ")[1].split(")")[0])
    assert not os.path.exists(f"/proc/{pid}")  # ended and reaped with the gang


def net_pid(local, k) -> tuple[int, int | None]:
    """The running run's slirp4netns: its pid and start time."""
    def has_net_file(o) -> bool:  # the run records are in the status file, not observed
        return o.phase == "Running" and any(
            r.get("netPid")
            for r in (read_json(local.run(k).status) or {}).get("runs", {}).values())

    local.wait(k, has_net_file, timeout=60)
    runs = read_json(local.run(k).status)["runs"]
    pid = next(r["netPid"] for r in runs.values() if r.get("netPid"))
    assert Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].endswith(b"slirp4netns")
    return pid, procs.start_ticks(pid)


def gone(pid: int, ticks: int | None) -> bool:
    """No such process, not even a zombie: it ended and was reaped."""
    return not procs.is_same_process(pid, ticks) and not (
        os.path.exists(f"/proc/{pid}") and procs.start_ticks(pid) == ticks)


@slirp_only
@pytest.mark.parametrize("end", ["cancel", "finish"])
def test_no_slirp4netns_outlives_its_run(local_factory, end):
    local = local_factory()
    if end == "cancel":
        k = local.create("net-cancel", "import time; time.sleep(300)")
    else:
        k = local.create("net-finish", "import os, time\n"
                         "while not os.path.exists('/nodus/work/go'): time.sleep(0.02)")
    pid, ticks = net_pid(local, k)
    if end == "cancel":
        local.patch(k, state="Cancelled")
        assert local.wait(k, timeout=60).phase == "Cancelled"
    else:
        (local.run(k).work / "go").touch()
        assert local.wait(k, timeout=60).phase == "Succeeded"
    assert gone(pid, ticks), Path(f"/proc/{pid}/stat").read_text()


@slirp_only
def test_an_ended_runs_slirp4netns_is_reaped_while_the_jobs_other_runs_run(local_factory):
    """The supervisor does not wait for each run's slirp4netns to exit (about 20 ms, the
    kernel detaching its tap) between runs, yet none is left behind: index 0's is
    reaped while index 1 still runs."""
    local = local_factory()
    k = local.create("net-indexes", "import os, time\n"
                     "go = f'/nodus/work/go-{os.environ[\"NODUS_INDEX\"]}'\n"
                     "while not os.path.exists(go): time.sleep(0.02)",
                     completions=2, parallelism=2)

    def net_pids() -> dict[str, int]:
        runs = (read_json(local.run(k).status) or {}).get("runs", {})
        return {str(r["index"]): r["netPid"] for r in runs.values() if r.get("netPid")}

    local.wait(k, lambda o: len(net_pids()) == 2, timeout=60)
    pids = net_pids()
    first = pids["0"], procs.start_ticks(pids["0"])
    (local.run(k).work / "go-0").touch()
    local.wait(k, lambda o: "0" not in net_pids() and gone(*first), timeout=30)
    assert local.provider.get(k).phase == "Running"
    assert not gone(pids["1"], procs.start_ticks(pids["1"]))
    (local.run(k).work / "go-1").touch()
    assert local.wait(k, timeout=60).phase == "Succeeded"


def slirp_children(parent: int) -> list[tuple[int, int | None]]:
    """The slirp4netns processes `parent` started (zombies included): pid, start time."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except (OSError, ValueError):
            continue
        comm, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:]
        if comm == "slirp4netns" and int(rest.split()[1]) == parent:
            found.append((int(entry), procs.start_ticks(int(entry))))
    return found


@slirp_only
def test_a_run_directory_removed_while_runs_start_leaves_no_slirp4netns(local_factory):
    """rm -r of a Job's run directory while its supervisor starts runs (a run's
    directories can vanish under it mid-step): the supervisor ends every run and reaps
    every slirp4netns it started before it leaves, none left to PID 1 as a zombie."""
    local = local_factory()
    k = local.create("net-removed", "pass", completions=400, parallelism=16)
    local.wait(k, lambda o: (read_json(local.run(k).status) or {}).get("succeeded", 0) >= 20,
               timeout=60)
    supervisor = read_json(local.run(k).status)["supervisor"]
    started = slirp_children(supervisor["pid"])
    shutil.rmtree(local.run(k).path, ignore_errors=True)
    deadline = time.monotonic() + 30
    while procs.is_same_process(supervisor["pid"], supervisor["ticks"]) and (
            time.monotonic() < deadline):
        time.sleep(0.05)
    assert not procs.is_same_process(supervisor["pid"], supervisor["ticks"])
    assert started and [p for p in started if not gone(*p)] == []


@slirp_only
def test_a_slirp4netns_that_dies_ends_its_run(local_factory):
    """A run never keeps going without the network it was given, nor falls back."""
    local = local_factory()
    k = local.create("net-killed", "import time; time.sleep(300)", backoffLimit=0)
    pid, _ = net_pid(local, k)
    os.kill(pid, 9)
    done = local.wait(k, timeout=60)
    assert (done.phase, done.reason) == ("Failed", "BackoffLimitExceeded"), done
    assert "the run's network ended: slirp4netns" in local.log(k)
    failed = next(e for e in local.run(k).read_events() if e["reason"] == "RunFailed")
    assert f"stopped: the run's network ended: slirp4netns (pid {pid})" in failed["message"]


def test_without_slirp4netns_network_shared_refuses_with_the_fix(local_factory, tmp_path,
                                                                 monkeypatch):
    """Never a silent fall back to the host's network."""
    only_bwrap = Path(tempfile.mkdtemp(prefix="nodus-only-bwrap-", dir="/tmp"))
    only_bwrap.chmod(0o755)  # the run user reaches bwrap through it
    (only_bwrap / "bwrap").symlink_to(shutil.which("bwrap"))  # type: ignore[arg-type]
    monkeypatch.setenv("PATH", str(only_bwrap))
    local = local_factory()
    k = local.create("no-slirp", "print('ran')")
    done = local.wait(k)
    assert (done.phase, done.reason) == ("Failed", "SandboxUnavailable"), done
    assert "network: shared needs slirp4netns" in done.message
    assert "apt-get install slirp4netns" in done.fix and "network: none" in done.fix
    assert "network: host" not in done.fix  # it would hand the run the host's loopback
    assert local.log(k) == ""  # nothing ran


@pytest.mark.parametrize(("host", "expected"), [
    # systemd-resolved's stub: out of the run's reach, so slirp4netns' forwarder instead
    ("search corp.example\nnameserver 127.0.0.53\noptions edns0 trust-ad\n",
     "nameserver 10.0.2.3\nsearch corp.example\noptions edns0 trust-ad\n"),
    ("nameserver ::1\nnameserver 127.0.0.1\n", "nameserver 10.0.2.3\n"),
    # any server the run can reach through slirp4netns: the host's file as it is
    ("nameserver 127.0.0.53\nnameserver 10.255.255.53\n", None),
    ("nameserver 10.255.255.53\n", None),
    ("# no nameserver at all: the resolver's own default\n", None),
])
def test_a_run_on_its_own_network_gets_a_resolver_it_can_reach(tmp_path, host, expected):
    from nodus_gitops.providers.local.sandbox import own_net_resolv_conf

    path = tmp_path / "resolv.conf"
    path.write_text(host)
    got = own_net_resolv_conf(str(path))
    assert got == (None if expected is None else expected.encode())
    assert own_net_resolv_conf(str(tmp_path / "missing")) is None


@slirp_only
def test_a_run_on_its_own_network_reads_the_resolv_conf_chosen_for_it(local_factory):
    from nodus_gitops.providers.local.sandbox import own_net_resolv_conf

    local = local_factory()
    k = local.create("resolv", "print(open('/etc/resolv.conf').read(), end='')")
    assert local.wait(k).phase == "Succeeded", local.log(k)
    own = own_net_resolv_conf()
    expected = own.decode() if own is not None else Path("/etc/resolv.conf").read_text()
    assert local.log(k) == expected.rstrip("\n")
