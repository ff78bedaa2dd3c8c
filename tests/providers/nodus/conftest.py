"""The Nodus API contract harness: one `nodus` fixture, recorded or live.

Recorded (always): respx serves the answers a test queues with `reply`, in order, from
the fixtures in tests/testdata/nodus/; a request nobody queued fails the test, and so
does a queued answer nobody asked for. Live (only with NODUS_API_URL and NODUS_API_KEY):
`reply` does nothing and the real API answers. In both modes every request the provider
sends is captured, so the same assertions pin method, path, query, headers and body.
"""

from __future__ import annotations

import copy
import json
import os
import uuid
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
import yaml
from nodus_gitops.floor.identity import (
    ANNOTATION_SOURCE_COMMIT,
    ANNOTATION_SOURCE_FILE,
    ANNOTATION_SOURCE_REPO,
    ANNOTATION_SPEC_HASH,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    MANAGED_BY_VALUE,
    ResourceKey,
)
from nodus_gitops.providers.base import Workload
from nodus_gitops.providers.nodus import NodusConfig, NodusProvider
from nodus_gitops.providers.nodus.objects import PLURALS

TESTDATA = Path(__file__).resolve().parents[2] / "testdata"
RECORDED_URL = "https://nodus.test"
API_KEY = "nk_test_0123456789abcdef"  # a recorded-mode key; tests check it never leaks
PROJECT = "team-a"
INSTANCE = "test"
KINDS = ("Job", "Pipeline", "Sweep")
SEEDS = {"Job": "hello-job.yaml", "Pipeline": "train-eval-pipeline.yaml",
         "Sweep": "batch-size-sweep.yaml"}
SERVED = {"Job": "job-hello.json", "Pipeline": "pipeline-train-eval.json",
          "Sweep": "sweep-batch-size.json"}
LIVE_URL = os.environ.get("NODUS_API_URL")
LIVE_KEY = os.environ.get("NODUS_API_KEY")
live_only = pytest.mark.skipif(
    not (LIVE_URL and LIVE_KEY),
    reason="live Nodus API contract not run: set NODUS_API_URL and NODUS_API_KEY (and "
           "optionally NODUS_API_PROJECT) to run this suite against a real endpoint")


def fixture(filename: str, /, **placeholders: str) -> dict[str, Any]:
    """A JSON fixture; `$NAME`-style placeholders are filled from the keywords."""
    text = (TESTDATA / "nodus" / filename).read_text(encoding="utf-8")
    for key, value in placeholders.items():
        text = text.replace(f"${key.upper()}", value)
    return json.loads(text)


def seed(kind: str) -> dict[str, Any]:
    return yaml.safe_load((TESTDATA / "seeds" / SEEDS[kind]).read_text(encoding="utf-8"))


def status(name: str, kind: str, resource: str) -> dict[str, Any]:
    return fixture(f"status-{name}.json", plural=PLURALS[kind], name=resource)


class Recorder(httpx.BaseTransport):
    """Keeps every request the provider sends, then passes it on."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner = inner
        self.requests: list[httpx.Request] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.read()
        self.requests.append(request)
        return self.inner.handle_request(request)


class Backend:
    """A Nodus API for one test: recorded (`live` False) or real."""

    def __init__(self, live: bool, base_url: str, key: str, project: str) -> None:
        self.live = live
        self.key = key
        self.base_url = base_url
        self.project = project
        self.suffix = f"-{uuid.uuid4().hex[:6]}" if live else ""
        self.instance = f"contract{self.suffix}" if live else INSTANCE
        self.recorder = Recorder(httpx.HTTPTransport())
        self.provider = self.make_provider(key)
        self.created: list[ResourceKey] = []
        self._queue: deque[tuple[str, str, dict[str, str], httpx.Response | Exception]] = deque()
        self._seen = 0

    def make_provider(self, key: str, **kwargs: Any) -> NodusProvider:
        config = NodusConfig.from_settings("nodus", {"url": self.base_url},
                                           environ={"NODUS_API_KEY": key})
        return NodusProvider(config, transport=self.recorder, **kwargs)

    # --- resources ---

    def path(self, kind: str, name: str | None = None) -> str:
        path = f"/apis/nodus.dev/v1/namespaces/{self.project}/{PLURALS[kind]}"
        return f"{path}/{name}" if name else path

    def workload(self, kind: str, *, spec_hash: str = "h1", instance: str | None = None,
                 managed: bool = True, name: str | None = None,
                 spec: dict[str, Any] | None = None,
                 annotations: dict[str, str] | None = None) -> Workload:
        manifest = seed(kind)
        name = (name or manifest["metadata"]["name"]) + self.suffix
        manifest["metadata"]["name"] = name
        if spec:
            manifest["spec"].update(spec)
        if self.live:  # cheap and paused: a live contract run must not spend
            manifest["spec"].update({"maxCostUSD": "0.01", "state": "Suspended"})
        meta = manifest["metadata"]
        meta.setdefault("annotations", {}).update(annotations or {})
        if managed:
            meta.setdefault("labels", {}).update({LABEL_MANAGED_BY: MANAGED_BY_VALUE,
                                                  LABEL_INSTANCE: instance or self.instance})
            meta["annotations"].update({
                ANNOTATION_SOURCE_REPO: "https://git.test/team-a/manifests.git",
                ANNOTATION_SOURCE_COMMIT: "c0ffee", ANNOTATION_SOURCE_FILE: SEEDS[kind],
                ANNOTATION_SPEC_HASH: spec_hash})
        key = ResourceKey(kind, self.project, name)
        self.created.append(key)
        return Workload(key, manifest, spec_hash)

    def served(self, workload: Workload, name: str | None = None,
               spec: dict[str, Any] | None = None) -> dict[str, Any]:
        """A fixture object as the server would return it for `workload`."""
        obj = fixture(name or SERVED[workload.key.kind])
        meta = workload.manifest["metadata"]
        obj["metadata"].update(name=workload.key.name, namespace=self.project,
                               labels=copy.deepcopy(meta.get("labels", {})),
                               annotations=copy.deepcopy(meta.get("annotations", {})))
        if spec:
            obj["spec"].update(spec)
        return obj

    # --- the recorded API ---

    def reply(self, method: str, path: str, *, params: dict[str, str] | None = None,
              status: int = 200, json: Any = None, headers: dict[str, str] | None = None,
              content: bytes | None = None, error: Exception | None = None) -> None:
        """Queue the answer to the next request (recorded mode only)."""
        if self.live:
            return
        response: httpx.Response | Exception = error or (
            httpx.Response(status, content=content, headers=headers) if content is not None
            else httpx.Response(status, json=json, headers=headers))
        self._queue.append((method, path, params or {}, response))

    def serve(self, request: httpx.Request) -> httpx.Response:
        assert self._queue, f"unexpected request {request.method} {request.url}"
        method, path, params, response = self._queue.popleft()
        got = (request.method, request.url.path, dict(request.url.params))
        assert got == (method, path, params), f"sent {got}, expected {(method, path, params)}"
        if isinstance(response, Exception):
            raise response
        return response

    def take(self) -> list[httpx.Request]:
        """The requests sent since the last call."""
        new = self.recorder.requests[self._seen:]
        self._seen = len(self.recorder.requests)
        return new

    def leftover(self) -> list[str]:
        return [f"{m} {p}" for m, p, _, _ in self._queue]

    def assert_request(self, request: httpx.Request, method: str, path: str, *,
                       params: dict[str, str] | None = None, key: str | None = None,
                       body: Any = None, idempotency_key: str | None = None) -> None:
        """Pins one request: method, path (after any base path), query, auth and body."""
        assert request.method == method
        assert request.url.path.endswith(path), request.url.path
        assert dict(request.url.params) == (params or {})
        assert request.headers["Authorization"] == f"Bearer {key or self.key}"
        if method == "POST":
            assert request.headers["Idempotency-Key"], "every POST carries an Idempotency-Key"
            assert request.headers["Content-Type"] == "application/json"
        if idempotency_key is not None:
            assert request.headers["Idempotency-Key"] == idempotency_key
        if method == "PATCH":
            assert request.headers["Content-Type"] == "application/merge-patch+json"
        if body is not None:
            assert sent_json(request) == body



def sent_json(request: httpx.Request) -> Any:
    return json.loads(request.content) if request.content else None


@pytest.fixture(params=["recorded", pytest.param("live", marks=live_only)])
def nodus(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "live":
        backend = Backend(True, LIVE_URL or "", LIVE_KEY or "",
                          os.environ.get("NODUS_API_PROJECT", "default"))
        try:
            yield backend
        finally:
            for key in backend.created:  # a failed test must not leave runs behind
                try:
                    backend.provider.delete(key)
                except Exception:  # noqa: BLE001 - best effort cleanup
                    pass
            backend.provider.close()
        return
    backend = Backend(False, RECORDED_URL, API_KEY, PROJECT)
    with respx.mock(assert_all_mocked=True, assert_all_called=False) as router:
        router.route().mock(side_effect=backend.serve)
        yield backend
    backend.provider.close()
    assert not backend.leftover(), f"queued answers never requested: {backend.leftover()}"


@pytest.fixture
def recorded() -> Iterator[Backend]:
    """The recorded API alone, for failures a live endpoint cannot be made to produce."""
    backend = Backend(False, RECORDED_URL, API_KEY, PROJECT)
    with respx.mock(assert_all_mocked=True, assert_all_called=False) as router:
        router.route().mock(side_effect=backend.serve)
        yield backend
    backend.provider.close()
    assert not backend.leftover(), f"queued answers never requested: {backend.leftover()}"
