"""Starting a Job's supervisor as a detached process and telling whether it is still
the same live process (pid and /proc start time, recorded in supervisor.json).

A supervisor can also be pre-started as a spare: the same module, its imports done,
waiting on stdin for the run directory it will supervise. Handing a new Job to a spare
takes a pipe write instead of an interpreter start; a spare that is never used exits
when the provider that started it goes away (end of file on its stdin).
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import time
from pathlib import Path

import nodus_gitops
import nodus_gitops.providers
from nodus_gitops.providers.jsonfiles import read_json, write_json
from nodus_gitops.providers.local import procs
from nodus_gitops.providers.local.rundir import RunDir

# A supervisor runs under the `python` setting, which need not be the reconciler's own
# interpreter nor see its site-packages: it imports only the standard library and this
# package, whose two folders (the root package and its providers) it is told, as the
# reconciler found them (a wheel, an editable install, a source tree). -S: no site, -P:
# not the run directory it starts in.
_BOOT = """import importlib.util, json, runpy, sys
for name, folder in json.loads(sys.argv.pop(1)):
    spec = importlib.util.spec_from_file_location(
        name, folder + "/__init__.py", submodule_search_locations=[folder])
    sys.modules[name] = module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
runpy.run_module("nodus_gitops.providers.local.supervisor", run_name="__main__",
                 alter_sys=True)
"""
_FOLDERS = json.dumps([(name, str(Path(m.__file__).resolve().parent))
                       for name, m in (("nodus_gitops", nodus_gitops),
                                       ("nodus_gitops.providers", nodus_gitops.providers))])
_SUPERVISOR = ("-S", "-P", "-c", _BOOT, _FOLDERS)


# What a supervisor keeps of the reconciler's environment: enough to run Python. Its
# credentials (tokens, webhook secrets) stay behind; `passEnv` names what runs receive.
_SUPERVISOR_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "USER",
                   "LOGNAME", "SHELL", "TERM", "PYTHONPATH")


def _env(pass_env: tuple[str, ...] = ()) -> dict[str, str]:
    return {k: os.environ[k] for k in (*_SUPERVISOR_ENV, *pass_env) if k in os.environ}


def _record(run: RunDir, proc: subprocess.Popen) -> None:
    write_json(run.supervisor, {"pid": proc.pid, "ticks": procs.start_ticks(proc.pid),
                                "startedAt": time.time()})


def spawn(run: RunDir, python: str, pass_env: tuple[str, ...] = ()) -> subprocess.Popen:
    """Start the supervisor of `run` in its own session, with stdin from /dev/null and
    its output in supervisor.log, and record its identity."""
    with open(run.path / "supervisor.log", "ab") as log:
        proc = subprocess.Popen(
            [python, *_SUPERVISOR, str(run.path)], cwd=run.path,
            env=_env(pass_env), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
    _record(run, proc)
    return proc


def start_spare(python: str, root: Path, pass_env: tuple[str, ...] = (),
                disk: dict | None = None) -> subprocess.Popen:
    """Pre-start a supervisor that waits for its run directory on stdin (and makes its
    Job's filesystem image meanwhile, when `disk` says Jobs get one)."""
    extra = [json.dumps(disk)] if disk and disk.get("type") == "filesystem" else []
    with open(root / ".spare-supervisors.log", "ab") as log:
        return subprocess.Popen(
            [python, *_SUPERVISOR, "--spare", *extra], cwd=root,
            env=_env(pass_env), stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)


def hand_over(spare: subprocess.Popen, run: RunDir) -> bool:
    """Give `run` to a spare; False when the spare is gone (start a new supervisor)."""
    if spare.poll() is not None or spare.stdin is None:
        return False
    _record(run, spare)
    try:
        spare.stdin.write(f"{run.path}\n".encode())
        spare.stdin.close()
    except OSError:
        return False
    return True


def retire(spare: subprocess.Popen | None) -> None:
    """Let an unused spare exit (it sees end of file)."""
    if spare is not None and spare.stdin is not None:
        try:
            spare.stdin.close()
        except OSError:
            pass


def alive(run: RunDir) -> bool:
    rec = read_json(run.supervisor) or {}
    return procs.is_same_process(rec.get("pid"), rec.get("ticks"))


def lock_free(run: RunDir) -> bool:
    """True when no supervisor holds the run directory's lock (a probe; released at once)."""
    try:
        fd = os.open(run.supervisor_lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def signal_supervisor(run: RunDir, sig: int) -> bool:
    rec = read_json(run.supervisor) or {}
    if procs.is_same_process(rec.get("pid"), rec.get("ticks")):
        procs.signal_pid(rec["pid"], sig)
        return True
    return False


def kill_supervisor(run: RunDir) -> None:
    rec = read_json(run.supervisor) or {}
    procs.kill_recorded(rec.get("pid"), rec.get("ticks"))
