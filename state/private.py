"""The state directory kept to its owner: it holds every manifest with its env values (the
database, the Git mirrors, the composites' records), so no other local user may read it,
whatever the umask the reconciler was started with.

- The directory is 0700: made so, or tightened (and said once, in a warning naming the
  path and the mode it had) when an earlier version or a hand left it looser. Nothing in
  it is then reachable by another user, the local backend's run directories included
  (that backend stages what a run needs for its run user, see providers/local/child.py).
- The SQLite database is created 0600 before SQLite opens it; SQLite gives its -wal and
  -shm files the database's own mode. An existing looser one is tightened.
- The directories only the reconciler writes (PRIVATE_DIRS) carry a default ACL that
  grants group and others nothing: what libgit2 writes in a mirror (objects 0444, packs
  and refs 0644 under umask 022) is then 0400 and 0600. Where the file system has no
  ACLs, the directory's 0700 is what keeps them.

A read-only open (`get`, `describe`) changes nothing: it only reads.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import struct
from collections.abc import Callable
from pathlib import Path

from nodus_gitops.floor.errors import ConfigError

log = logging.getLogger(__name__)

DIR_MODE = 0o700
FILE_MODE = 0o600
# Under the state directory, what the reconciler alone reads and writes: the bindings'
# Git mirrors (wiring.py) and the Pipeline and Sweep records (backends.py). The local
# backend's root keeps the modes that backend gives its run user.
PRIVATE_DIRS = ("mirrors", "workloads")
SQLITE_COMPANIONS = ("-wal", "-shm", "-journal")

# A POSIX ACL as Linux stores it in an extended attribute: version 2, then (tag, perm,
# id) entries: the owner rwx, the owning group nothing, others nothing.
_ACL_XATTR = "system.posix_acl_default"
_ACL_OWNER_ONLY = struct.pack("<I", 2) + b"".join(
    struct.pack("<HHI", tag, perm, 0xFFFFFFFF)
    for tag, perm in ((0x01, 0o7), (0x04, 0), (0x20, 0)))


def secure(path: Path, how: Callable[[Path], None]) -> None:
    """`how(path)`; a file system that refuses is a ConfigError naming `--state`."""
    try:
        how(path)
    except OSError as exc:
        raise ConfigError(f"--state: cannot keep {path} private to its owner: "
                          f"{exc.strerror or exc}") from exc


def secure_state_dir(path: Path) -> None:
    """Make `path` (and its parents) if missing, and leave it 0700 with its reconciler-only
    directories private; OSError as the file system gives it."""
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    _tighten(path, DIR_MODE, "state directory", quiet_when_empty=True)
    for name in PRIVATE_DIRS:
        inner = path / name
        inner.mkdir(mode=DIR_MODE, exist_ok=True)
        _tighten(inner, DIR_MODE, "state directory", quiet_when_empty=True)
        if _owner_only_default_acl(inner):
            _tighten_tree(inner)


def _tighten_tree(root: Path) -> None:
    """What an earlier version left in `root` under the umask, to the owner's bits alone
    (once: the ACL then keeps what is made there private)."""
    for folder, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            entry = Path(folder) / name
            mode = stat.S_IMODE(entry.lstat().st_mode)
            if mode & 0o077 and not entry.is_symlink():
                entry.chmod(mode & 0o700)


def secure_database_file(path: Path) -> None:
    """The SQLite database `path`: created empty and 0600 when missing (an empty file is an
    empty database), else tightened to 0600 with its -wal, -shm and -journal files."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                         FILE_MODE))
    except FileExistsError:
        pass
    for companion in ("", *SQLITE_COMPANIONS):
        target = path.with_name(path.name + companion)
        if target.exists():
            _tighten(target, FILE_MODE, "state file")


def _tighten(path: Path, mode: int, what: str, quiet_when_empty: bool = False) -> None:
    """`path` to `mode` when it grants more; a warning says so, unless it held nothing yet
    (a directory just made under the umask exposed nothing)."""
    old = stat.S_IMODE(path.lstat().st_mode)
    if old & ~mode == 0:
        return
    path.chmod(mode)
    if quiet_when_empty and not any(path.iterdir()):
        return
    log.warning(f"{what} {path} was mode {old:04o}, readable by other local users: "
                f"now {mode:04o}", extra={"path": str(path), "old_mode": f"{old:04o}",
                                          "mode": f"{mode:04o}"})


def _owner_only_default_acl(path: Path) -> bool:
    """Files and directories made in `path` from now on grant group and others nothing,
    whatever the umask; False when `path` had it already or the file system has no ACLs."""
    try:
        if os.getxattr(path, _ACL_XATTR) == _ACL_OWNER_ONLY:
            return False
    except OSError:
        pass
    try:
        os.setxattr(path, _ACL_XATTR, _ACL_OWNER_ONLY)
    except OSError as exc:
        if exc.errno not in (errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM, errno.EACCES):
            raise
        return False
    return True
