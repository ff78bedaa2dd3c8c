"""One run: one attempt of one index, as a process group owned by the supervisor.

Starting it (log file, memory group, GPU lease, the launch from `sandbox`), asking it
to stop (SIGTERM to the command, SIGKILL after the grace period), and reading how it
ended: exit status, killed for memory, and the throughput units it reported.
"""

from __future__ import annotations

import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from providers.local import limits, procs
from providers.local.sandbox import Launch


class Lease(Protocol):
    """GPU slots held for a run (`gpus.SlotLease`)."""

    slots: list

    def release(self) -> None: ...


@dataclass
class Exit:
    code: int | None  # exit status, None when killed by a signal
    signal: int | None
    oom: bool

    @property
    def ok(self) -> bool:
        return self.code == 0

    @property
    def saved(self) -> bool:
        """How a stop request counts: a clean exit or death by our SIGTERM saved state."""
        return self.code == 0 or self.signal == signal.SIGTERM

    def describe(self) -> str:
        if self.oom:
            return "killed for exceeding its memory limit"
        if self.signal:
            return f"killed by {signal.Signals(self.signal).name}"
        return f"exited with code {self.code}"


@dataclass
class Run:
    index: int
    attempt: int
    proc: subprocess.Popen
    ticks: int | None
    started: float
    rate: float  # USD per second
    log_path: Path
    units_path: Path
    bubblewrap: bool
    lease: Lease | None = None
    cgroup: Path | None = None
    rlimited: bool = False
    stopping: str | None = None  # why we asked it to stop: suspend, cancel, timeout, fail
    term_at: float | None = None
    killed: bool = False
    units: int = 0
    _units_offset: int = field(default=0, repr=False)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def record(self) -> dict:
        return {
            "index": self.index,
            "attempt": self.attempt,
            "pid": self.pid,
            "ticks": self.ticks,
            "startTime": self.started,
            "cgroup": str(self.cgroup) if self.cgroup else None,
            "gpus": [s.id for s in self.lease.slots] if self.lease else [],
        }

    def poll(self) -> int | None:
        return self.proc.poll()

    def terminate(self, reason: str, now: float) -> None:
        """Ask the command to stop; bubblewrap's monitor is spared so that it reports the
        command's exit status."""
        if self.stopping is None or self.term_at is None:
            self.stopping = reason
            self.term_at = now
            procs.terminate_inside(self.pid, self.pid if self.bubblewrap else None)
        else:
            self.stopping = reason

    def kill(self) -> None:
        self.killed = True
        procs.signal_group(self.pid, signal.SIGKILL)

    def count_units(self) -> int:
        """Read units reported since the last call; returns how many are new."""
        try:
            with open(self.units_path, "rb") as f:
                f.seek(self._units_offset)
                chunk = f.read()
        except FileNotFoundError:
            return 0
        complete = chunk.rfind(b"\n") + 1
        self._units_offset += complete
        new = chunk[:complete].count(b"\n")
        self.units += new
        return new

    def finish(self) -> Exit:
        """After the process ended: classify, clean up leftovers, release the lease."""
        rc = self.proc.returncode
        code: int | None = rc
        sig: int | None = None
        if rc is not None and rc < 0:
            code, sig = None, -rc
        elif self.bubblewrap and rc is not None and rc > 128:
            code, sig = None, rc - 128  # bubblewrap reports a signal as 128 + signal
        procs.signal_group(self.pid, signal.SIGKILL)  # anything the command left behind
        oom = False
        if self.cgroup is not None:
            oom = limits.oom_killed(self.cgroup)
            for _ in range(50):  # the group can be removed once its last process is gone
                limits.remove_cgroup(self.cgroup)
                if not self.cgroup.exists():
                    break
                time.sleep(0.01)
        elif self.rlimited and code not in (0, None):
            oom = _log_tail_shows_allocation_failure(self.log_path)
        if self.lease:
            self.lease.release()
        return Exit(code, sig, oom)


def _log_tail_shows_allocation_failure(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 4096))
            tail = f.read().decode(errors="replace")
    except OSError:
        return False
    return any(marker in tail for marker in limits.ALLOCATION_FAILURES)


def start(
    launch: Launch,
    *,
    index: int,
    attempt: int,
    rate: float,
    log_path: Path,
    units_path: Path,
    bubblewrap: bool,
    lease: Lease | None,
    cgroup_parent: Path | None,
    memory_limit: int | None,
    cgroup_name: str,
) -> Run:
    """Start one run; a command that cannot be started becomes a run that exited 127."""
    cgroup = None
    rlimit = None
    if memory_limit:
        if cgroup_parent is not None:
            cgroup = limits.create_cgroup(cgroup_parent, cgroup_name, memory_limit)
        else:
            rlimit = memory_limit
    log = open(log_path, "ab")
    try:
        try:
            proc = subprocess.Popen(
                launch.argv,
                env=launch.env,
                cwd=launch.cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=limits.make_preexec(cgroup, rlimit),
            )
        except OSError as exc:
            log.write(f"nodus: cannot start {launch.argv[0]!r}: {exc.strerror or exc}\n".encode())
            proc = subprocess.Popen(
                ["sh", "-c", "exit 127"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
    finally:
        log.close()
    return Run(
        index=index,
        attempt=attempt,
        proc=proc,
        ticks=procs.start_ticks(proc.pid),
        started=time.time(),
        rate=rate,
        log_path=log_path,
        units_path=units_path,
        bubblewrap=bubblewrap,
        lease=lease,
        cgroup=cgroup,
        rlimited=rlimit is not None,
    )
