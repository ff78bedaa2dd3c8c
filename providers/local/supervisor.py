"""The detached supervisor process of one Job:
`python -m providers.local.supervisor <rundir>` (or `--spare`, pre-started, waiting for
its run directory on stdin).

It owns the Job's processes and is the only writer of its status: it takes an
exclusive lock on supervisor.lock (a second supervisor for the same run directory
exits at once), records its pid and start time, and runs the Job's `JobDriver` until
the Job is finished, waking on SIGCHLD (a run ended), SIGUSR1 (the provider changed
control.json), output from a run (pumped into its capped log) or every poll interval.
SIGTERM means the capacity is going away: it kills the runs and leaves the status for
the provider to recover.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import signal
import sys
import time
from pathlib import Path

from nodus_gitops.floor.phases import is_terminal
from nodus_gitops.providers.jsonfiles import write_json
from nodus_gitops.providers.local import procs, runfs
from nodus_gitops.providers.local.driver import JobDriver
from nodus_gitops.providers.local.rundir import RunDir

LOCK_WAIT_SECONDS = 2.0


def _lock(run: RunDir) -> int | None:
    fd = os.open(run.supervisor_lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                return None
            time.sleep(0.02)


def main(argv: list[str]) -> int:
    run = RunDir(Path(argv[0]))
    if _lock(run) is None:
        print("another supervisor holds this run directory", file=sys.stderr)
        return 0
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGUSR1, lambda *_: None)
    me = {"pid": os.getpid(), "ticks": procs.start_ticks(os.getpid()), "startedAt": time.time()}
    write_json(run.supervisor, me)
    sup = JobDriver(run, time.time())
    sup.st["supervisor"] = me  # status.json alone is enough to find and check it

    def on_term(*_: object) -> None:
        sup.lost()
        sup.unmount()  # mounted again by the supervisor that recovers the Job
        os._exit(1)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    try:
        while True:
            now = time.time()
            sup.tick(now)
            if sup.gone:  # its run directory was removed: end the runs, unmount, leave
                sup.end_runs()
                sup.close()
                return 0
            if is_terminal(sup.phase):
                sup.close()
                return 0
            pipes = sup.log_pipes()
            ready, _, _ = select.select([wake_r, *pipes], [], [], sup.next_wait(time.time()))
            for fd in ready:
                if fd in pipes:
                    pipes[fd].pump()
            try:
                while os.read(wake_r, 4096):
                    pass
            except BlockingIOError:
                pass
    except BaseException as exc:  # a fault: every run and its slirp4netns ended and reaped
        sup.end_runs()
        if isinstance(exc, FileNotFoundError) and not run.manifest.exists():
            # its run directory was removed in the middle of a step (a run's directories
            # being made): as when a tick sees it gone
            sup.close()
            return 0
        sup.unmount()
        raise


def spare(disk: dict | None = None) -> int:
    """A pre-started supervisor: its imports are done, and its Job's filesystem image
    made when `disk` says Jobs get one; wait for the run directory on stdin, then become
    that run's supervisor (end of file: the provider is gone)."""
    me = (os.getpid(), procs.start_ticks(os.getpid()))
    if disk is not None:
        # at the lowest priority: the Job just handed to the spare before this one is
        # starting (as root, which a Job's own filesystem needs, the priority comes back)
        before = os.getpriority(os.PRIO_PROCESS, 0)
        os.setpriority(os.PRIO_PROCESS, 0, 19)
        try:
            runfs.make_spare(Path.cwd(), disk, *me)
        finally:
            os.setpriority(os.PRIO_PROCESS, 0, before)
    path = sys.stdin.readline().strip()
    if not path:
        if disk is not None:
            runfs.drop_spare(Path.cwd(), *me)
        return 0
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    log = os.open(Path(path) / "supervisor.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(null)
    os.close(log)
    return main([path])


if __name__ == "__main__":
    if sys.argv[1:2] == ["--spare"]:
        sys.exit(spare(json.loads(sys.argv[2]) if len(sys.argv) > 2 else None))
    sys.exit(main(sys.argv[1:]))
