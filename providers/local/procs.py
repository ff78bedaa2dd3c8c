"""Process identity and signalling: a pid is only trusted together with its start time
from /proc/<pid>/stat, so a recycled pid is never mistaken for our process."""

from __future__ import annotations

import os
import signal
from pathlib import Path


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # comm (field 2) may contain spaces and parentheses: split after the last ')'.
    rest = raw[raw.rfind(")") + 2 :].split()
    return rest  # rest[0] is field 3 (state)


def start_ticks(pid: int) -> int | None:
    """The process start time in clock ticks since boot (field 22), or None."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def is_same_process(pid: int | None, ticks: int | None) -> bool:
    """True when `pid` is alive, not a zombie, and started at `ticks`."""
    if not pid or ticks is None:
        return False
    fields = _stat_fields(pid)
    return bool(fields) and fields[0] not in ("Z", "X") and int(fields[19]) == ticks


def group_members(pgid: int) -> list[int]:
    """Every live process in process group `pgid` (a scan of /proc)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(int(entry))
        if fields and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(entry))
    return members


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def signal_pid(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def terminate_inside(pgid: int, skip: int | None) -> None:
    """SIGTERM every process of the group except `skip` (the bubblewrap monitor, which
    does not forward signals and must stay to report the command's exit status)."""
    if skip is None:
        signal_group(pgid, signal.SIGTERM)
        return
    for pid in group_members(pgid):
        if pid != skip:
            signal_pid(pid, signal.SIGTERM)


def kill_recorded(pid: int | None, ticks: int | None) -> None:
    """SIGKILL the process group led by a recorded process, if it is still that process."""
    if pid and is_same_process(pid, ticks):
        signal_group(pid, signal.SIGKILL)
        signal_pid(pid, signal.SIGKILL)


def pidns_members(inode: int) -> list[int]:
    """Host pids of the live processes in the PID namespace `inode` (a scan of /proc)."""
    want = f"pid:[{inode}]"
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{entry}/ns/pid") != want:
                continue
        except OSError:
            continue
        fields = _stat_fields(int(entry))
        if fields and fields[0] not in ("Z", "X"):
            members.append(int(entry))
    return members


def descendants(pid: int) -> list[int]:
    """Every live process descended from `pid` (a scan of /proc): a run's processes are
    its supervisor's, and a contained run's orphans go to its namespace's init, which is
    one of them too."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:  # raw reads: this runs at every measure of a polled Job, over every process
            fd = os.open(f"/proc/{entry}/stat", os.O_RDONLY | os.O_CLOEXEC)
            try:
                raw = os.read(fd, 1024)
            finally:
                os.close(fd)
        except OSError:
            continue
        # comm may hold spaces and parentheses: the state and ppid follow the last ')'
        fields = raw[raw.rfind(b")") + 2:].split(None, 2)
        if len(fields) >= 2 and fields[0] not in (b"Z", b"X"):
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, stack = [], list(children.get(pid, ()))
    while stack:
        member = stack.pop()
        found.append(member)
        stack.extend(children.get(member, ()))
    return found
