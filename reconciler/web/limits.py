"""What the dashboard's HTTP server allows one client: how long it may take to send a
request's head or a webhook's body, how long an idle connection stays open, how many
connections may be open at once and how large a head may be. The defaults are the
server's; tests pass smaller ones to see each limit act quickly."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    # From a connection's first byte, or the end of its previous answer, to the end of
    # the next request's headers; a client trickling in a byte at a time is cut off too.
    head_timeout: float = 10.0
    # An idle keep-alive connection between two requests.
    keep_alive_timeout: float = 5.0
    # A webhook's body, once its headers are in (408 after it).
    body_timeout: float = 10.0
    # Open connections; one more is closed as soon as it is accepted. Above the 2,000
    # slow clients a single attacker host opens easily, below a default `ulimit -n`
    # of 4,096 or more (each connection is one file descriptor).
    max_connections: int = 3000
    # A request line and headers still unfinished past this size get 400 (what the
    # server buffers of a head it cannot parse yet).
    max_head_bytes: int = 16 * 1024
    # Threads that read the store (pages, API, metrics) and take webhooks, at once; more
    # requests wait their turn while the event loop keeps answering the rest.
    worker_threads: int = 16
    # On stop: how long requests in progress may take to finish before they are cancelled.
    shutdown_timeout: float = 5.0
