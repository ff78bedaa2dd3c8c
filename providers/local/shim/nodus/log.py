"""`nodus.log.unit(id, ms)`: record one unit of work (a batch, a request) that took
`ms` milliseconds. Each call appends one JSON line to the file named by
NODUS_UNITS_FILE, which the Job's supervisor counts into status.units and
status.unitsPerSecond. Outside a local run it does nothing."""

from __future__ import annotations

import json
import os
import time


def unit(id: object = None, ms: float | None = None) -> None:  # noqa: A002 - the SDK's name
    path = os.environ.get("NODUS_UNITS_FILE")
    if not path:
        return
    line = json.dumps({"id": None if id is None else str(id), "ms": ms, "t": time.time()})
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)
