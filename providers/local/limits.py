"""Memory limits and process hygiene for one run.

A run with `resources.memory` gets its own cgroup v1 memory group when the memory
controller is writable (killed by the kernel at the limit, which the group's
`memory.oom_control` counts), and otherwise `RLIMIT_AS` (a weaker limit on address
space: allocations fail instead). Every run is also tied to its supervisor with
PR_SET_PDEATHSIG, so a supervisor killed with -9 does not leave orphans running.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
from collections.abc import Callable
from pathlib import Path

CGROUP_MEMORY = Path("/sys/fs/cgroup/memory")
_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True)

# How a failed allocation shows in a log when only RLIMIT_AS limits memory.
ALLOCATION_FAILURES = ("MemoryError", "std::bad_alloc", "Cannot allocate memory", "out of memory")


def cgroup_parent(mount: Path = CGROUP_MEMORY) -> Path | None:
    """A writable cgroup v1 memory directory for runs (`nodus-local` under this
    process's own memory group), or None when there is none."""
    try:
        own = ""
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if "memory" in controllers.split(","):
                own = path.lstrip("/")
        base = mount / own if (mount / own).is_dir() else mount
        parent = base / "nodus-local"
        parent.mkdir(exist_ok=True)
        probe = parent / f"probe-{os.getpid()}"
        probe.mkdir(exist_ok=True)
        ok = (probe / "memory.limit_in_bytes").exists()
        probe.rmdir()
        return parent if ok else None
    except (OSError, ValueError):
        return None


def create_cgroup(parent: Path, name: str, limit: int) -> Path:
    group = parent / name
    group.mkdir(exist_ok=True)
    (group / "memory.limit_in_bytes").write_text(str(limit))
    for name_, value in (("memory.memsw.limit_in_bytes", str(limit)), ("memory.swappiness", "0")):
        try:
            (group / name_).write_text(value)
        except OSError:
            pass  # no swap accounting: the memory limit alone applies
    return group


def oom_killed(group: Path) -> bool:
    try:
        for line in (group / "memory.oom_control").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value) > 0
        return False
    except (OSError, ValueError):
        return False


def remove_cgroup(group: Path | None) -> None:
    if group is None:
        return
    try:
        group.rmdir()
    except OSError:
        pass


def make_preexec(cgroup: Path | None, address_space: int | None) -> Callable[[], None]:
    """The function the forked child runs before exec: die with the supervisor, join
    the memory group, or set RLIMIT_AS. Nothing here allocates much or takes locks."""
    parent = os.getpid()
    procs = str(cgroup / "cgroup.procs") if cgroup else None

    def preexec() -> None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the supervisor died before prctl took effect
            os._exit(137)
        if procs:
            fd = os.open(procs, os.O_WRONLY)
            os.write(fd, b"0")
            os.close(fd)
        if address_space:
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

    return preexec
