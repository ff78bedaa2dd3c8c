"""The dashboard's ASGI application (Starlette): the dashboard pages and the read-only JSON
API (the GET route table of routes.py), health and readiness, `/metrics`, static files,
the sync trigger and the webhook receiver.

Reads come from the state store only; nothing here changes state except asking for a
sync (refresh, webhooks), which only makes the reconciler fetch from Git. Every method
but GET and HEAD is refused with 405, except on those two POST paths. Before anything
else, a request must name a host the server answers to (origins.py); the refresh must
not come from another site's page. Store reads and hooks run in the server's own worker
threads, so a slow query never holds up the event loop that answers everyone else.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote

from nodus_gitops import metrics
from nodus_gitops.web import hooks, outputs, routes
from nodus_gitops.web.auth import Auth
from nodus_gitops.web.gauges import StoreGauges
from nodus_gitops.web.limits import Limits
from nodus_gitops.web.origins import TrustedHosts, cross_site
from nodus_gitops.web.readiness import readiness
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import ClientDisconnect, Request
from starlette.responses import FileResponse, Response
from starlette.routing import Mount
from starlette.types import Receive, Scope, Send

if TYPE_CHECKING:
    from nodus_gitops.service import Service

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "object-src 'none'; frame-ancestors 'none'")
HOOK_HOSTS = ("github", "gitlab", "gitea", "generic")
STATIC_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
READ_ONLY = "GET, HEAD"

_REFRESH = re.compile(r"^/api/v1/repos/([a-z0-9-]+)/refresh$")
_PLAN = re.compile(r"^/api/v1/repos/([a-z0-9-]+)/plan$")
_OUTPUT = re.compile(r"^/api/v1/resources/Job/([^/]+)/([^/]+)/outputs/(.+)$")
_HOOK = re.compile(r"^/hooks/([a-z]+)$")
log = logging.getLogger("nodus_gitops.web")


@dataclass(frozen=True)
class Answer:
    status: int
    body: Any  # str, bytes, outputs.FileBody, or anything json.dumps takes
    content_type: str = routes.JSON
    headers: dict[str, str] = field(default_factory=dict)


def _error(status: int, message: str, **headers: str) -> Answer:
    return Answer(status, {"error": message}, headers=headers)


def _not_allowed(allow: str = READ_ONLY) -> Answer:
    return _error(405, "this API is read-only", Allow=allow)


def _response(answer: Answer, *, close: bool = False) -> Response:
    """The answer with the security headers; `close` ends the connection after it (a body
    the server did not read may follow the request)."""
    body = answer.body
    headers = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
               "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer",
               "Cache-Control": "no-store", **answer.headers}
    if close:
        headers["Connection"] = "close"
    if isinstance(body, outputs.FileBody):  # sent from its file, then removed
        return FileResponse(body.path, answer.status, headers, media_type=answer.content_type,
                            background=BackgroundTask(body.discard))
    data = body.encode() if isinstance(body, str) else body if isinstance(body, bytes) \
        else json.dumps(body, default=str).encode()
    return Response(data, answer.status, headers, media_type=answer.content_type)


def _static_files() -> dict[str, tuple[bytes, str]]:
    from importlib.resources import files

    folder = files("nodus_gitops.web") / "static"
    return {entry.name: (entry.read_bytes(), STATIC_TYPES[Path(entry.name).suffix])
            for entry in folder.iterdir() if Path(entry.name).suffix in STATIC_TYPES}


class Dashboard:
    """Answers every request; `app` is the Starlette application around it."""

    def __init__(self, service: Service, *, auth: Auth | None = None,
                 hosts: TrustedHosts | None = None, limits: Limits | None = None,
                 started: float | None = None) -> None:
        self.service = service
        self.auth = auth
        self.hosts = hosts or TrustedHosts()
        self.limits = limits or Limits()
        self.started = time.monotonic() if started is None else started
        self.table = routes.table(service)
        self.static = _static_files()
        self.scrape = metrics.scrape_registry([StoreGauges(service)])
        # The server's own worker threads (not a shared pool): `close` joins them.
        self.workers = ThreadPoolExecutor(self.limits.worker_threads, "http-worker")
        # One mount for every path and method: the route table, the 405s and the guards
        # are this class's own (a Starlette Route would answer other methods itself).
        self.app = Starlette(routes=[Mount("", app=self._asgi)])

    def close(self) -> None:
        """Wait for the reads in progress and end the worker threads."""
        self.workers.shutdown(wait=True)

    async def _in_worker(self, function: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.workers, function, *args)

    async def _asgi(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            response = await self.answer(Request(scope, receive))
        except Exception:  # a bug: answer, log, keep serving
            log.exception("request failed", extra={"path": scope["path"]})
            response = _response(_error(500, "internal error; see the service log"), close=True)
        await response(scope, receive, send)

    async def answer(self, request: Request) -> Response:
        # The raw path: a %2F inside a resource's name stays inside its path segment.
        path = request.scope["raw_path"].decode("latin-1")
        hook = _HOOK.match(path)
        if not hook and not self.hosts.allow(request.headers.get("host", "127.0.0.1")):
            return _response(_error(400, f"this server does not answer to the host "
                                         f"{request.headers['host']!r}: add its name to "
                                         "dashboard.hosts in the config"))
        if request.method in ("GET", "HEAD"):
            query = request.scope["query_string"].decode("latin-1")
            return _response(await self._get(request, path.rstrip("/") or "/", query))
        if request.method != "POST":
            return _response(_not_allowed(), close=True)
        if hook and hook.group(1) in HOOK_HOSTS:
            try:
                answer = await self._hook(request, hook.group(1))
            except Exception:  # a bug in a hook handler: answer, log, keep serving
                log.exception("webhook failed", extra={"path": path})
                answer = _error(500, "internal error; see the service log")
            return _response(answer, close=True)
        if refresh := _REFRESH.match(path):
            return _response(await self._refresh(request, refresh.group(1)), close=True)
        if planned := _PLAN.match(path):
            query = parse_qs(request.scope["query_string"].decode("latin-1"))
            return _response(await self._plan(request, planned.group(1), query), close=True)
        return _response(_not_allowed(), close=True)

    def _unauthorized(self, request: Request) -> Answer | None:
        if self.auth is None or self.auth.allows(request.headers.get("authorization")):
            return None
        return _error(401, "authentication required", **{
            "WWW-Authenticate": self.auth.challenge})

    async def _get(self, request: Request, path: str, query: str) -> Answer:
        if path == "/healthz":
            return Answer(200, {"status": "ok"})
        try:
            return await self._in_worker(self._read, request, path, query)
        except ValueError as exc:  # a bad query parameter
            return _error(400, str(exc))
        except Exception:  # a bug or a store error: answer, log, keep serving
            log.exception("request failed", extra={"path": path})
            return _error(500, "internal error; see the service log")

    def _read(self, request: Request, path: str, query: str) -> Answer:
        """A GET's answer, in a worker thread (the store is read synchronously)."""
        if path == "/readyz":
            return Answer(*readiness(self.service, self.started))
        if refused := self._unauthorized(request):
            return refused
        if path == "/metrics":
            return Answer(200, metrics.render(self.scrape), metrics.CONTENT_TYPE)
        if path.startswith("/static/"):
            found = self.static.get(path.removeprefix("/static/"))
            if found is None:
                return _error(404, f"no such file: {path}")
            return Answer(200, found[0], found[1], {"Cache-Control": "no-cache"})
        if _REFRESH.match(path) or _HOOK.match(path) or _PLAN.match(path):
            return _not_allowed("POST")
        if output := _OUTPUT.match(path):
            return self._output(*(unquote(g) for g in output.groups()))
        for pattern, handler in self.table:
            match = pattern.match(path)
            if match is not None:
                status, body, headers, content_type = handler(
                    parse_qs(query), *(unquote(g) for g in match.groups()))
                return Answer(status, body, content_type, headers)
        return _error(404, f"no such endpoint: {path}")

    async def _refresh(self, request: Request, binding_id: str) -> Answer:
        if refused := self._unauthorized(request):
            return refused
        if reason := cross_site(request.headers):
            return _error(403, f"cross-origin request refused: {reason}; refresh from this "
                               "dashboard's own pages, or from a client that sends no Origin")
        if not await self._in_worker(self.service.trigger, binding_id):
            return _error(404, f"no repo binding {binding_id!r}")
        return Answer(202, {"status": "sync requested"})

    async def _plan(self, request: Request, binding_id: str,
                    query: dict[str, list[str]]) -> Answer:
        """A plan of the binding's tip (or `ref`) against this server's state (plan_api)."""
        from nodus_gitops.web.plan_api import plan_answer

        if refused := self._unauthorized(request):
            return refused
        if reason := cross_site(request.headers):
            return _error(403, f"cross-origin request refused: {reason}; ask for a plan from "
                               "a client that sends no Origin (nodus-gitops plan --server)")
        refs = query.get("ref") or [None]
        try:
            status, body, headers = await self._in_worker(plan_answer, self.service,
                                                          binding_id, refs[-1])
        except Exception:  # a bug: answer, log, keep serving
            log.exception("plan failed", extra={"binding": binding_id})
            return _error(500, "internal error; see the service log")
        return Answer(status, body, headers=headers)

    def _output(self, project: str, name: str, output: str) -> Answer:
        """A stored output's bytes (web/outputs), only where the dashboard has a login:
        outputs are a Job's data, unmasked."""
        if self.auth is None:
            return _error(403, "this server sends outputs only with dashboard "
                               "authentication: set dashboard.tokenEnv (or token, or "
                               "basicAuth) in its config")
        status, body, headers, content_type = outputs.output_answer(
            self.service, project, name, output)
        return Answer(status, body, content_type, headers)

    async def _hook(self, request: Request, host: str) -> Answer:
        limit = hooks.MAX_BODY_BYTES
        length = request.headers.get("content-length", "")
        if request.headers.get("transfer-encoding") or not length.strip().isdigit():
            return _error(411, "a webhook needs a Content-Length")
        if int(length) > limit:
            return _error(413, f"webhook body over {limit} bytes")
        try:
            body = await asyncio.wait_for(request.body(), self.limits.body_timeout)
        except TimeoutError:
            return _error(408, f"the webhook body did not arrive within "
                               f"{self.limits.body_timeout:g}s")
        except ClientDisconnect:
            return _error(400, "the client left before sending its body")
        secrets = (self.service.settings.checks or {}).get("webhooks", {})
        status, reply = await self._in_worker(hooks.handle, self.service, host,
                                              request.headers, body, secrets)
        return Answer(status, reply)
