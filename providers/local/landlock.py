"""A run's own Landlock domain, scoped: its processes can reach each other's abstract
Unix sockets and signal each other, but no abstract socket made outside the run (the
host's, another run's: with `network: shared` they all live in the host's network
namespace) and no process outside it. Without this, two Jobs could pass each other
open file descriptors over an abstract socket (SCM_RIGHTS), and a descriptor of one
Job's directory lets another change it behind the supervisor's back.

The ruleset handles no file system or network access (`handled_access_fs` = 0): it
only scopes, so bubblewrap, applied to before it starts, still builds the run's mounts.
Scoping needs Landlock ABI 6 (Linux 6.12); on an older kernel `scoping()` says why it
is missing and runs are not scoped.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
from functools import cache

_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.syscall.restype = ctypes.c_long
_PR_SET_NO_NEW_PRIVS = 38
_CREATE_RULESET_VERSION = 1
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1, 2
SCOPING_ABI = 6
# Landlock's system calls share their numbers on every architecture since 5.13.
_CREATE_RULESET, _RESTRICT_SELF = 444, 446


@cache
def abi() -> int:
    """The kernel's Landlock ABI version; 0 where Landlock is absent or disabled."""
    version = _LIBC.syscall(ctypes.c_long(_CREATE_RULESET), None, ctypes.c_size_t(0),
                            ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(0, int(version))


def scoping() -> str | None:
    """None where runs get a scoped domain; else why not."""
    version = abi()
    if version >= SCOPING_ABI:
        return None
    kernel = platform.release()
    if version == 0:
        return f"this kernel ({kernel}) has no Landlock"
    return (f"this kernel's Landlock (ABI {version}, Linux {kernel}) cannot scope abstract "
            f"Unix sockets and signals (ABI {SCOPING_ABI}, Linux 6.12, can)")


def scope_self() -> None:
    """Put this process (and all it starts) in a domain of its own, scoped for abstract
    Unix sockets and signals; raises OSError. Called in a forked child before exec."""
    if _LIBC.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"set no_new_privs: {os.strerror(err)}")
    # struct landlock_ruleset_attr: handled_access_fs, handled_access_net, scoped
    attr = ctypes.create_string_buffer(
        struct.pack("=QQQ", 0, 0, _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL))
    fd = _LIBC.syscall(ctypes.c_long(_CREATE_RULESET), attr, ctypes.c_size_t(24),
                       ctypes.c_uint32(0))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"create a Landlock ruleset: {os.strerror(err)}")
    try:
        if _LIBC.syscall(ctypes.c_long(_RESTRICT_SELF), ctypes.c_int(fd), ctypes.c_uint32(0)):
            err = ctypes.get_errno()
            raise OSError(err, f"enter a Landlock domain: {os.strerror(err)}")
    finally:
        os.close(fd)
