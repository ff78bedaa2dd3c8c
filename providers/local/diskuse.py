"""What a Job may take of the disk: the bytes it has written under its writable
directories (outputs, state, work, units, source), measured while it runs, and the
free space under which no new run starts.

Measuring walks the directories, so a supervisor measures at most every few seconds
and, for a Job with very many files, less often still (twenty times the last walk's
duration apart). A single file can never pass the cap in between: runs start with
RLIMIT_FSIZE at the cap.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from providers.local import jobstate

MIN_INTERVAL = 2.0
WALK_FACTOR = 20.0


def free_bytes(path: Path) -> int | None:
    """Bytes an unprivileged writer may still use on `path`'s file system."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def tree_bytes(roots: Iterable[Path]) -> int:
    """Sum of the sizes of the regular files under `roots` (links not followed, a file
    with several names counted once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    stack = [str(r) for r in roots]
    while stack:
        try:
            entries = os.scandir(stack.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    elif entry.is_file(follow_symlinks=False):
                        st = entry.stat(follow_symlinks=False)
                        if (st.st_dev, st.st_ino) not in seen:
                            seen.add((st.st_dev, st.st_ino))
                            total += st.st_size
                except OSError:
                    continue
    return total


class Meter:
    """Measures a Job's written bytes no more often than its walks allow."""

    def __init__(self, roots: list[Path]):
        self.roots = roots
        self.next_at = 0.0
        self.last = 0

    def due(self, now: float) -> bool:
        return now >= self.next_at

    def measure(self, now: float) -> int:
        started = time.monotonic()
        self.last = tree_bytes(self.roots)
        took = time.monotonic() - started
        self.next_at = now + max(MIN_INTERVAL, WALK_FACTOR * took)
        return self.last


def floor_condition(st: dict[str, Any], path: Path, floor: int,
                    now: float) -> tuple[bool, bool, str | None]:
    """Whether a new run may start under the free-space floor, keeping the status'
    DiskPressure condition: (allowed, status changed, the message when pressure began)."""
    free = free_bytes(path)
    low = free is not None and free < floor
    was_low = any(c["type"] == "DiskPressure" and c["status"] == "True"
                  for c in st["conditions"])
    if low and not was_low:
        msg = (f"{free} bytes free where the Job's files are, under the local backend's "
               f"minFreeBytes {floor}: new runs wait for space")
        jobstate.set_condition(st, "DiskPressure", True, "LowDiskSpace", msg, now)
        return False, True, msg
    if was_low and not low:
        jobstate.set_condition(st, "DiskPressure", False, "DiskSpaceAvailable",
                               "free space is back above minFreeBytes", now)
        return True, True, None
    return not low, False, None
