"""Memory limits for one run.

A run with `resources.memory` gets its own cgroup v1 memory group when the memory
controller is writable (killed by the kernel at the limit, which the group's
`memory.oom_control` counts), and otherwise `RLIMIT_AS` (a weaker limit on address
space: allocations fail instead, set by `child.make_preexec`).
"""

from __future__ import annotations

import os
from pathlib import Path

CGROUP_MEMORY = Path("/sys/fs/cgroup/memory")

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

