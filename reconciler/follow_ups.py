"""Status reads due soon after a sync (what it just started shows its first phases),
for every binding of a service on one thread: a timer thread for each would be
thousands of threads when a thousand bindings sync at once."""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

log = logging.getLogger("nodus_gitops.service")


class FollowUps:
    """Calls `read(binding_id, keys)` at each delay given to `add`, in due order. A read
    more than `stale_after` seconds past its time is dropped: by then the status tick has
    read the same resources, and a backlog of late reads (1,000 first syncs add 4,000)
    would hold each binding's lock in turn and make its polls wait."""

    def __init__(self, read: Callable[[str, list[Any]], None], *,
                 stale_after: float) -> None:
        self._read = read
        self.stale_after = stale_after
        self.dropped = 0  # reads dropped for being late
        self._due: list[tuple[float, int, str, list[Any]]] = []
        self._order = itertools.count()  # ties in time keep the order they came in
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def add(self, binding_id: str, keys: list[Any], delays: Iterable[float]) -> None:
        now = time.monotonic()
        with self._wake:
            for delay in delays:
                heapq.heappush(self._due, (now + delay, next(self._order), binding_id, keys))
            if self._thread is None:  # started on first use: most commands never need it
                self._thread = threading.Thread(target=self._loop, daemon=True,
                                                name="follow-ups")
                self._thread.start()
            self._wake.notify()

    def _loop(self) -> None:
        while True:
            with self._wake:
                while not self._due or self._due[0][0] > time.monotonic():
                    self._wake.wait(self._due[0][0] - time.monotonic() if self._due else None)
                due, _, binding_id, keys = heapq.heappop(self._due)
            if time.monotonic() - due > self.stale_after:
                self.dropped += 1
                continue
            try:
                self._read(binding_id, keys)
            except Exception:  # a bug must not stop the reads of the other bindings
                log.exception("follow-up read crashed", extra={"binding": binding_id})
