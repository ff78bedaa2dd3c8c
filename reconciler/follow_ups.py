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
    """Calls `read(binding_id, keys)` at each delay given to `add`, in due order."""

    def __init__(self, read: Callable[[str, list[Any]], None]) -> None:
        self._read = read
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
                _, _, binding_id, keys = heapq.heappop(self._due)
            try:
                self._read(binding_id, keys)
            except Exception:  # a bug must not stop the reads of the other bindings
                log.exception("follow-up read crashed", extra={"binding": binding_id})
