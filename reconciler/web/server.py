"""The HTTP server of `serve`: the read-only JSON API, health endpoints, and the one
trigger webhooks use. Reads come from the state store only; nothing here changes state
except asking for a sync, which only makes the reconciler fetch from Git."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from reconciler.errors import ConfigError
from reconciler.output import resource_object

if TYPE_CHECKING:
    from reconciler.service import Service

_REFRESH = re.compile(r"^/api/v1/repos/([a-z0-9-]+)/refresh$")


def _binding_object(service: Service, binding_id: str) -> dict[str, Any]:
    record = service.store.get_binding(binding_id)
    last = service.store.last_sync(binding_id)
    return {
        "id": binding_id,
        "url": record.url if record else None,
        "branch": record.branch if record else None,
        "path": record.path if record else None,
        "project": record.project if record else None,
        "lastSeenCommit": record.last_seen_commit if record else None,
        "lastAppliedCommit": record.last_applied_commit if record else None,
        "lastPollAt": record.last_poll_at.isoformat() if record and record.last_poll_at else None,
        "lastError": record.last_error if record else None,
        "lastSync": {"commit": last.commit, "result": last.result, "message": last.message,
                     "finishedAt": last.finished_at.isoformat() if last.finished_at else None}
        if last else None,
        "phases": service.store.count_by_phase(binding_id),
    }


def make_handler(service: Service) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "nodus-gitops"

        def log_message(self, format: str, *args: Any) -> None:  # quiet: the service logs
            pass

        def _json(self, status: int, body: Any) -> None:
            data = json.dumps(body, default=str).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0].rstrip("/") or "/"
            if path == "/healthz":
                return self._json(200, {"status": "ok"})
            if path == "/readyz":
                try:
                    service.store.list_bindings()
                except Exception as e:  # the store is unreachable: not ready
                    return self._json(503, {"status": "unavailable", "error": str(e)})
                return self._json(200, {"status": "ready"})
            if path == "/api/v1/repos":
                return self._json(200, [_binding_object(service, b) for b in service.syncs])
            if path == "/api/v1/resources":
                return self._json(200, [resource_object(r)
                                        for r in service.store.list_inventory()])
            if path == "/api/v1/syncs":
                return self._json(200, [
                    {"id": s.id, "binding": s.binding_id, "commit": s.commit,
                     "result": s.result, "message": s.message, "summary": s.summary,
                     "startedAt": s.started_at, "finishedAt": s.finished_at}
                    for s in service.store.list_syncs()])
            return self._json(404, {"error": f"no such endpoint: {path}"})

        do_HEAD = do_GET

        def do_POST(self) -> None:
            match = _REFRESH.match(self.path.split("?", 1)[0])
            if match is None:
                return self._json(405, {"error": "this API is read-only"})
            if not service.trigger(match.group(1)):
                return self._json(404, {"error": f"no repo binding {match.group(1)!r}"})
            return self._json(HTTPStatus.ACCEPTED, {"status": "sync requested"})

        def _read_only(self) -> None:
            self._json(405, {"error": "this API is read-only"})

        do_PUT = do_PATCH = do_DELETE = _read_only

    return Handler


def start_server(service: Service, listen: str) -> Callable[[], None]:
    """Serve in a background thread; returns the function that stops it."""
    host, _, port = listen.rpartition(":")
    try:
        server = ThreadingHTTPServer((host or "127.0.0.1", int(port)), make_handler(service))
    except (OSError, ValueError) as e:
        raise ConfigError(f"--listen {listen}: {e}") from None
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True, name="http")
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()

    return stop
