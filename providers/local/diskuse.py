"""What a Job may take of the disk: what it has written under its writable directories
(outputs, state, work, units, source), measured while it runs, and the free space under
which no new run starts.

Where a Job has a filesystem of its own (`runfs`), the kernel holds it to its cap and
measuring it is one statfs, done at every pass of its supervisor. Elsewhere (polled)
the directories are walked, as below.

The Jobs together: every Job that started a run and has not finished (or whose image
is still held on a loop device after it finished: an open file keeps a lazily unmounted
filesystem alive, and writable) is registered
under `<root>/.disk-reservations/` with what it may still write to the host's disk (its
image's holes, or its cap less what it wrote, and for each run it started the run's
log cap: logs live outside the Job's filesystem, and many parallel runs each logging
up to maxLogBytes could fill the disk otherwise). A run starts only while the free space
less all of that, and less what the Job itself may still write, stays above
minFreeBytes, and while the disk has free inodes (`free_inodes`); else the Job waits
Queued with a DiskPressure condition. Registering is
done under a lock, with the check, so two Jobs cannot both take the last room.

Every entry counts at least one block (`ENTRY_BYTES`): an empty file, a directory or a
link takes an inode and often a block, so a Job cannot fill a disk's inodes or
directory blocks with entries of no size.

Measuring walks the directories, and adds what the Job's processes (every process
descended from its supervisor: a contained run's orphans go to its namespace's init)
hold open of files that have no name left (`open_deleted`), which no walk can see. A
supervisor measures every few seconds and, for a Job with very many files, less often
still (twenty times the last walk's duration apart); while the disk's free space falls
faster than the Job's room under its cap, as soon as that bound allows (at most ten
times a second). A single file never passes the cap by more than a byte: runs start
with RLIMIT_FSIZE just past it. What a poll can still miss for a while: several files
each under the cap written between two measures, blocks kept past a file's end
(fallocate's KEEP_SIZE is not held by RLIMIT_FSIZE), a file held only by a mapping or by
a descriptor in flight in a Unix socket, and, without a sandbox, the files of a process
that left the supervisor's descendants (setsid and a double fork).
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from nodus_gitops.providers.jsonfiles import exclusive_lock, read_json, write_json
from nodus_gitops.providers.local import jobstate, procs

MIN_INTERVAL = 2.0
WALK_FACTOR = 20.0
FAST_INTERVAL = 0.1  # the least time between two measures while the disk fills fast
FAST_BYTES = 1 << 20  # a fall in free space that is fast when the cap is not known
ENTRY_BYTES = 4096  # the least any file, directory or link counts
MIN_FREE_INODES = 4096  # the most the inode floor asks for


def free_inodes(path: Path) -> tuple[int, int] | None:
    """(inodes an unprivileged writer may still take on `path`'s file system, the floor
    under which no new run starts: 5% of its inodes, at most 4096); None where the file
    system does not count inodes."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    if st.f_files == 0:  # no fixed inode count (btrfs reports 0)
        return None
    return st.f_favail, min(MIN_FREE_INODES, st.f_files // 20)


def free_bytes(path: Path) -> int | None:
    """Bytes an unprivileged writer may still use on `path`'s file system."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def tree_bytes(roots: Iterable[Path]) -> int:
    """What the entries under `roots` take: each regular file the larger of its size
    and its allocated blocks (a file can hold blocks past its end: fallocate's
    KEEP_SIZE), at least ENTRY_BYTES, and every other entry (directory, link, FIFO) its
    blocks, at least ENTRY_BYTES; links are not followed, and a file with several names
    counts once."""
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
                size = st.st_size if stat.S_ISREG(st.st_mode) else 0
                total += max(ENTRY_BYTES, size, st.st_blocks * 512)
    return total


def open_deleted(pids: Iterable[int], devices: set[int]) -> tuple[int, int]:
    """(bytes, files) of the regular files on `devices` (the Job's directories' file
    systems: a memory file or /tmp's tmpfs is not the disk) that `pids` hold open and
    that have no name left (unlinked, O_TMPFILE): each counted once, by the larger of
    its size and its allocated blocks, at least ENTRY_BYTES, as `tree_bytes` counts."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for pid in pids:
        base = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(base)
        except OSError:  # gone, or not ours to read
            continue
        for fd in fds:
            link = f"{base}/{fd}"
            try:
                if not os.readlink(link).endswith(" (deleted)"):
                    continue
                st = os.stat(link)  # the magic link: the open file itself
            except OSError:
                continue
            key = (st.st_dev, st.st_ino)
            if st.st_nlink or not stat.S_ISREG(st.st_mode) or st.st_dev not in devices \
                    or key in seen:
                continue  # a name left (the walk counts it), not the disk, or counted
            seen.add(key)
            total += max(ENTRY_BYTES, st.st_size, st.st_blocks * 512)
    return total, len(seen)


class Meter:
    """Measures a Job's written bytes no more often than its walks allow; with `statfs`
    (the Job's own filesystem) at every call, it costs one system call. Polled, it
    counts the open unlinked files of `processes` (by default every descendant of this
    process, the Job's supervisor) and measures early while the disk's free space falls
    by more than what the Job has left under `cap` (FAST_BYTES when not known)."""

    def __init__(self, roots: list[Path], statfs: Callable[[], int] | None = None,
                 processes: Callable[[], Iterable[int]] | None = None,
                 cap: int | None = None):
        self.roots = roots
        self.statfs = statfs
        self.processes = processes or (lambda: procs.descendants(os.getpid()))
        self.cap = cap
        self.next_at = 0.0
        self.soonest = 0.0  # the earliest next measure while the disk fills fast
        self.free_then: int | None = None  # the disk's free bytes as the last measure began
        self.last = 0
        self.deleted = 0  # of `last`: what files unlinked while held open took
        self.deleted_files = 0

    def _free(self) -> int | None:
        for root in self.roots:
            free = free_bytes(root)
            if free is not None:
                return free
        return None

    def due(self, now: float) -> bool:
        if self.statfs is not None or now >= self.next_at:
            return True
        if now < self.soonest or self.free_then is None:
            return False
        free = self._free()  # one statfs: cheap enough for every pass
        room = FAST_BYTES if self.cap is None else max(ENTRY_BYTES, self.cap - self.last)
        return free is not None and self.free_then - free > room

    def measure(self, now: float) -> int:
        if self.statfs is not None:
            self.last = self.statfs()
            return self.last
        started = time.monotonic()
        self.free_then = self._free()
        walked = tree_bytes(self.roots)
        devices = set()
        for root in self.roots:
            try:
                devices.add(os.stat(root).st_dev)
            except OSError:
                pass
        self.deleted, self.deleted_files = open_deleted(self.processes(), devices)
        self.last = walked + self.deleted
        took = time.monotonic() - started
        self.next_at = now + max(MIN_INTERVAL, WALK_FACTOR * took)
        self.soonest = now + max(FAST_INTERVAL, WALK_FACTOR * took)
        return self.last


# -- what the Jobs together may still write ------------------------------------------
RESERVATIONS = ".disk-reservations"


def _registry(root: Path) -> Path:
    return Path(root) / RESERVATIONS


@contextmanager
def reserving(root: Path) -> Iterator[None]:
    """Held while a Job checks for room and registers: one at a time."""
    folder = _registry(root)
    folder.mkdir(mode=0o700, exist_ok=True)
    with exclusive_lock(folder / ".lock", mode=0o600):
        yield


# What a run adds to the state directory's disk besides its log: its events, its
# sandbox record, the log's own notes.
RUN_RECORD_BYTES = 64 << 10


def log_bytes(runs: int, max_log: int) -> int:
    """What `runs` running runs may add to the disk outside the Job's own filesystem:
    each its log (`logsink`: at most maxLogBytes) and its records."""
    return runs * (max_log + RUN_RECORD_BYTES)


def reserve(root: Path, uid: str, run_path: Path, cap: int, image: Path | None,
            used: int = 0, logs: int = 0) -> None:
    try:  # what the image may take at most, for when it is unlinked but still held
        image_bytes = os.stat(image).st_size if image else None
    except OSError:
        image_bytes = None
    write_json(_registry(root) / f"{uid}.json",
               {"run": str(run_path), "cap": cap, "image": str(image) if image else None,
                "imageBytes": image_bytes, "used": used, "logs": logs})


def note_logs(root: Path, uid: str, logs: int) -> None:
    """What the Job's running runs may add through their logs (`log_bytes`) changed."""
    path = _registry(root) / f"{uid}.json"
    entry = read_json(path)
    if entry is not None and int(entry.get("logs", 0)) != logs:
        entry["logs"] = logs
        write_json(path, entry)


def note_used(root: Path, uid: str, used: int) -> None:
    """A polled Job's measured bytes: what it may still write shrinks."""
    path = _registry(root) / f"{uid}.json"
    entry = read_json(path)
    if entry is not None and abs(int(entry.get("used", 0)) - used) >= (1 << 20):
        entry["used"] = used
        write_json(path, entry)


def _held(entry: dict[str, Any]) -> bool:
    """A finished Job's image still alive on a loop device (a file of it held open, by
    whichever process): it can grow, so it stays reserved until it is released."""
    from nodus_gitops.providers.local.runfs import image_held

    return bool(entry.get("image")) and image_held(Path(entry["image"]))


def release(root: Path, uid: str) -> None:
    """The Job finished or went: its entry goes, unless its image is still held
    (`reserved` drops it once it is not)."""
    path = _registry(root) / f"{uid}.json"
    entry = read_json(path)
    if entry is not None and _held(entry):
        return
    path.unlink(missing_ok=True)


def still_writable(entry: dict[str, Any]) -> int:
    """What a registered Job may still write to the host's disk: an image its holes
    (all of it when unlinked: it can no longer be looked at), and its runs' logs."""
    from nodus_gitops.providers.local.runfs import growth

    logs = int(entry.get("logs", 0))
    if entry.get("image"):
        if os.path.exists(entry["image"]):
            return growth(Path(entry["image"])) + logs
        return int(entry.get("imageBytes") or entry["cap"]) + logs
    return max(0, int(entry["cap"]) - int(entry.get("used", 0))) + logs


def reserved(root: Path, exclude: str | None = None) -> int:
    """What the registered Jobs (but `exclude`) may still write; entries of Jobs that
    finished or whose run directory is gone are dropped once their image is released."""
    from nodus_gitops.floor.phases import is_terminal

    total = 0
    try:
        names = [n for n in os.listdir(_registry(root)) if n.endswith(".json")]
    except OSError:
        return 0
    for name in names:
        if name == f"{exclude}.json":
            continue
        path = _registry(root) / name
        entry = read_json(path)
        if entry is None:
            continue
        st = read_json(Path(entry["run"]) / "status.json")
        if (st is None or is_terminal(st.get("phase"))) and not _held(entry):
            path.unlink(missing_ok=True)
            continue
        total += still_writable(entry)
    return total


def floor_condition(st: dict[str, Any], path: Path, floor: int, now: float,
                    reserved: int = 0, needed: int = 0) -> tuple[bool, bool, str | None]:
    """Whether a new run may start under the free-space floor, keeping the status'
    DiskPressure condition: (allowed, status changed, the message when pressure began).
    `reserved`: what other Jobs may still write; `needed`: what this Job may."""
    free = free_bytes(path)
    inodes = free_inodes(path)
    short_of_inodes = inodes is not None and inodes[0] < inodes[1]
    low = (free is not None and free - reserved - needed < floor) or short_of_inodes
    was_low = any(c["type"] == "DiskPressure" and c["status"] == "True"
                  for c in st["conditions"])
    if low and not was_low:
        msg = (f"{free} bytes free where the Job's files are, under the local backend's "
               f"minFreeBytes {floor}: new runs wait for space")
        if short_of_inodes:
            assert inodes is not None
            msg = (f"{inodes[0]} inodes free where the Job's files are, under the floor "
                   f"of {inodes[1]} (5% of the disk's, at most {MIN_FREE_INODES}): new runs "
                   "wait for files to be removed")
        elif reserved or needed:
            msg = (f"{free} bytes free where the Job's files are; the running Jobs may "
                   f"still write {reserved} and this Job {needed} (its maxOutputBytes, "
                   f"and maxLogBytes for each of its runs), "
                   f"which would leave less than the local backend's minFreeBytes {floor}: "
                   "new runs wait for space (or lower maxOutputBytes or maxLogBytes)")
        jobstate.set_condition(st, "DiskPressure", True, "LowDiskSpace", msg, now)
        return False, True, msg
    if was_low and not low:
        jobstate.set_condition(st, "DiskPressure", False, "DiskSpaceAvailable",
                               "free space is back above minFreeBytes", now)
        return True, True, None
    return not low, False, None
