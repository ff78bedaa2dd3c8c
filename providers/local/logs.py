"""Reading a Job's logs (`nodus logs job/x [-f]`): one index at a time, index 0 by
default, its latest attempt; following switches to a newer attempt when one starts and
ends when the Job is finished and the log is drained."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

from nodus_gitops.floor.errors import NotFoundError
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.floor.phases import is_terminal
from nodus_gitops.providers.jsonfiles import read_json
from nodus_gitops.providers.local.rundir import RunDir


def attempts(run: RunDir, index: int) -> list[int]:
    """The attempts of `index` that have a log, in order."""
    found = []
    for p in run.logs.glob(f"{index}-*.log"):
        tail = p.stem.split("-", 1)[1]
        if tail.isdigit():
            found.append(int(tail))
    return sorted(found)


def iter_logs(
    root: Path,
    key: ResourceKey,
    index: int | None = None,
    follow: bool = False,
    poll_seconds: float = 0.1,
) -> Iterator[str]:
    """Yield the log lines (without the newline) of one index's latest attempt."""
    run = RunDir.for_key(Path(root), key)
    if not run.exists():
        raise NotFoundError(f"{key.short} does not exist")
    index = 0 if index is None else index
    current: int | None = None
    offset = 0
    pending = b""
    while True:
        found = attempts(run, index)
        if found and found[-1] != current:
            if current is not None and pending:
                yield pending.decode(errors="replace")
            current, offset, pending = found[-1], 0, b""
        if current is not None:
            try:
                with open(run.log_for(index, current), "rb") as f:
                    f.seek(offset)
                    chunk = f.read()
            except FileNotFoundError:
                chunk = b""
            offset += len(chunk)
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                yield line.decode(errors="replace")
        if not follow:
            break
        status = read_json(run.status) if run.exists() else None
        if status is None or is_terminal(status.get("phase")):
            follow = False  # one last read, so nothing written just before the end is lost
            continue
        time.sleep(poll_seconds)
    if pending:
        yield pending.decode(errors="replace")
