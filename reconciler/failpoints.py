"""Named crash points for the crash tests: `NODUS_GITOPS_FAILPOINT=name` (or `name:N`,
the N-th time it is reached) makes the process kill itself with SIGKILL right there.

A no-op unless that variable is set; production code only marks where the points are.
"""

from __future__ import annotations

import os
import signal

ENV = "NODUS_GITOPS_FAILPOINT"
_hits: dict[str, int] = {}


def reach(name: str) -> None:
    spec = os.environ.get(ENV)
    if not spec:
        return
    wanted, _, nth = spec.partition(":")
    if wanted != name:
        return
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] >= int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)
