"""What contains a run on the local backend: its user, its namespaces, its network, its
environment, its files on the host, and what happens where bubblewrap cannot work."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from nodus_gitops.floor.errors import ConfigError
from nodus_gitops.floor.phases import FIXES
from nodus_gitops.providers.local.build import local_config
from nodus_gitops.providers.local.runtime import python_roots
from nodus_gitops.providers.local.runuser import resolve as run_user

from tests.providers.local.conftest import HAS_BWRAP
from tests.support.hostsim import HOSTSIM

bwrap_only = pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap is not installed")
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="only root can switch users")

INSIDE = """
import json, os, socket
print(json.dumps({"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(),
                  "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
                  "root": sorted(os.listdir("/")), "nodus": sorted(os.listdir("/nodus")),
                  "cwd": os.getcwd(), "home": os.environ["HOME"],
                  "tmp": os.access("/tmp", os.W_OK)}))
"""


@bwrap_only
@root_only
def test_a_run_is_contained_as_the_run_user(local):
    k = local.create("inside", INSIDE)
    done = local.wait(k)
    assert done.phase == "Succeeded", local.log(k)
    seen = json.loads(local.log(k))
    # the default run user: nodus-run where the quick start made it, else 65534
    user = run_user(None, None)
    assert user.uid != 0 and user.gid != 0
    assert (seen["uid"], seen["gid"], seen["groups"]) == (user.uid, user.gid, [])
    assert seen["pids"] == [1, 2]  # bubblewrap's init and the command: nothing of the host
    # The runtime, the sandbox's own mounts, and the top folder of each Python
    # installation the run needs (this checkout's virtualenv lies wherever it was cloned).
    pythons = {Path(root).parts[1] for root in python_roots(sys.executable)}
    assert set(seen["root"]) <= {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32",
                                 "etc", "proc", "dev", "tmp", "nodus"} | pythons
    assert seen["nodus"] == [".shim", ".units", "outputs", "state", "work"]
    assert (seen["cwd"], seen["home"], seen["tmp"]) == ("/nodus/work", "/tmp", True)
    assert done.status["sandbox"] == "bubblewrap" and done.status["network"] == "shared"
    assert done.status["runAs"].startswith(f"{user.uid}:{user.gid} ")
    cond = next(c for c in done.status["conditions"] if c["type"] == "Sandboxed")
    assert (cond["status"], cond["reason"]) == ("True", "Bubblewrap")
    run = local.run(k)
    assert stat.S_IMODE(run.path.stat().st_mode) == 0o700
    for writable in (run.outputs, run.work, run.state_for(0)):
        st = writable.stat()
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (user.uid, user.gid, 0o700)
    assert run.logs.stat().st_uid == 0  # logs are the supervisor's, out of the run's reach


@bwrap_only
@root_only
def test_the_run_user_and_group_are_settings(local_factory):
    local = local_factory(run_as_user=65533, run_as_group=65532)
    k = local.create("other-user", "import os; print(os.getuid(), os.getgid())")
    done = local.wait(k)
    assert done.phase == "Succeeded", local.log(k)
    assert local.log(k) == "65533 65532"
    assert done.status["runAs"].startswith("65533:65532 ")


@contextmanager
def answering_hello(server: socket.socket) -> Iterator[None]:
    """Answer 'hello' to every connection to the listening `server` until the block
    ends; then close it."""
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(b"hello")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)
        server.close()


@pytest.fixture(params=["127.0.0.1", "abstract"])
def listener(request):
    """A server on the host that answers 'hello': TCP on 127.0.0.1, or an abstract Unix
    socket (abstract sockets belong to the network namespace, like the loopback)."""
    if request.param == "abstract":
        name = f"nodus-test-{os.getpid()}-{threading.get_ident()}"
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(b"\0" + name.encode())
        server.listen()
        address = f"abstract:{name}"
    else:
        server = socket.create_server(("127.0.0.1", 0))
        address = f"tcp:{server.getsockname()[1]}"
    with answering_hello(server):
        yield address


CONNECT = """
import socket, sys
kind, _, where = sys.argv[1].partition(":")
try:
    if kind == "tcp":
        s = socket.create_connection(("127.0.0.1", int(where)), timeout=5)
    else:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(b"\\0" + where.encode())
    with s:
        print(s.recv(5).decode())
except OSError as exc:
    print(type(exc).__name__)
"""


@bwrap_only
@pytest.mark.parametrize(("network", "expected"), [("host", "hello"),
                                                   ("shared", "ConnectionRefusedError"),
                                                   ("none", "ConnectionRefusedError")])
def test_the_hosts_loopback_is_reached_only_with_network_host(local_factory, listener,
                                                               network, expected):
    """A service of the host on 127.0.0.1 (the dashboard, PostgreSQL with trust auth) or
    on an abstract socket: only `network: host` shares the host's namespace."""
    from nodus_gitops.providers.local import landlock

    if network == "shared" and shutil.which("slirp4netns") is None:
        pytest.skip("network: shared needs slirp4netns")
    if listener.startswith("abstract:") and network == "host" and landlock.scoping() is None:
        expected = "PermissionError"  # the host's, in the shared namespace: out of scope
    local = local_factory(network=network)
    k = local.create(f"net-{network}", command=[sys.executable, "-c", CONNECT, listener])
    done = local.wait(k)
    assert done.phase == "Succeeded", local.log(k)
    assert local.log(k) == expected
    assert done.status["network"] == network


@bwrap_only
def test_only_the_variables_the_config_names_pass_through(local_factory, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf-for-runs")
    monkeypatch.setenv("GITHUB_TOKEN", "for-the-reconciler-only")
    local = local_factory(pass_env=("HF_TOKEN", "NOT_SET_ANYWHERE"))
    code = "import json, os; print(json.dumps(dict(os.environ)))"
    k = local.create("env", code, env={"GREETING": "hi"})
    assert local.wait(k).phase == "Succeeded", local.log(k)
    env = json.loads(local.log(k))
    assert env["HF_TOKEN"] == "hf-for-runs" and env["GREETING"] == "hi"
    assert "GITHUB_TOKEN" not in env and "NOT_SET_ANYWHERE" not in env
    assert env["PATH"] == "/usr/local/bin:/usr/bin:/bin"
    platform = {k for k in env if k.startswith(("NODUS_", "JOB_", "CUDA_"))}
    assert set(env) - platform == {"HF_TOKEN", "GREETING", "PATH", "HOME", "TMPDIR", "PWD",
                                   "PYTHONUNBUFFERED", "PYTHONPATH"} | (
        {k for k in ("LANG", "LC_ALL", "LC_CTYPE", "TZ") if k in os.environ})


@pytest.fixture
def admin_bin() -> Iterator[Path]:
    """A directory on the reconciler's PATH that every user can read, as /usr/local/bin."""
    path = Path(tempfile.mkdtemp(prefix="nodus-admin-bin-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("machine", ["no bubblewrap", "namespaces refused"])
def test_where_bubblewrap_cannot_work_jobs_fail_with_the_fix(local_factory, tmp_path,
                                                             monkeypatch, admin_bin, machine):
    if machine == "no bubblewrap":
        monkeypatch.setenv("PATH", str(tmp_path / "empty"))
        words = "not installed"
    else:  # a bubblewrap the kernel refuses namespaces to, as in some containers
        (admin_bin / "bwrap").write_text("#!/bin/sh\necho 'bwrap: No permissions to "
                                         "creating new namespace' >&2\nexit 1\n")
        (admin_bin / "bwrap").chmod(0o755)
        monkeypatch.setenv("PATH", f"{admin_bin}:{os.environ['PATH']}")
        words = "No permissions to creating new namespace"
    local = local_factory()
    k = local.create("refused", "print('ran')")
    done = local.wait(k)
    assert (done.phase, done.reason) == ("Failed", "SandboxUnavailable")
    assert words in done.message
    if machine == "no bubblewrap":  # the cause is known: its own fix, the install first
        assert done.fix.startswith("install bubblewrap (apt-get install bubblewrap")
    else:
        assert done.fix == FIXES["SandboxUnavailable"]
    assert "sandbox: none" in done.fix
    assert local.log(k) == ""  # nothing ran


def test_sandbox_none_is_explicit_and_visible(local_factory, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{tmp_path / 'empty'}:{os.environ['PATH']}")
    local = local_factory(sandbox="none")
    k = local.create("trusted", "import os; print(os.getuid())")
    done = local.wait(k)
    assert done.phase == "Succeeded", local.log(k)
    assert local.log(k) == str(os.getuid())
    assert done.status["sandbox"] == "none" and done.status["network"] == "host"
    cond = next(c for c in done.status["conditions"] if c["type"] == "Sandboxed")
    assert (cond["status"], cond["reason"]) == ("False", "SandboxDisabled")
    events = [e for e in local.run(k).read_events() if e["reason"] == "NoSandbox"]
    assert len(events) == 1 and events[0]["type"] == "Warning"


@pytest.mark.parametrize(("settings", "words"), [
    ({"sandbox": "maybe"}, "providers.local.sandbox: 'maybe' (use bubblewrap or none)"),
    ({"network": "wide"}, "providers.local.network: 'wide' (use shared, none or host)"),
    ({"maxLogBytes": "lots"}, "providers.local.maxLogBytes: 'lots' is not a quantity"),
    ({"maxOutputBytes": 0}, "providers.local.maxOutputBytes: 0 must be more than 0"),
    ({"passEnv": "HF_TOKEN"}, "providers.local.passEnv: 'HF_TOKEN' is not a list"),
    ({"useBubblewrap": True}, "providers.local.useBubblewrap: replaced by sandbox"),
    ({"sandbox": "none", "network": "none"},
     "providers.local.network: none needs sandbox: bubblewrap"),
])
def test_settings_that_cannot_work_name_the_setting(settings, words):
    with pytest.raises(ConfigError) as caught:
        local_config("local", {"type": "local", **settings})
    assert words in str(caught.value)


@root_only
def test_an_unknown_run_user_is_a_config_error(local_factory):
    local = local_factory(run_as_user="no-such-user-here")
    with pytest.raises(ConfigError, match="runAsUser: there is no user 'no-such-user-here'"):
        local.create("x", "pass")


NON_ROOT_RECONCILER = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from nodus_gitops.providers.base import Workload
from nodus_gitops.providers.local.config import LocalConfig
from nodus_gitops.providers.local.provider import LocalProvider
from nodus_gitops.floor.identity import ResourceKey

root = sys.argv[2]
code = ("import json, os; print(json.dumps([os.getuid(), "
        "sorted(p for p in os.listdir('/proc') if p.isdigit()), os.path.exists(%r)]))" % root)
provider = LocalProvider(root, LocalConfig(detect_gpus=False, prestart_supervisor=False))
key = ResourceKey("Job", "p", "j")
provider.create(Workload(key, {"apiVersion": "nodus.dev/v1", "kind": "Job",
                               "metadata": {"name": "j"},
                               "spec": {"command": ["python3", "-c", code]}}, "h"), "k1")
deadline = time.time() + 60
while (seen := provider.get(key)).phase not in ("Succeeded", "Failed"):
    assert time.time() < deadline, seen
    time.sleep(0.05)
print(json.dumps({"phase": seen.phase, "runAs": seen.status["runAs"],
                  "log": list(provider.logs(key))}))
"""


def _installed_layout(into: Path) -> str:
    """The package's folders copied as a wheel lays them out (nodus_gitops/, with
    providers/, state/ and schemas/ inside): a folder to put on sys.path."""
    import nodus_gitops
    import nodus_gitops.providers
    import nodus_gitops.schemas
    import nodus_gitops.state

    package = into / "nodus_gitops"
    skip = shutil.ignore_patterns("__pycache__")
    shutil.copytree(Path(nodus_gitops.__file__).parent, package, ignore=skip)
    for sub in (nodus_gitops.providers, nodus_gitops.state, nodus_gitops.schemas):
        shutil.copytree(Path(sub.__file__).parent, package / sub.__name__.split(".")[-1],
                        ignore=skip, dirs_exist_ok=True)
    for path in (into, *into.rglob("*")):
        os.chown(path, 65534, 65534)
    return str(into)


@bwrap_only
@root_only
def test_a_reconciler_that_is_not_root_contains_runs_with_its_own_uid():
    if not os.access("/usr/bin/python3", os.X_OK):
        pytest.skip("needs /usr/bin/python3 to start a reconciler as nobody")
    root = Path(tempfile.mkdtemp(prefix="nodus-nonroot-", dir="/tmp"))
    try:
        os.chown(root, 65534, 65534)
        repo = _installed_layout(root / "lib")  # what a wheel installs, readable by nobody
        # on a host whose tun device udev made 0666 (simulated: this machine's stays as
        # it is); where only root may open it, such a reconciler's runs get no network
        # (test_host_environments)
        done = subprocess.run(
            [*HOSTSIM, "--tun", "0666",
             "--user", "65534:65534", "--", "/usr/bin/python3",
             "-c", NON_ROOT_RECONCILER, repo, str(root / "local")],
            env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"}, capture_output=True, text=True,
            timeout=120, cwd="/")
        assert done.returncode == 0, done.stderr
        seen = json.loads(done.stdout)
        assert seen["phase"] == "Succeeded", seen
        assert seen["runAs"] == ("65534:65534 (the reconciler's own user: it is not root, so "
                                 "it cannot switch users)")
        uid, pids, sees_root = json.loads(seen["log"][0])
        assert (uid, pids, sees_root) == (65534, ["1", "2"], False)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@bwrap_only
def test_a_supervisor_python_that_holds_the_state_directory_is_a_sandbox_problem(tmp_path):
    """Runs see the supervisors' Python installation: one holding the state directory
    (a service installed as /srv/nodus with its state in /srv/nodus/state) would show
    them the database and every run directory."""
    from nodus_gitops.providers.local.config import LocalConfig
    from nodus_gitops.providers.local.settings import find_helper, resolve_sandbox

    srv = tmp_path / "srv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(srv)], check=True)
    config = LocalConfig(python=str(srv / "bin" / "python"), detect_gpus=False)
    helpers = {"bwrap": find_helper("bwrap"), "slirp4netns": find_helper("slirp4netns")}
    sb = resolve_sandbox(config, helpers, srv / "state" / "local")
    assert sb.problem is not None and "holds the state directory" in sb.problem
    elsewhere = resolve_sandbox(config, helpers, tmp_path / "state" / "local")
    assert elsewhere.problem is None and str(srv) in elsewhere.runtime
