"""uvicorn's HTTP/1.1 protocol (h11) with the two limits it lacks.

- A deadline on a request's head. uvicorn times a connection out only between requests
  (its keep-alive timer, armed after an answer), and any byte that arrives cancels that
  timer: a client that opens a connection and sends a request line, a header and then one
  byte now and then holds it for as long as it likes. Here, whenever the server waits for
  a client (no answer in progress), the client has `Limits.head_timeout` seconds in all
  to finish its next request's headers, however it trickles them in; then the connection
  is closed.
- A cap on open connections: one over `Limits.max_connections` is closed as soon as it is
  accepted, so a flood of clients costs file descriptors up to the cap only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import uvicorn
from nodus_gitops.web.limits import Limits
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("nodus_gitops.web")
REFUSED_LOG_EVERY = 60.0  # seconds: a flood of refused connections logs one line a minute


class ServerConfig(uvicorn.Config):
    """uvicorn's settings plus the limits the protocol below enforces."""

    def __init__(self, app: Any, limits: Limits, **settings: Any) -> None:
        super().__init__(app, http=GuardedH11Protocol, **settings)
        self.limits = limits
        self.refused = _Refused()


class _Refused:
    """Connections refused over the cap, logged at most once a `REFUSED_LOG_EVERY`."""

    def __init__(self) -> None:
        self.count = 0
        self.logged_at = float("-inf")

    def one_more(self, cap: int) -> None:
        self.count += 1
        if time.monotonic() - self.logged_at >= REFUSED_LOG_EVERY:
            log.warning("too many open connections: new ones are closed at once",
                        extra={"max_connections": cap, "refused": self.count})
            self.logged_at = time.monotonic()


class GuardedH11Protocol(H11Protocol):
    config: ServerConfig

    def __init__(self, config: ServerConfig, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        self.limits = config.limits
        self.head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections:
            self.config.refused.one_more(self.limits.max_connections)
            transport.abort()  # nothing was read, nothing to answer: free it now
            return
        self._watch_head()

    def handle_events(self) -> None:
        super().handle_events()
        self._watch_head()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._watch_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        super().connection_lost(exc)

    def _watch_head(self) -> None:
        """Run the deadline while the server waits for the client, stop it once a request's
        headers are in; a deadline already running is not restarted by more bytes."""
        waiting = self.cycle is None or self.cycle.response_complete
        if waiting and not self.transport.is_closing():
            if self.head_timer is None:
                self.head_timer = self.loop.call_later(self.limits.head_timeout,
                                                       self._head_too_slow)
        else:
            self._stop_head_timer()

    def _stop_head_timer(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def _head_too_slow(self) -> None:
        self.head_timer = None
        if not self.transport.is_closing():
            self.transport.close()
