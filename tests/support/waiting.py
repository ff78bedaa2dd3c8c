"""Polling a provider until a resource reaches a state, with a deadline (tests never
sleep a fixed long time)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.floor.phases import is_terminal
from nodus_gitops.providers.base import Observed

Until = Callable[[Observed], bool] | str | None


def wait_for(provider: Any, key: ResourceKey, until: Until = None, timeout: float = 60.0,
             interval: float = 0.05) -> tuple[Observed | None, bool]:
    """Poll `provider.get(key)` until `until` holds (a phase name, a predicate, or by
    default a terminal phase). Returns the last observation and whether it held."""
    if isinstance(until, str):
        phase = until
        check: Callable[[Observed], bool] = lambda o: o.phase == phase  # noqa: E731
    else:
        check = until or (lambda o: is_terminal(o.phase))
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = provider.get(key)
        if last is not None and check(last):
            return last, True
        time.sleep(interval)
    return last, False
