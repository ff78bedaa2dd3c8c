"""The HTTP server of `serve`: routing for the dashboard pages, the read-only JSON API,
health and readiness, `/metrics`, static files, the sync trigger and the webhook receiver.

Reads come from the state store only; nothing here changes state except asking for a
sync (refresh, webhooks), which only makes the reconciler fetch from Git. Every method
but GET and HEAD is refused with 405, except on those two POST paths.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

from nodus_gitops import metrics
from nodus_gitops.floor.errors import ConfigError
from nodus_gitops.floor.redaction import mask_url_passwords
from nodus_gitops.web import healthcheck, hooks, queries, routes
from nodus_gitops.web.auth import Auth
from prometheus_client.core import GaugeMetricFamily

if TYPE_CHECKING:
    from nodus_gitops.service import Service

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "object-src 'none'; frame-ancestors 'none'")
HOOK_HOSTS = ("github", "gitlab", "gitea", "generic")
STATIC_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}

_REFRESH = re.compile(r"^/api/v1/repos/([a-z0-9-]+)/refresh$")
_HOOK = re.compile(r"^/hooks/([a-z]+)$")
log = logging.getLogger("nodus_gitops.web")


def _static_files() -> dict[str, tuple[bytes, str]]:
    from importlib.resources import files

    folder = files("nodus_gitops.web") / "static"
    return {entry.name: (entry.read_bytes(), STATIC_TYPES[Path(entry.name).suffix])
            for entry in folder.iterdir() if Path(entry.name).suffix in STATIC_TYPES}


def readiness(service: Service, started: float) -> tuple[int, dict[str, Any]]:
    """Ready when the store answers and every binding was polled within 3x its interval
    (a binding not polled yet counts as on time for 3x its interval after start)."""
    try:
        records = {b.id: b for b in service.store.list_bindings()}
    except Exception as exc:  # any driver error: the store is unreachable
        reason = mask_url_passwords(str(exc))
        return 503, {"status": "unavailable", "error": f"state store: {reason}"}
    now, late = datetime.now(UTC), []
    for binding_id, sync in service.syncs.items():
        limit = 3 * sync.binding.interval
        record = records.get(binding_id)
        polled = record.last_poll_at if record else None
        if polled is None and time.monotonic() - started > limit:
            late.append(f"{binding_id}: not polled yet, {limit:g}s (3x interval) after start")
        elif polled is not None and (seconds := (now - polled).total_seconds()) > limit:
            late.append(f"{binding_id}: last polled {seconds:.0f}s ago, more than {limit:g}s "
                        "(3x interval)")
    if late:
        return 503, {"status": "not ready", "reasons": late}
    return 200, {"status": "ready"}


class StoreGauges:
    """The gauges of `/metrics` that the store knows, read at each scrape: managed
    resources by kind and phase, and each binding's recorded cost."""

    def __init__(self, service: Service) -> None:
        self.service = service

    def describe(self) -> list[GaugeMetricFamily]:
        return list(self._families())

    def collect(self) -> list[GaugeMetricFamily]:
        totals = queries.totals(self.service.store)
        resources, cost = self._families()
        for kind, phase, n in totals.by_kind_phase():
            resources.add_metric([kind, phase], n)
        costs = totals.cost_by_binding()
        for binding in sorted(set(self.service.syncs) | set(costs)):
            cost.add_metric([binding], float(costs.get(binding, 0)))
        return [resources, cost]

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
        return (GaugeMetricFamily("nodus_gitops_resources",
                                  "Managed resources by kind and phase.", labels=("kind", "phase")),
                GaugeMetricFamily("nodus_gitops_cost_usd",
                                  "Recorded cost of a binding's resources, in US dollars.",
                                  labels=("binding",), unit="usd"))


def make_handler(service: Service, auth: Auth | None = None,
                 started: float | None = None) -> type[BaseHTTPRequestHandler]:
    table = routes.table(service)
    static = _static_files()
    scrape = metrics.scrape_registry([StoreGauges(service)])
    started = time.monotonic() if started is None else started

    class Handler(BaseHTTPRequestHandler):
        server_version = "nodus-gitops"
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out at once, no ACK stall

        def log_message(self, format: str, *args: Any) -> None:  # quiet: the service logs
            pass

        def __getattr__(self, name: str) -> Any:  # any other method: 405, not 501
            if name.startswith("do_"):
                return self._not_allowed
            raise AttributeError(name)

        def _send(self, status: int, body: Any, content_type: str = routes.JSON,
                  headers: dict[str, str] | None = None) -> None:
            if isinstance(body, str):
                data = body.encode()
            elif isinstance(body, bytes):
                data = body
            else:
                data = json.dumps(body, default=str).encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Content-Security-Policy", CSP)
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("X-Frame-Options", "DENY")
            self.send_header("Referrer-Policy", "no-referrer")
            if "Cache-Control" not in (headers or {}):
                self.send_header("Cache-Control", "no-store")
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def _not_allowed(self, allow: str = "GET, HEAD") -> None:
            self.close_connection = True  # a body we did not read may follow
            self._send(405, {"error": "this API is read-only"}, headers={"Allow": allow})

        def _authorized(self) -> bool:
            if auth is None or auth.allows(self.headers.get("Authorization")):
                return True
            self._send(401, {"error": "authentication required"},
                       headers={"WWW-Authenticate": auth.challenge})
            return False

        def do_GET(self) -> None:
            try:
                self._get()
            except ValueError as exc:  # a bad query parameter
                self._send(400, {"error": str(exc)})
            except Exception:  # a bug or a store error: answer, log, keep serving
                log.exception("request failed", extra={"path": self.path})
                self._send(500, {"error": "internal error; see the service log"})

        def _get(self) -> None:
            parts = urlsplit(self.path)
            path = parts.path.rstrip("/") or "/"
            if path == "/healthz":
                return self._send(200, {"status": "ok"})
            if path == "/readyz":
                return self._send(*readiness(service, started))
            if not self._authorized():
                return None
            if path == "/metrics":
                return self._send(200, metrics.render(scrape), metrics.CONTENT_TYPE)
            if path.startswith("/static/"):
                found = static.get(path.removeprefix("/static/"))
                if found is None:
                    return self._send(404, {"error": f"no such file: {path}"})
                return self._send(200, found[0], found[1], {"Cache-Control": "no-cache"})
            if _REFRESH.match(path) or _HOOK.match(path):
                return self._not_allowed("POST")
            for pattern, handler in table:
                match = pattern.match(path)
                if match is not None:
                    status, body, headers, content_type = handler(
                        parse_qs(parts.query), *(unquote(g) for g in match.groups()))
                    return self._send(status, body, content_type, headers)
            return self._send(404, {"error": f"no such endpoint: {path}"})

        do_HEAD = do_GET

        def do_POST(self) -> None:
            path = urlsplit(self.path).path
            self.close_connection = True
            hook = _HOOK.match(path)
            if hook and hook.group(1) in HOOK_HOSTS:
                try:
                    return self._hook(hook.group(1))
                except Exception:  # a bug in a hook handler: answer, log, keep serving
                    log.exception("webhook failed", extra={"path": path})
                    return self._send(500, {"error": "internal error; see the service log"})
            match = _REFRESH.match(path)
            if match is None:
                return self._not_allowed()
            if not self._authorized():
                return None
            if not service.trigger(match.group(1)):
                return self._send(404, {"error": f"no repo binding {match.group(1)!r}"})
            return self._send(HTTPStatus.ACCEPTED, {"status": "sync requested"})

        def _hook(self, host: str) -> None:
            limit = hooks.MAX_BODY_BYTES
            length = self.headers.get("Content-Length", "")
            if self.headers.get("Transfer-Encoding") or not length.strip().isdigit():
                return self._send(411, {"error": "a webhook needs a Content-Length"})
            if int(length) > limit:
                return self._send(413, {"error": f"webhook body over {limit} bytes"})
            body = self.rfile.read(int(length))
            secrets = (service.settings.checks or {}).get("webhooks", {})
            status, reply = hooks.handle(service, host, self.headers, body, secrets)
            return self._send(status, reply)

    return Handler


class Stop:
    """Stops the server when called; `address` is the (host, port) it listens on, also
    recorded in the state directory for the health check while it serves."""

    def __init__(self, server: ThreadingHTTPServer, state_dir: Path) -> None:
        self._server = server
        self.address: tuple[str, int] = server.server_address[:2]  # type: ignore[assignment]
        self._published = healthcheck.publish(state_dir, *self.address)

    def __call__(self) -> None:
        healthcheck.withdraw(self._published, *self.address)
        self._server.shutdown()
        self._server.server_close()


def start_server(service: Service, listen: str) -> Callable[[], None]:
    """Serve in a background thread; returns the function that stops it (a `Stop`, whose
    `address` gives the port when `listen` asked for port 0)."""
    auth = Auth.from_config(service.settings.dashboard)
    host, _, port = listen.rpartition(":")
    try:
        server = ThreadingHTTPServer((host or "127.0.0.1", int(port)),
                                     make_handler(service, auth))
    except (OSError, ValueError) as e:
        raise ConfigError(f"--listen {listen}: {e}") from None
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True,
                     name="http").start()
    return Stop(server, service.settings.state_dir)
