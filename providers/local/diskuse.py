"""What a Job may take of the disk: what it has written under its writable directories
(outputs, state, work, units, source), measured while it runs, and the free space under
which no new run starts.

Every entry counts at least one block (`ENTRY_BYTES`): an empty file, a directory or a
link takes an inode and often a block, so a Job cannot fill a disk's inodes or
directory blocks with entries of no size.

Measuring walks the directories, so a supervisor measures at most every few seconds
and, for a Job with very many files, less often still (twenty times the last walk's
duration apart). A single file can never pass the cap in between: runs start with
RLIMIT_FSIZE at the cap.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from providers.local import jobstate

MIN_INTERVAL = 2.0
WALK_FACTOR = 20.0
ENTRY_BYTES = 4096  # the least any file, directory or link counts


def free_bytes(path: Path) -> int | None:
    """Bytes an unprivileged writer may still use on `path`'s file system."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def tree_bytes(roots: Iterable[Path]) -> int:
    """What the entries under `roots` take: each regular file its size, at least
    ENTRY_BYTES, and every other entry (directory, link, FIFO) ENTRY_BYTES; links are not
    followed, and a file with several names counts once."""
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
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    stack.append(entry.path)
                elif st.st_nlink > 1:  # hard links: only those need remembering
                    if (st.st_dev, st.st_ino) in seen:
                        continue
                    seen.add((st.st_dev, st.st_ino))
                total += max(ENTRY_BYTES, st.st_size if stat.S_ISREG(st.st_mode) else 0)
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
