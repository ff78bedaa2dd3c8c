"""A run's outbound network with `network: shared`: a network namespace of the run's own
(bubblewrap without `--share-net`) joined to the world by slirp4netns, a user-mode
TCP/IP stack that makes the run's connections from the host as ordinary sockets.

- the run's 127.0.0.1 is its own loopback, and slirp4netns runs with
  `--disable-host-loopback`, so 10.0.2.2 (its gateway) does not lead to the host's
  127.0.0.1 either: no service the host keeps on its loopback (a database trusting local
  connections, the reconciler's own API) is reachable. What listens on the host's other
  addresses is reachable as it is from any machine of the network;
- slirp4netns runs as the run user, in the run's user namespace (`--userns-path`), with
  its own sandbox (`--enable-sandbox`: a mount namespace of its own, its capabilities
  dropped) and seccomp filter; it dies with the run (its `--exit-fd` is closed when the
  run ends, and by the kernel when the supervisor dies) and the supervisor reaps it;
- the command waits for the network: bubblewrap holds it (`--block-fd`) until
  slirp4netns, started on the pid bubblewrap reports (`--info-fd`), writes on that pipe
  (`--ready-fd`). The supervisor keeps a write end of it too, so a slirp4netns that
  ends before it is ready never releases the command: the supervisor kills the run and
  says why in its log;
- a gang's ranks share one namespace (`gangspace`): a holder process (`sleep`, as the
  run user, in a user and network namespace it made before it exec'd) keeps it, the
  gang's thread enters it, slirp4netns joins it, and the ranks' bubblewrap keeps it
  (`--share-net`);
- slirp4netns opens /dev/net/tun by its path, inside the run's user namespace, where the
  run user may not open the host's node (`crw------- root` without a udev rule): a root
  reconciler gives it a node of the run user's own in a mount namespace of slirp4netns'
  own (`own_tun_device`).

slirp4netns is the absolute path resolved when the backend started, like bubblewrap.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import stat
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from nodus_gitops.providers.local import child
from nodus_gitops.providers.local.hostcheck import TUN
from nodus_gitops.providers.local.runuser import RunUser

TAP = "tap0"
TUN_STAGE = "/mnt"  # where the run user's node is made, in slirp4netns' own mount namespace
SLEEP = "/bin/sleep"  # what a gang's namespace holder runs (coreutils, /bin on every Debian)
MTU = "65520"
READY_SECONDS = 30.0  # for the probe and a gang's network; a run's own never blocks
_LIBC = ctypes.CDLL(None, use_errno=True)
_CLONE_NEWNET = 0x40000000
_MS_NOSUID, _MS_BIND = 2, 4096


def slirp_argv(slirp: str, pid: int, ready_fd: int, exit_fd: int) -> list[str]:
    return [slirp, "--configure", f"--mtu={MTU}", "--disable-host-loopback",
            "--enable-sandbox", "--enable-seccomp", f"--userns-path=/proc/{pid}/ns/user",
            f"--ready-fd={ready_fd}", f"--exit-fd={exit_fd}", str(pid), TAP]


@dataclass
class Slirp:
    """One slirp4netns process and the write end of its --exit-fd."""

    proc: subprocess.Popen
    exit_fd: int
    out_fd: int  # a memory file holding what it printed, read only to say why it failed
    stopped: bool = field(default=False)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def ended(self) -> bool:
        return self.proc.poll() is not None

    def release(self) -> None:
        """Let it end: close its exit fd (it exits on that). Its exit takes the kernel
        about 20 ms (detaching its tap waits for RCU), so a caller that has other runs to
        serve reaps it later (`reaped()`, `stop()`) instead of waiting here."""
        if not self.stopped:
            self.stopped = True
            with contextlib.suppress(OSError):
                os.close(self.exit_fd)

    def reaped(self) -> bool:
        """Whether it has ended and been reaped (not waiting)."""
        if self.proc.poll() is None:
            return False
        self._close_out()
        return True

    def stop(self, timeout: float = 5.0) -> None:
        """Release it, then reap it (SIGKILL if it lingers past `timeout`)."""
        self.release()
        if not _exited_within(self.proc, timeout):
            self.proc.kill()
        self.proc.wait()
        self._close_out()

    def _close_out(self) -> None:
        if self.out_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.out_fd)
            self.out_fd = -1

    def said(self) -> str:
        """The last line slirp4netns wrote, for a message."""
        try:
            text = os.pread(self.out_fd, 1 << 16, 0).decode(errors="replace")
        except OSError:
            return "no message"
        lines = [line for line in text.strip().splitlines() if not line.startswith("WARNING")]
        return lines[-1] if lines else "no message"


def _exited_within(proc: subprocess.Popen, timeout: float) -> bool:
    """Wait for `proc` to exit, woken by its pidfd the moment it does (Popen.wait with a
    timeout polls with growing sleeps, which turns a 20 ms exit into 32 or 64 ms)."""
    if proc.poll() is not None:
        return True
    try:
        fd = os.pidfd_open(proc.pid)
    except OSError:  # reaped meanwhile
        return True
    try:
        return bool(select.select([fd], [], [], timeout)[0])
    finally:
        os.close(fd)


def start(slirp: str, pid: int, user: RunUser, ready_fd: int) -> Slirp:
    """slirp4netns for the namespaces of `pid`, as the run user; it writes on `ready_fd`
    once the run's interface is up. Dropped from root, it opens the tun device through
    a node of its own (`own_tun_device`)."""
    exit_r, exit_w = os.pipe2(os.O_CLOEXEC)
    out = os.memfd_create("nodus-slirp4netns", os.MFD_CLOEXEC)
    try:
        proc = subprocess.Popen(
            slirp_argv(slirp, pid, ready_fd, exit_r), env={}, cwd="/",
            stdin=subprocess.DEVNULL, stdout=out, stderr=out, pass_fds=(ready_fd, exit_r),
            start_new_session=True,
            preexec_fn=_as_run_user_with_tun(user) if user.switch else None)
    except BaseException:
        os.close(exit_w)
        os.close(out)
        raise
    finally:
        os.close(exit_r)
    return Slirp(proc, exit_w, out)


def own_tun_device(uid: int, gid: int) -> None:
    """In a mount namespace of this process's own (as root), make /dev/net/tun a node of
    the tun device owned by `uid`: slirp4netns opens that path inside the run's user
    namespace, where the host's node, often `crw------- root` (devtmpfs' own mode where
    no udev rule widens it), is closed to the run user. Only this slirp4netns sees the
    node; the host's device and every other process keep theirs."""
    child.own_mount_namespace()
    # a tmpfs of this namespace's own holds the node (the state directory may be nodev)
    _check(_LIBC.mount(b"tmpfs", TUN_STAGE.encode(), b"tmpfs", _MS_NOSUID,
                       b"mode=0700,size=4k"), f"mount a tmpfs on {TUN_STAGE}")
    node = f"{TUN_STAGE}/tun"
    os.mknod(node, stat.S_IFCHR | 0o600, os.stat(TUN).st_rdev)
    os.chown(node, uid, gid)
    _check(_LIBC.mount(node.encode(), TUN.encode(), None, _MS_BIND, None),
           f"bind the run user's node over {TUN}")


def _as_run_user_with_tun(user: RunUser) -> Callable[[], None]:
    """The forked slirp4netns' set-up before exec: its own tun node, then the drop."""

    def preexec() -> None:
        try:
            own_tun_device(user.uid, user.gid)
            os.setgroups([])
            os.setresgid(user.gid, user.gid, user.gid)
            os.setresuid(user.uid, user.uid, user.uid)
        except OSError as exc:
            os.write(2, f"nodus: cannot give slirp4netns the tun device: {exc}\n".encode())
            os._exit(child.SETUP_FAILED)

    return preexec


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def wait_ready(fd: int, slirp: Slirp, timeout: float = READY_SECONDS) -> str | None:
    """Wait for slirp4netns to write on its ready fd; why not (None: it is ready)."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return f"slirp4netns was not ready within {timeout:.0f} seconds"
        if select.select([fd], [], [], min(left, 0.05))[0]:
            if os.read(fd, 1):
                return None
            return _ended_early(slirp)
        if slirp.ended():
            return _ended_early(slirp)


def _ended_early(slirp: Slirp) -> str:
    try:
        slirp.proc.wait(1.0)
        how = f"exited with {slirp.proc.returncode}"
    except subprocess.TimeoutExpired:
        how = "closed its ready pipe"
    return f"slirp4netns {how} before the network was up: {slirp.said()}"


@dataclass
class Holder:
    """A process that holds a gang's user and network namespaces (it made them before it
    exec'd `sleep`, `child._own_user_net`), and the slirp4netns joined to them."""

    proc: subprocess.Popen
    slirp: Slirp | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        if self.slirp is not None:
            self.slirp.stop()
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        self.proc.wait()


def hold_network(slirp: str, user: RunUser) -> Holder:
    """A network namespace with slirp4netns ready on it, kept by a holder; raises
    OSError saying why not. The holder makes its namespaces (the run user root in its
    user namespace, as slirp4netns' sandbox needs, and the loopback up) before it execs,
    so they are whole once Popen returns. (A holder that was bubblewrap reported its pid
    before it had set its loopback up; slirp4netns configuring the tap meanwhile made
    bubblewrap fail, now and then: "loopback: Failed RTM_NEWADDR".)"""
    try:
        proc = subprocess.Popen(
            [SLEEP, "infinity"], env={}, cwd="/", stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
            preexec_fn=child.make_preexec(user=user, own_domain=False, own_net=True))
    except (OSError, subprocess.SubprocessError) as exc:
        raise OSError(f"cannot make the gang's network namespace: {exc}") from None
    holder = Holder(proc)
    if proc.poll() is not None:  # the preexec failed: it said why on stderr
        holder.stop()
        said = (proc.stderr.read().decode(errors="replace").strip().splitlines()  # type: ignore[union-attr]
                or ["no message"])[-1]
        raise OSError(f"cannot make the gang's network namespace: {said}")
    proc.stderr.close()  # type: ignore[union-attr]
    ready_r, ready_w = os.pipe2(os.O_CLOEXEC)
    try:
        holder.slirp = start(slirp, proc.pid, user, ready_w)
        os.close(ready_w)
        ready_w = -1
        problem = wait_ready(ready_r, holder.slirp)
    except BaseException:
        holder.stop()
        raise
    finally:
        os.close(ready_r)
        if ready_w >= 0:
            os.close(ready_w)
    if problem:
        holder.stop()
        raise OSError(problem)
    return holder


def enter(pid: int) -> None:
    """This thread into the network namespace of `pid` (root only)."""
    fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _LIBC.setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
    finally:
        os.close(fd)
