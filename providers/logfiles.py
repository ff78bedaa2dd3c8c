"""Job logs as files, for the backends whose Jobs write them (local, slurm): each
attempt of each index writes `<logs dir>/<index>-<attempt>.log`.

Reading one index gives its latest attempt's lines; following keeps reading, switches to
a newer attempt when one starts, and ends once `finished(attempt)` says so and the log is
drained (so nothing written just before the end is lost).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path


def attempts(logs_dir: Path, index: int) -> list[int]:
    """The attempts of `index` that have a log, in order."""
    found = []
    for p in logs_dir.glob(f"{index}-*.log"):
        tail = p.stem.split("-", 1)[1]
        if tail.isdigit():
            found.append(int(tail))
    return sorted(found)


def read_log(logs_dir: Path, index: int, *, follow: bool = False,
             finished: Callable[[int | None], bool] = lambda _attempt: True,
             poll_seconds: float = 0.1) -> Iterator[str]:
    """Yield the log lines (without the newline) of `index`'s latest attempt; with
    `follow`, until `finished(the attempt being read)` is true."""
    current: int | None = None
    offset = 0
    pending = b""
    while True:
        found = attempts(logs_dir, index)
        if found and found[-1] != current:
            if current is not None and pending:
                yield pending.decode(errors="replace")
            current, offset, pending = found[-1], 0, b""
        if current is not None:
            try:
                with open(logs_dir / f"{index}-{current}.log", "rb") as f:
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
        if finished(current):
            follow = False  # one last read, so nothing written just before the end is lost
            continue
        time.sleep(poll_seconds)
    if pending:
        yield pending.decode(errors="replace")
