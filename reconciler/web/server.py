"""The HTTP server of `serve`: the dashboard's application (app.py) under uvicorn, in a
background thread with its own event loop, on a socket bound before it starts (so port 0
works and a bad `--listen` fails at once). The limits of limits.py hold: head, body and
keep-alive timeouts, a cap on open connections (connections.py) and on a head's size.
uvicorn logs through the logging tree (`uvicorn.*`, routed by logging_setup), never its own
text; it logs no access lines (the service logs what it does, not every read)."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import uvicorn
from nodus_gitops.config import listen_address
from nodus_gitops.floor.errors import ConfigError
from nodus_gitops.web import healthcheck
from nodus_gitops.web.app import CSP, Dashboard
from nodus_gitops.web.auth import Auth
from nodus_gitops.web.connections import ServerConfig
from nodus_gitops.web.gauges import StoreGauges
from nodus_gitops.web.limits import Limits
from nodus_gitops.web.origins import TrustedHosts
from nodus_gitops.web.readiness import readiness

if TYPE_CHECKING:
    from nodus_gitops.service import Service

__all__ = ["CSP", "Limits", "Stop", "StoreGauges", "readiness", "start_server"]


class Stop:
    """Stops the server when called: no new connections, open ones closed, requests in
    progress given `Limits.shutdown_timeout` to finish, its threads joined. `address` is the
    (host, port) it listens on, also recorded in the state directory while it serves."""

    def __init__(self, server: uvicorn.Server, thread: threading.Thread, dashboard: Dashboard,
                 address: tuple[str, int], state_dir: Path) -> None:
        self._server = server
        self._thread = thread
        self._dashboard = dashboard
        self.address = address
        self._published = healthcheck.publish(state_dir, *self.address)

    def __call__(self) -> None:
        healthcheck.withdraw(self._published, *self.address)
        self._server.should_exit = True
        self._thread.join()
        self._dashboard.close()


def _bind(listen: str) -> socket.socket:
    """A listening socket for `host:port` (`[v6]:port` too; no host: 127.0.0.1)."""
    host, port = listen_address(listen)
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # IPPROTO_TCP by name: asyncio sets TCP_NODELAY on accepted connections only for
        # such sockets, and without it each keep-alive response waits for a delayed ACK.
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
        except BaseException:
            sock.close()
            raise
    except (OSError, ValueError) as e:
        raise ConfigError(f"--listen {listen}: {e}") from None
    return sock


def start_server(service: Service, listen: str,
                 limits: Limits | None = None) -> Callable[[], None]:
    """Serve in a background thread; returns the function that stops it (a `Stop`, whose
    `address` gives the port when `listen` asked for port 0)."""
    limits = limits or Limits()
    auth = Auth.from_config(service.settings.dashboard)
    sock = _bind(listen)
    # The name it was told to listen on is one of its own (an address always is).
    hosts = TrustedHosts([*(service.settings.dashboard.get("hosts") or ()),
                          listen.rpartition(":")[0].strip("[]")])
    dashboard = Dashboard(service, auth=auth, hosts=hosts, limits=limits)
    config = ServerConfig(
        dashboard.app, limits, loop="asyncio", lifespan="off", ws="none", log_config=None,
        access_log=False, proxy_headers=False, server_header=False,
        headers=[("Server", "nodus-gitops")], timeout_keep_alive=limits.keep_alive_timeout,
        timeout_graceful_shutdown=limits.shutdown_timeout,
        h11_max_incomplete_event_size=limits.max_head_bytes, backlog=2048)
    server = uvicorn.Server(config)
    # The socket listens now: a client that connects before the loop runs waits in the
    # backlog instead of being refused.
    sock.listen(config.backlog)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])),
                              daemon=True, name="http")
    thread.start()
    return Stop(server, thread, dashboard, sock.getsockname()[:2], service.settings.state_dir)
