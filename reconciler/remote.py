"""Remote mode: `get`, `describe`, `logs` and `sync` read a `serve`'s JSON API instead of
a local state database (`--server URL`, else `NODUS_GITOPS_SERVER`; the dashboard's token,
if it has one, from `NODUS_GITOPS_TOKEN`, sent as `Authorization: Bearer`).

The API's resource documents are turned back into the records the local commands read,
so that the same printers (output.py) show them the same way: `RemoteStore` answers what
the commands ask of a store, `RemoteBackends` what they ask of the backends (a stage's or
a cell's Job as it is now, which the server reads from its backend).

Each way the server can fail to answer is one line and its own exit code (`RemoteError`):
unreachable, refusing the token, or not serving this API at that address.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode, urlsplit

from nodus_gitops.floor.errors import NodusGitopsError
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.state.records import EventRecord, InventoryRecord
from nodus_gitops.workloads.children import ChildJob

if TYPE_CHECKING:
    from urllib.error import HTTPError

SERVER_ENV, TOKEN_ENV = "NODUS_GITOPS_SERVER", "NODUS_GITOPS_TOKEN"
EXIT_UNREACHABLE, EXIT_UNAUTHORIZED, EXIT_NO_API = 3, 4, 5
PAGE_SIZE = 500  # the API's largest page
TIMEOUT = 30.0  # seconds for one request


class RemoteError(NodusGitopsError):
    """The server did not answer as a `serve` does; `exit_code` says how."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class RemoteNotFound(RemoteError):
    """The API answered 404 for a resource or a binding it does not have."""


def server_of(args: Any, environ: dict[str, str] | None = None) -> str | None:
    """The server a command reads: `--server`, else NODUS_GITOPS_SERVER; None: local."""
    environ = os.environ if environ is None else environ  # type: ignore[assignment]
    url = getattr(args, "server", None) or environ.get(SERVER_ENV) or None
    if url is None:
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise RemoteError(f"--server {url!r}: give the server's http:// or https:// URL "
                          f"(or set {SERVER_ENV})")
    return url.rstrip("/")


@dataclass
class Client:
    """JSON over HTTP to one `serve`. Sends no Origin: the server takes a CLI's request to
    sync as its own user's, not another site's page's."""

    url: str
    token: str | None = field(default_factory=lambda: os.environ.get(TOKEN_ENV) or None)

    def _request(self, method: str, path: str,
                 timeout: float = TIMEOUT) -> tuple[Any, dict[str, str]]:
        with self.reply(method, path, timeout) as reply:
            try:
                return json.loads(reply.read() or b"null"), dict(reply.headers)
            except ValueError:
                raise RemoteError(f"{self.url}{path} did not answer JSON: is {self.url} a "
                                  "`nodus-gitops serve`?", EXIT_NO_API) from None

    @contextmanager
    def reply(self, method: str, path: str, timeout: float = TIMEOUT) -> Iterator[Any]:
        """The server's answer to a request, open to be read; every failure (unreachable,
        401, no API, 404, another status) as a RemoteError with its exit code."""
        # urllib (http.client, ssl) loads only when a server is asked: a local `get` never
        from urllib.error import HTTPError, URLError
        from urllib.request import Request, urlopen

        request = Request(self.url + path, method=method, headers={"Accept": "application/json"})
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            opened = urlopen(request, timeout=timeout)  # noqa: S310 (http(s) only)
        except HTTPError as exc:
            raise self._refused(exc, path) from None
        except (URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise RemoteError(f"cannot reach {self.url}: {reason} (is `nodus-gitops serve` "
                              f"running there? point --server or {SERVER_ENV} at it)",
                              EXIT_UNREACHABLE) from None
        with opened:
            yield opened

    def _refused(self, exc: HTTPError, path: str) -> RemoteError:
        try:
            error = str(json.loads(exc.read() or b"{}").get("error") or "")
        except (ValueError, AttributeError):
            error = ""
        if exc.code == 401:
            said = (f"{TOKEN_ENV} is not the dashboard's token" if self.token else
                    f"set {TOKEN_ENV} to the dashboard's token")
            return RemoteError(f"{self.url} requires authentication (401): {said}",
                               EXIT_UNAUTHORIZED)
        if exc.code == 404 and (not error or error.startswith("no such endpoint")):
            return RemoteError(f"{self.url} has no {path.partition('?')[0]} (404): is it a "
                               "`nodus-gitops serve` of this version?", EXIT_NO_API)
        if exc.code == 404:
            return RemoteNotFound(f"{error} on {self.url}")
        return RemoteError(f"{self.url} answered {exc.code}: {error or exc.reason}")

    def get(self, path: str, **query: Any) -> Any:
        shown = {k: v for k, v in query.items() if v is not None}
        return self._request("GET", path + (f"?{urlencode(shown)}" if shown else ""))[0]

    def post(self, path: str, timeout: float = TIMEOUT, **query: Any) -> Any:
        shown = {k: v for k, v in query.items() if v is not None}
        return self._request("POST", path + (f"?{urlencode(shown)}" if shown else ""),
                             timeout)[0]

    def pages(self, path: str, **query: Any) -> list[Any]:
        """Every item of a paged listing, page after page until the last."""
        out: list[Any] = []
        page = 1
        while True:
            shown = {k: v for k, v in {**query, "pageSize": PAGE_SIZE, "page": page}.items()
                     if v is not None}
            items, headers = self._request("GET", f"{path}?{urlencode(shown)}")
            out += items
            total = int({k.lower(): v for k, v in headers.items()}.get("x-total-count", 0))
            if not items or len(out) >= total:
                return out
            page += 1


def resource_path(key: ResourceKey) -> str:
    return "/api/v1/resources/" + "/".join(quote(p, safe="") for p in (
        key.kind, key.project, key.name))


def _time(text: Any) -> datetime | None:
    return datetime.fromisoformat(text) if isinstance(text, str) else None


def record_of(doc: dict[str, Any]) -> InventoryRecord:
    """A resource document of the API (`GET /api/v1/resources/{kind}/{project}/{name}`)
    as the record the local commands print."""
    return InventoryRecord(
        key=ResourceKey(doc["kind"], doc["project"], doc["name"]),
        binding_id=doc.get("binding") or "", manifest=doc.get("manifest") or {},
        spec_hash=doc.get("specHash") or "", source_commit=doc.get("sourceCommit"),
        source_file=doc.get("file"), phase=doc.get("phase"), reason=doc.get("reason"),
        message=doc.get("message"), fix=doc.get("fix"), status=doc.get("status") or {},
        cost_usd=doc.get("costUSD") or "0", created_at=_time(doc.get("createdAt")),
        updated_at=_time(doc.get("updatedAt")), finished_at=_time(doc.get("finishedAt")),
        deleted=bool(doc.get("deleted")))


def events_of(doc: dict[str, Any]) -> list[EventRecord]:
    """The events a resource document carries (the reconciler's and its backend's)."""
    return [EventRecord(e.get("id") or 0, ResourceKey(e["kind"], e["project"], e["name"]),
                        _time(e["at"]), e.get("type") or "Normal",  # type: ignore[arg-type]
                        e.get("reason") or "-", e.get("message") or "")
            for e in doc.get("events") or []]


class RemoteStore:
    """What `get`, `describe` and `logs` read of a store, read from a `serve`: every
    resource as its whole document (manifest, status, events), each fetched once."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self._docs: dict[ResourceKey, dict[str, Any] | None] = {}
        self._listed: list[ResourceKey] | None = None

    def document(self, key: ResourceKey) -> dict[str, Any] | None:
        if key not in self._docs:
            try:
                self._docs[key] = self.client.get(resource_path(key))
            except RemoteNotFound:
                self._docs[key] = None
        return self._docs[key]

    def list_inventory(self) -> list[InventoryRecord]:
        if self._listed is None:
            self._listed = [ResourceKey(d["kind"], d["project"], d["name"])
                            for d in self.client.pages("/api/v1/resources", sort="kind")]
        docs = (self.document(k) for k in self._listed)
        return [record_of(d) for d in docs if d is not None]

    def get_resource(self, key: ResourceKey) -> InventoryRecord | None:
        doc = self.document(key)
        return record_of(doc) if doc is not None and doc.get("parent") is None else None

    def list_events(self, key: ResourceKey, limit: int | None = None) -> list[EventRecord]:
        doc = self.document(key)
        return events_of(doc) if doc is not None else []

    def forget(self) -> None:
        """Read everything afresh next time (`get --watch`)."""
        self._docs, self._listed = {}, None

    def close(self) -> None:
        pass


@dataclass
class RemoteBackends:
    """What the local commands ask of the backends, answered by the server, which reads
    its backends: a stage's or a cell's Job as it is now, with its events. The events of
    a Job the inventory records come with its document already (RemoteStore)."""

    store: RemoteStore
    notes: list[str] = field(default_factory=list)

    def __enter__(self) -> RemoteBackends:
        return self

    def __exit__(self, *_exc: Any) -> None:
        pass

    def child_now(self, child: ChildJob) -> InventoryRecord:
        doc = self.store.document(child.key)
        return record_of(doc) if doc is not None else child.record()

    def events(self, job: InventoryRecord | ChildJob) -> list[EventRecord]:
        if not isinstance(job, ChildJob):
            return []
        doc = self.store.document(job.key)
        return events_of(doc) if doc is not None else []


# -- `sync`: ask a serve to fetch now, and follow what that poll did -----------------

# A sync's results that mean its commit runs (exit 0), and a poll that found nothing new.
SYNC_OK = frozenset({"applied", "noop"})


@dataclass(frozen=True)
class SyncOutcome:
    """What the poll after a request ended with: a sync's result, or `unchanged` (no sync:
    nothing new to judge) or `error` (the fetch failed), with the commit and the message."""

    result: str
    commit: str | None
    message: str
    sync_id: int | None = None

    @property
    def ok(self) -> bool:
        return self.result in SYNC_OK or self.result == "unchanged"


def _binding(client: Client, binding_id: str) -> dict[str, Any]:
    for repo in client.get("/api/v1/repos"):
        if repo.get("id") == binding_id:
            return repo
    raise RemoteNotFound(f"no repo binding {binding_id!r} on {client.url}")


def _newest_sync(client: Client, binding_id: str) -> int:
    syncs = client.get("/api/v1/syncs", repo=binding_id, limit=1)
    return syncs[0]["id"] if syncs else 0


class SyncFollower:
    """Asks a `serve` to poll one binding now and tells what that poll did: the first
    sync recorded after the request, once finished; else, once the binding's poll time
    moves past the request's with no sync, what the poll found (nothing new, or the
    fetch's error)."""

    def __init__(self, client: Client, binding_id: str) -> None:
        self.client = client
        self.binding_id = binding_id
        self._polled: str | None = None
        self._after = 0

    def request(self) -> None:
        # Where the binding stands before: a later poll time or sync id is this request's.
        self._polled = _binding(self.client, self.binding_id).get("lastPollAt")
        self._after = _newest_sync(self.client, self.binding_id)
        self.client.post(f"/api/v1/repos/{quote(self.binding_id, safe='')}/refresh")

    def outcome(self) -> SyncOutcome | None:
        """What the poll did, or None while it has not finished."""
        # The binding first, then its syncs: a poll records its time and starts its sync
        # in one commit, so a moved poll time with no new sync after it means none.
        repo = _binding(self.client, self.binding_id)
        syncs = self.client.get("/api/v1/syncs", repo=self.binding_id, limit=20)
        new = [s for s in syncs if s["id"] > self._after]
        if new:
            first = min(new, key=lambda s: s["id"])
            if first.get("finishedAt") is None:
                return None
            return SyncOutcome(first["result"], first.get("commit"), first.get("message") or "",
                               first["id"])
        polled = repo.get("lastPollAt")
        if polled is None or polled == self._polled or (
                self._polled is not None and _time(polled) <= _time(self._polled)):  # type: ignore[operator]
            return None
        if repo.get("lastError"):
            return SyncOutcome("error", repo.get("lastSeenCommit"), repo["lastError"])
        return SyncOutcome("unchanged", repo.get("lastSeenCommit"),
                           "nothing new to apply" if repo.get("lastSeenCommit") == repo.get(
                               "lastAppliedCommit") else "nothing new to judge")


PLAN_TIMEOUT = 180.0  # the server waits up to a minute for a running sync, then fetches


def remote_plan(client: Client, binding_id: str | None, ref: str | None) -> dict[str, Any]:
    """The server's plan of `binding_id` (default: its only binding) at `ref` (default:
    its branch's tip): `text`, `json` and `exitCode` as the local `plan` prints and ends."""
    if binding_id is None:
        ids = sorted(str(r.get("id")) for r in client.get("/api/v1/repos"))
        if len(ids) != 1:
            raise RemoteError(f"{client.url} serves {len(ids)} repo bindings"
                              + (f" ({', '.join(ids)})" if ids else "")
                              + ": choose one with --binding ID")
        binding_id = ids[0]
    return client.post(f"/api/v1/repos/{quote(binding_id, safe='')}/plan", PLAN_TIMEOUT,
                       ref=ref)
