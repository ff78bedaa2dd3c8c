"""Attacks on how the local backend starts and ends a run: the environment a manifest
sets reaching bubblewrap itself, bytes that cannot be in an argv, descriptors leaked into
the run, processes that try to outlive it (a PID namespace of their own, a killed
supervisor). Real supervisors, real processes, real bubblewrap."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from nodus_gitops.floor.errors import PermanentError

from tests.providers.local.conftest import HAS_BWRAP
from tests.providers.local.test_attacks import heartbeat_stops, processes_with

pytestmark = pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap is not installed")

# A shared library whose constructor, wherever it is loaded, writes a marker into each
# staging directory it can reach (/mnt/<n>: where the child binds the run's directories
# for bubblewrap, outside the sandbox; inside the sandbox /mnt is empty).
PRELOAD_C = r"""
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void escape(void) {
    char path[64];
    for (int i = 0; i < 16; i++) {
        snprintf(path, sizeof path, "/mnt/%d/escaped", i);
        FILE *f = fopen(path, "w");
        if (f) { fprintf(f, "pid %d uid %d\n", getpid(), getuid()); fclose(f); }
    }
}
"""

# Index 0 writes the library (shipped in the manifest) into the Job's work directory;
# index 1 then starts with LD_PRELOAD naming it where the child stages that directory.
DROP_LIBRARY = """
import base64, os
if os.environ["NODUS_INDEX"] == "0":
    with open("/nodus/work/lib.so", "wb") as f:
        f.write(base64.b64decode(os.environ["LIBRARY"]))
print(os.environ.get("LD_PRELOAD", "")[:9])
"""


@pytest.fixture
def preload_library(tmp_path: Path) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the preloaded library")
    src = tmp_path / "escape.c"
    src.write_text(PRELOAD_C)
    lib = tmp_path / "escape.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(lib), str(src)], check=True)
    return lib


def test_loader_variables_in_the_manifest_never_reach_bubblewrap(local, preload_library):
    import base64

    staged = ":".join(f"/mnt/{i}/lib.so" for i in range(16))
    k = local.create("preload", DROP_LIBRARY, completions=2,
                     env={"LIBRARY": base64.b64encode(preload_library.read_bytes()).decode(),
                          "LD_PRELOAD": staged, "LD_LIBRARY_PATH": "/mnt/3",
                          "GCONV_PATH": "/mnt/3"})
    done = local.wait(k)
    assert done.phase == "Succeeded", local.log(k, 1)
    work, outputs = local.run(k).work, local.run(k).outputs
    assert sorted(os.listdir(work)) == ["lib.so"], (work / "escaped").read_text()
    assert os.listdir(outputs) == [], (outputs / "escaped").read_text()
    assert local.log(k, 1).splitlines()[-1] == "/mnt/0/li"  # the command still gets its env


@pytest.mark.parametrize("field", ["env", "command"])
def test_a_nul_byte_in_the_environment_or_command_is_refused_at_create(local, field):
    spec = {"env": {"GREETING": "hi\0--bind / /"}} if field == "env" else {}
    code = "print('ran')" + ("\0" if field == "command" else "")
    with pytest.raises(PermanentError, match=f"spec.{field}.*NUL"):
        local.create("nul", code, **spec)
    assert not local.run(local.keys[-1]).exists()


LIST_FDS = """
import json, os
fds = {}
for fd in os.listdir("/proc/self/fd"):
    try:
        fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        pass  # the listing's own descriptor, closed already
print(json.dumps(fds))
"""


def test_no_descriptor_of_the_supervisor_leaks_into_the_run(local):
    k = local.create("fds", LIST_FDS)
    assert local.wait(k).phase == "Succeeded", local.log(k)
    fds = json.loads(local.log(k))
    assert set(fds) == {"0", "1", "2"} and fds["0"] == "/dev/null", fds
    assert fds["1"] == fds["2"] and fds["1"].startswith("pipe:")


# A daemon in a user and PID namespace of its own (unshare), in a session of its own,
# writing a heartbeat; then the command waits to be cancelled.
NESTED_NAMESPACE = """
import os, subprocess, sys, time
loop = f"while :; do echo {sys.argv[1]} $(date +%s%N) > /nodus/work/heartbeat; sleep 0.05; done"
subprocess.Popen(["setsid", "unshare", "--user", "--map-root-user", "--pid", "--fork",
                  "sh", "-c", loop], start_new_session=True)
time.sleep(120)
"""


def test_a_daemon_in_a_nested_pid_namespace_ends_with_the_run(local):
    if subprocess.run(["unshare", "--user", "--map-root-user", "--pid", "--fork", "true"],
                      capture_output=True).returncode != 0:
        pytest.skip("unshare cannot create user and PID namespaces here")
    token = uuid.uuid4().hex
    k = local.create("nested", command=[sys.executable, "-c", NESTED_NAMESPACE, token])
    beat = local.run(k).work / "heartbeat"
    local.wait(k, lambda o: beat.exists())
    local.patch(k, state="Cancelled")
    assert local.wait(k).phase == "Cancelled"
    assert processes_with(token) == []
    assert heartbeat_stops(beat)


# A grandchild deaf to SIGTERM in a session of its own writes a heartbeat; the command
# counts its attempts in its checkpoint and, from the second on, exits 0.
SURVIVOR = """
import os, signal, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:
            with open("/nodus/work/beat.tmp", "w") as f:
                f.write(f"{sys.argv[1]} {time.time()}")
            os.replace("/nodus/work/beat.tmp", "/nodus/work/heartbeat")
            time.sleep(0.05)
    os._exit(0)
count = "/nodus/state/attempts"
n = int(open(count).read()) + 1 if os.path.exists(count) else 1
open(count, "w").write(str(n))
print("attempt", n, flush=True)
time.sleep(120 if n == 1 else 0.5)
"""


def test_a_run_dies_whole_with_its_killed_supervisor_and_the_job_recovers(local):
    token = uuid.uuid4().hex
    k = local.create("orphaned", command=[sys.executable, "-c", SURVIVOR, token])
    beat = local.run(k).work / "heartbeat"
    local.wait(k, lambda o: beat.exists())
    os.kill(local.supervisor_pid(k), signal.SIGKILL)
    assert heartbeat_stops(beat)  # before any reconciler notices: the run went with it
    assert processes_with(token) == []
    done = local.wait(k, timeout=40)
    assert done.phase == "Succeeded" and done.status["recoveries"] == 1, done
    assert local.log(k) == "attempt 2"
    assert processes_with(token) == []
