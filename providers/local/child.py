"""What a forked child does before it execs a run's first program (bubblewrap, or the
command itself without a sandbox), in this order:

1. stage: when the reconciler is root and runs as another user, the directories the
   run will see (its run directory's parts, inputs, the Python runtime) may lie under
   paths that user cannot traverse (`/root`, a 0700 state directory). In a mount
   namespace of its own the child binds each one under a fresh tmpfs on /mnt (the
   FHS's place for temporary mounts), where bubblewrap, already unprivileged, can
   reach them. Nothing of this is visible to
   the host or, once bubblewrap has built the run's root, to the run. This namespace,
   a copy of the host's, lives as long as the run: other Jobs' filesystems are
   unmounted from it first (`runfs.prune`), so that it never keeps one alive
   after the host unmounted it, and earlier stages' filesystems holding its inputs
   are mounted read-only here, never on the host.
2. join the run's memory cgroup, set RLIMIT_AS (memory fallback) and RLIMIT_FSIZE (no
   single file beyond the output cap);
3. drop to the run user (groups, gid, uid): bubblewrap then starts unprivileged;
3b. with `network: shared` (`usernet`), enter a user and network namespace of the run
   user's own (that user is root in it, its loopback up): slirp4netns, as the run user,
   joins both before the command starts, and bubblewrap keeps the network
   (`--share-net`) and maps the run user back (`--uid`, `--gid`);
4. enter a Landlock domain of the run's own (`landlock`), where the kernel can scope one:
   no abstract Unix socket or process outside the run is reachable from it (a gang's
   ranks are forked in their gang's domain already, `gangspace`, and keep it);
5. die with the supervisor (PR_SET_PDEATHSIG, set after the drop, which clears it).

Every staged path is opened without following a symbolic link at any component: the
host checked the run's inputs once, before, and a Job (or one holding a descriptor of
its directories) may have swapped a directory for a link to a host path since.

A failure is written to the run's log (stderr is already the log pipe) and the child
exits 126, so the run fails with the reason in its log.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import resource
import signal
import socket
import stat
import struct
from collections.abc import Callable, Sequence
from pathlib import Path

from nodus_gitops.providers.local import landlock, runfs
from nodus_gitops.providers.local.runuser import RunUser

STAGE = "/mnt"  # the mount point of the staging tmpfs, in the child's own mount namespace
SETUP_FAILED = 126

_LIBC = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER, _CLONE_NEWNET = 0x10000000, 0x40000000
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1
_MS_RDONLY, _MS_NOSUID, _MS_NODEV = 1, 2, 4
_MS_BIND, _MS_REC, _MS_PRIVATE = 4096, 16384, 1 << 18


def staged_path(index: int) -> str:
    return f"{STAGE}/{index}"


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def open_without_links(path: str) -> int:
    """An O_PATH descriptor of the absolute `path`, walked from / one component at a
    time, refusing a symbolic link anywhere (ELOOP) and `..`."""
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    parts = [p for p in path.split("/") if p not in ("", ".")]
    try:
        for n, part in enumerate(parts):
            if part == "..":
                raise OSError(errno.EINVAL, f"{path}: '..' is refused")
            last = n == len(parts) - 1
            flags = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC | (0 if last else os.O_DIRECTORY)
            try:
                nxt = os.open(part, flags, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(
                        f"/proc/self/fd/{fd}/{part}"):
                    exc = OSError(errno.ELOOP, "")
                raise _refused(path, parts[: n + 1], exc) from None
            os.close(fd)
            fd = nxt
            if last and stat.S_ISLNK(os.fstat(fd).st_mode):  # O_PATH opens a link itself
                raise _refused(path, parts, OSError(errno.ELOOP, ""))
        return fd
    except BaseException:
        os.close(fd)
        raise


def link_problem(path: str) -> str | None:
    """Why `path` cannot be bound into a run (a link at some component, or it is not
    there); None when it can. The host's look before the runs: the child's own open
    is what holds."""
    try:
        os.close(open_without_links(path))
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def _refused(path: str, walked: list[str], exc: OSError) -> OSError:
    where = "/" + "/".join(walked)
    if exc.errno == errno.ELOOP:
        return OSError(errno.ELOOP, f"{path}: {where} is a symbolic link; a run's "
                       "directories and inputs are never bound through a link")
    return OSError(exc.errno, f"{path}: {where}: {os.strerror(exc.errno or 0)}")


def own_mount_namespace() -> None:
    """Into a mount namespace of this process's own (a copy of the host's): nothing
    mounted in it reaches the host, nor the host's later mounts it (root only)."""
    _check(_LIBC.unshare(_CLONE_NEWNS), "unshare a mount namespace")
    _check(_LIBC.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "make / private")


def _stage(sources: Sequence[str], filesystems: Sequence[tuple[str, str]] = (),
           foreign: Sequence[str] = ()) -> None:
    own_mount_namespace()
    runfs.prune(foreign)
    for image, point in filesystems:
        if not runfs.mounted(Path(point)):
            try:
                runfs.mount_image(Path(image), Path(point), readonly=True)
            except runfs.RunFsError as exc:
                raise OSError(f"mount the input filesystem {image}: {exc}") from None
    # Opened in this namespace (a bind from another namespace's mount is refused) and
    # before the tmpfs, which may cover them.
    fds = [open_without_links(src) for src in sources]
    _check(_LIBC.mount(b"tmpfs", STAGE.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV,
                       b"mode=0755,size=64k"), "mount the staging tmpfs")
    for i, fd in enumerate(fds):
        target = staged_path(i)
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            os.mkdir(target, 0o755)
        else:
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
        _check(_LIBC.mount(f"/proc/self/fd/{fd}".encode(), target.encode(), None,
                           _MS_BIND | _MS_REC, None), f"bind {sources[i]}")
        os.close(fd)


def _own_user_net() -> None:
    """Into a new user namespace (this user is its root) and network namespace, its
    loopback up. Dropping from root made the process not dumpable, which would keep its
    own /proc/self/uid_map closed to it; exec (of bubblewrap) makes it dumpable anyway."""
    uid, gid = os.geteuid(), os.getegid()
    _LIBC.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)
    _check(_LIBC.unshare(_CLONE_NEWUSER | _CLONE_NEWNET), "unshare a network namespace")
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"),
                       ("gid_map", f"0 {gid} 1")):
        fd = os.open(f"/proc/self/{name}", os.O_WRONLY)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
    loopback_up()


def loopback_up() -> None:
    """Bring up the loopback of the network namespace this thread is in (a new one has
    it down). Its modules are imported with this one's: a forked child dropped to the run
    user may not read the interpreter's library any more."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifreq = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(s, _SIOCGIFFLAGS, ifreq))[1]
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | _IFF_UP))


def make_preexec(
    *,
    user: RunUser | None,
    stage: Sequence[str] = (),
    cgroup: Path | None = None,
    address_space: int | None = None,
    file_size: int | None = None,
    filesystems: Sequence[tuple[str, str]] = (),
    own_domain: bool = True,
    own_net: bool = False,
) -> Callable[[], None]:
    """The function the forked child runs before exec. `user` is None when the run
    keeps the reconciler's user (no sandbox, or a reconciler that is not root);
    `own_domain` is False for a gang's rank, forked already in its gang's domain."""
    parent = os.getpid()
    procs = str(cgroup / "cgroup.procs") if cgroup else None
    sources = list(stage)
    fs = list(filesystems)
    foreign = runfs.foreign_mounts(sources) if sources else []  # read here, not in the child
    # contained, not in its gang's domain already, and the kernel can scope one
    scoped = own_domain and user is not None and landlock.scoping() is None

    def preexec() -> None:
        try:
            if sources:
                _stage(sources, fs, foreign)
            if procs:
                fd = os.open(procs, os.O_WRONLY)
                os.write(fd, b"0")
                os.close(fd)
            if address_space:
                resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
            if file_size:
                resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
            if user is not None and user.switch:
                os.setgroups([])
                os.setresgid(user.gid, user.gid, user.gid)
                os.setresuid(user.uid, user.uid, user.uid)
            if own_net:
                _own_user_net()
            if scoped:
                landlock.scope_self()
            _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except OSError as exc:
            os.write(2, f"nodus: cannot set up the run: {exc}\n".encode())
            os._exit(SETUP_FAILED)
        if os.getppid() != parent:  # the supervisor died before prctl took effect
            os._exit(137)

    return preexec
