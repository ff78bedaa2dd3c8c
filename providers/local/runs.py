"""One run: one attempt of one index, owned by the supervisor.

Starting it (log pipe, memory group, GPU lease, the launch), pumping its output into
its capped log, asking it to stop (SIGTERM to its command, SIGKILL after the grace
period), and reading how it ended: exit status, killed for memory, the throughput units
it reported.

A contained run is a PID namespace: bubblewrap reports the namespace's first process
(its init) in a status file, and when that process ends the kernel ends every other
process of the namespace, double-forked ones included. `finish()` returns only once
the init is gone, so no process of the run outlives the phase the supervisor records.
Without a sandbox, the run is its process group, and a process that leaves the group
(setsid) escapes it.

With `network: shared` a run has slirp4netns beside it (`usernet`): started once
bubblewrap reported its pid, released when the run ends and reaped by the supervisor
before it records a phase with no run running; a slirp4netns that ends while the run
still runs (or before its network was up) ends the run.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from nodus_gitops.providers.local import child, limits, procs, sandbox, usernet
from nodus_gitops.providers.local.launch import Launch
from nodus_gitops.providers.local.logsink import LogSink
from nodus_gitops.providers.local.runuser import RunUser

READ_CHUNK = 1 << 16
PUMP_BUDGET = 1 << 20  # bytes read from one run per pass, so that no run starves the loop
END_WAIT_SECONDS = 30.0
UNITS_CHUNK = 1 << 20  # the most of a units file held in memory at once


class Lease(Protocol):
    """GPU slots held for a run (`gpus.SlotLease`)."""

    slots: list

    def release(self) -> None: ...


@dataclass
class Exit:
    code: int | None  # exit status, None when killed by a signal
    signal: int | None
    oom: bool
    whole: bool = True  # every process of the run was confirmed ended
    lost_network: str | None = None  # why the run was stopped: its slirp4netns ended

    @property
    def ok(self) -> bool:
        return self.code == 0

    @property
    def saved(self) -> bool:
        """How a stop request counts: a clean exit or death by our SIGTERM saved state."""
        return self.code == 0 or self.signal == signal.SIGTERM

    def describe(self) -> str:
        if self.lost_network:
            return f"stopped: {self.lost_network}"
        if self.oom:
            return "killed for exceeding its memory limit"
        if self.signal:
            return f"killed by {signal.Signals(self.signal).name}"
        return f"exited with code {self.code}"


@dataclass
class Namespace:
    """A contained run's PID namespace, as bubblewrap's status file reports it."""

    status_path: Path
    init_pid: int | None = None
    init_ticks: int | None = None
    inode: int | None = None

    def load(self, wait: float = 0.0) -> bool:
        """Read the status file's first record (waiting up to `wait` seconds for it)."""
        deadline = time.monotonic() + wait
        while self.init_pid is None:
            try:
                first = self.status_path.read_text().partition("\n")[0]
                doc = json.loads(first) if first.strip() else {}
            except (OSError, ValueError):
                doc = {}
            if "child-pid" in doc:
                self.init_pid = int(doc["child-pid"])
                self.inode = int(doc.get("pid-namespace") or 0) or None
                self.init_ticks = procs.start_ticks(self.init_pid)
            elif time.monotonic() >= deadline:
                return False
            else:
                time.sleep(0.005)
        return True

    def alive(self) -> bool:
        return procs.is_same_process(self.init_pid, self.init_ticks)

    def members(self) -> list[int]:
        return procs.pidns_members(self.inode) if self.inode else []


@dataclass
class Run:
    index: int
    attempt: int
    proc: subprocess.Popen
    ticks: int | None
    started: float
    rate: float  # USD per second
    log: LogSink
    pipe: int | None  # the read end of the run's stdout and stderr
    units_path: Path
    namespace: Namespace | None  # None without a sandbox
    lease: Lease | None = None
    cgroup: Path | None = None
    rlimited: bool = False
    stopping: str | None = None  # why we asked it to stop: suspend, cancel, timeout, fail
    term_at: float | None = None
    term_delivered: bool = False  # a process of the command has had the SIGTERM
    killed: bool = False
    lost_network: str | None = None  # set when its slirp4netns ended under it
    units: int = 0
    slirp: usernet.Slirp | None = None  # the run's network (network: shared)
    hold_fd: int | None = None  # our write end of bubblewrap's --block-fd (`usernet`)
    _units_offset: int = field(default=0, repr=False)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def bubblewrap(self) -> bool:
        return self.namespace is not None

    def record(self) -> dict:
        ns = self.namespace
        if ns is not None:
            ns.load()
        return {
            "index": self.index,
            "attempt": self.attempt,
            "pid": self.pid,
            "ticks": self.ticks,
            "initPid": ns.init_pid if ns else None,
            "initTicks": ns.init_ticks if ns else None,
            "startTime": self.started,
            "cgroup": str(self.cgroup) if self.cgroup else None,
            "gpus": [s.id for s in self.lease.slots] if self.lease else [],
            # the run's slirp4netns (network: shared), ended and reaped with the run
            "netPid": self.slirp.pid if self.slirp else None,
        }

    def poll(self) -> int | None:
        rc = self.proc.poll()
        if rc is None and self.slirp is not None and not self.killed and self.slirp.ended():
            self.lost_network = (f"the run's network ended: slirp4netns (pid {self.slirp.pid}) "
                                 f"exited with {self.slirp.proc.returncode}")
            self.log.write(f"nodus: {self.lost_network}: {self.slirp.said()}; the run is "
                           "stopped\n".encode())
            self.kill()
        return rc

    def end_network(self) -> None:
        """The run ended: its slirp4netns is released; whoever owns the run reaps it
        (`usernet.Slirp.reaped`, `stop`)."""
        if self.hold_fd is not None:
            os.close(self.hold_fd)
            self.hold_fd = None
        if self.slirp is not None:
            self.slirp.release()

    def pump(self, budget: int = PUMP_BUDGET) -> None:
        """Move what the run printed into its log, up to `budget` bytes."""
        moved = 0
        while self.pipe is not None and moved < budget:
            try:
                data = os.read(self.pipe, READ_CHUNK)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:  # every writer is gone
                os.close(self.pipe)
                self.pipe = None
                return
            self.log.write(data)
            moved += len(data)

    def terminate(self, reason: str, now: float) -> None:
        """Ask the command to stop: SIGTERM to every process of the run but the
        namespace's init, which must stay to report the command's exit status."""
        if self.stopping is None or self.term_at is None:
            self.stopping = reason
            self.term_at = now
            ns = self.namespace
            if ns is None or not ns.load(wait=1.0):
                procs.signal_group(self.pid, signal.SIGTERM)
            self.pass_on_term()
        else:
            self.stopping = reason

    def pass_on_term(self) -> None:
        """Deliver the asked stop to the command once it exists. Asked right after the
        start, the namespace may hold its init alone (bubblewrap has not started the
        command yet): the command then gets SIGTERM on a later tick, and so its grace
        period to save, instead of a SIGKILL at the deadline. Once the command has it,
        processes it starts later (a save step in its SIGTERM handler) are left alone."""
        ns = self.namespace
        if self.term_at is None or self.killed or self.term_delivered or ns is None \
                or not ns.load():
            return
        for pid in ns.members():
            if pid != ns.init_pid:
                procs.signal_pid(pid, signal.SIGTERM)
                self.term_delivered = True

    def kill(self) -> None:
        self.killed = True
        ns = self.namespace
        if ns is not None and ns.load() and ns.alive():
            procs.signal_pid(ns.init_pid, signal.SIGKILL)  # the kernel ends the rest
        procs.signal_group(self.pid, signal.SIGKILL)

    def ended_whole(self, timeout: float = END_WAIT_SECONDS) -> bool:
        """End whatever is left of the run and confirm nothing is: for a contained run
        its namespace's init is gone (the kernel ended every other process first)."""
        procs.signal_group(self.pid, signal.SIGKILL)  # anything left in the group
        ns = self.namespace
        if ns is None or not ns.load():
            return True  # no sandbox (its group was killed), or bubblewrap never forked
        deadline = time.monotonic() + timeout
        while ns.alive():
            procs.signal_pid(ns.init_pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    def reap(self, timeout: float = END_WAIT_SECONDS) -> None:
        """After kill(): wait for the whole run to end and its process to be reaped (a
        process stuck in the kernel past `timeout` is left; the unmount reports it)."""
        self.ended_whole(timeout)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        if self.slirp is not None:
            self.slirp.stop()

    def count_units(self) -> int:
        """Read units reported since the last call; returns how many are new. The file is
        the run's: anything but a regular file is never read (a FIFO would block), and
        it is read a bounded chunk at a time (a line longer than a chunk is skipped)."""
        try:
            fd = os.open(self.units_path,
                         os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return 0
        new = 0
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return 0
            while chunk := os.pread(fd, UNITS_CHUNK, self._units_offset):
                complete = chunk.rfind(b"\n") + 1
                if complete:
                    new += chunk[:complete].count(b"\n")
                elif len(chunk) == UNITS_CHUNK:
                    complete = len(chunk)  # no unit record is this long: skip it
                else:
                    break  # a line still being written
                self._units_offset += complete
        except OSError:
            pass
        finally:
            os.close(fd)
        self.units += new
        return new

    def finish(self) -> Exit:
        """After the process ended: confirm the whole run ended, drain and close its
        log, classify the exit, release the memory group and the lease."""
        rc = self.proc.returncode
        code: int | None = rc
        sig: int | None = None
        if rc is not None and rc < 0:
            code, sig = None, -rc
        elif self.bubblewrap and rc is not None and rc > 128:
            code, sig = None, rc - 128  # bubblewrap reports a signal as 128 + signal
        whole = self.ended_whole()
        self.end_network()
        deadline = time.monotonic() + 1.0
        while self.pipe is not None:  # read what is left, to the end
            self.pump(budget=1 << 62)
            if self.pipe is None:
                break
            if not self.bubblewrap or time.monotonic() > deadline:
                os.close(self.pipe)  # an escaped process holds it open: stop here
                self.pipe = None
            else:
                time.sleep(0.005)
        self.log.close()
        oom = False
        if self.cgroup is not None:
            oom = limits.oom_killed(self.cgroup)
            for _ in range(50):  # the group can be removed once its last process is gone
                limits.remove_cgroup(self.cgroup)
                if not self.cgroup.exists():
                    break
                time.sleep(0.01)
        elif self.rlimited and code not in (0, None):
            oom = _log_tail_shows_allocation_failure(self.log.path)
        if self.lease:
            self.lease.release()
        return Exit(code, sig, oom, whole, self.lost_network)


def log_tail(path: Path, size: int = 4096) -> str:
    """The last `size` bytes of a run's log, as text ("" when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - size))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _log_tail_shows_allocation_failure(path: Path) -> bool:
    tail = log_tail(path)
    return any(marker in tail for marker in limits.ALLOCATION_FAILURES)


def _args_file(args: list[str]) -> int:
    """A memory file holding `args` NUL-separated, for bubblewrap's `--args FD`: values
    (the run's environment, secrets passed through included) stay out of its argv, which
    every user of the host can read in /proc."""
    return _memory_file("nodus-bwrap-args", b"".join(a.encode() + b"\0" for a in args))


def _memory_file(name: str, data: bytes) -> int:
    """A memory file holding `data`, read from its start."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    done = 0
    while done < len(data):
        done += os.write(fd, data[done:])
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def start(
    launch: Launch,
    *,
    index: int,
    attempt: int,
    rate: float,
    log_path: Path,
    units_path: Path,
    status_path: Path,
    user: RunUser,
    lease: Lease | None,
    cgroup_parent: Path | None,
    memory_limit: int | None,
    cgroup_name: str,
    max_log_bytes: int,
    max_file_bytes: int | None,
    own_domain: bool = True,
) -> Run:
    """Start one run; a run that cannot be started becomes one that exited 127 with
    the reason in its log."""
    cgroup = None
    rlimit = None
    if memory_limit:
        if cgroup_parent is not None:
            cgroup = limits.create_cgroup(cgroup_parent, cgroup_name, memory_limit)
        else:
            rlimit = memory_limit
    log = LogSink(log_path, max_log_bytes)
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    os.set_blocking(read_end, False)
    fds: list[int] = []  # passed to bubblewrap, closed here once it started
    argv, env = launch.argv, launch.env
    contained = launch.contained
    hold_fd = None  # our write end of bubblewrap's --block-fd
    preexec = child.make_preexec(user=user if contained else None, stage=launch.stage,
                                 cgroup=cgroup, address_space=rlimit, file_size=max_file_bytes,
                                 filesystems=launch.filesystems, own_domain=own_domain,
                                 own_net=contained and bool(launch.slirp))
    try:
        try:
            if contained:
                fds.append(os.open(status_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC
                                   | os.O_CLOEXEC, 0o600))
                extra = []
                if launch.resolv_conf is not None:
                    fds.append(_memory_file("nodus-resolv-conf", launch.resolv_conf))
                    extra = ["--ro-bind-data", str(fds[-1]), "/etc/resolv.conf"]
                fds.insert(1, _args_file([*sandbox.env_args(launch.env), *extra]))
                argv = [argv[0], "--args", str(fds[1]), "--json-status-fd", str(fds[0]),
                        *argv[1:]]
                if launch.slirp:
                    block_r, hold_fd = os.pipe2(os.O_CLOEXEC)
                    fds.append(block_r)
                    argv[1:1] = ["--block-fd", str(block_r)]
                env = {}  # bubblewrap's own: the run's comes through --args
            proc = subprocess.Popen(
                argv, env=env, cwd=launch.cwd, stdin=subprocess.DEVNULL,
                stdout=write_end, stderr=write_end, start_new_session=True,
                preexec_fn=preexec, pass_fds=tuple(fds))
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            log.write(f"nodus: cannot start {argv[0]!r}: {exc}\n".encode())
            contained = False
            proc = subprocess.Popen(["/bin/sh", "-c", "exit 127"], stdin=subprocess.DEVNULL,
                                    stdout=write_end, stderr=write_end, start_new_session=True)
    finally:
        os.close(write_end)
        for fd in fds:
            os.close(fd)
    slirp = None
    if hold_fd is not None:
        slirp, hold_fd = _start_network(launch.slirp, proc.pid, hold_fd, user, log,  # type: ignore[arg-type]
                                        contained)
    run = Run(
        index=index,
        attempt=attempt,
        proc=proc,
        ticks=procs.start_ticks(proc.pid),
        started=time.time(),
        rate=rate,
        log=log,
        pipe=read_end,
        units_path=units_path,
        namespace=Namespace(status_path) if contained else None,
        lease=lease,
        cgroup=cgroup,
        rlimited=rlimit is not None,
        slirp=slirp,
        hold_fd=hold_fd,
    )
    if contained and launch.slirp and slirp is None:
        run.kill()  # its command must not start without the network it was given
    return run


def _start_network(slirp_path: str, pid: int, hold_fd: int, user: RunUser, log: LogSink,
                   started: bool) -> tuple[usernet.Slirp | None, int | None]:
    """slirp4netns on the user and network namespaces bubblewrap (`pid`) started in,
    made by the child before it (`child`), so nothing in them moves while slirp4netns
    joins; once ready it writes on bubblewrap's --block-fd. We keep a write end too
    (`hold_fd`), so that the command starts only if it does. (None, None): bubblewrap
    did not start, or slirp4netns could not (said in the run's log; the run is killed)."""
    if not started:
        os.close(hold_fd)
        return None, None
    try:
        return usernet.start(slirp_path, pid, user, hold_fd), hold_fd
    except (OSError, subprocess.SubprocessError) as exc:
        log.write(f"nodus: cannot start slirp4netns ({slirp_path}) for the run's network: "
                  f"{exc}\n".encode())
        os.close(hold_fd)
        return None, None
