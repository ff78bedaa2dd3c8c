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
4. die with the supervisor (PR_SET_PDEATHSIG, set after the drop, which clears it).

A failure is written to the run's log (stderr is already the log pipe) and the child
exits 126, so the run fails with the reason in its log.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
from collections.abc import Callable, Sequence
from pathlib import Path

from nodus_gitops.providers.local import runfs
from nodus_gitops.providers.local.runuser import RunUser

STAGE = "/mnt"  # the mount point of the staging tmpfs, in the child's own mount namespace
SETUP_FAILED = 126

_LIBC = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1
_CLONE_NEWNS = 0x00020000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV = 1, 2, 4
_MS_BIND, _MS_REC, _MS_PRIVATE = 4096, 16384, 1 << 18


def staged_path(index: int) -> str:
    return f"{STAGE}/{index}"


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _stage(sources: Sequence[str], filesystems: Sequence[tuple[str, str]] = (),
           foreign: Sequence[str] = ()) -> None:
    _check(_LIBC.unshare(_CLONE_NEWNS), "unshare a mount namespace")
    _check(_LIBC.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "make / private")
    runfs.prune(foreign)
    for image, point in filesystems:
        if not runfs.mounted(Path(point)):
            try:
                runfs.mount_image(Path(image), Path(point), readonly=True)
            except runfs.RunFsError as exc:
                raise OSError(f"mount the input filesystem {image}: {exc}") from None
    # Opened in this namespace (a bind from another namespace's mount is refused) and
    # before the tmpfs, which may cover them.
    fds = [os.open(src, os.O_PATH | os.O_CLOEXEC) for src in sources]
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


def make_preexec(
    *,
    user: RunUser | None,
    stage: Sequence[str] = (),
    cgroup: Path | None = None,
    address_space: int | None = None,
    file_size: int | None = None,
    filesystems: Sequence[tuple[str, str]] = (),
) -> Callable[[], None]:
    """The function the forked child runs before exec. `user` is None when the run
    keeps the reconciler's user (no sandbox, or a reconciler that is not root)."""
    parent = os.getpid()
    procs = str(cgroup / "cgroup.procs") if cgroup else None
    sources = list(stage)
    fs = list(filesystems)
    foreign = runfs.foreign_mounts(sources) if sources else []  # read here, not in the child

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
            _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except OSError as exc:
            os.write(2, f"nodus: cannot set up the run: {exc}\n".encode())
            os._exit(SETUP_FAILED)
        if os.getppid() != parent:  # the supervisor died before prctl took effect
            os._exit(137)

    return preexec
