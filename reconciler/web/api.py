"""The JSON API (`/api/v1/...`): the objects the dashboard and scripts read. Resources are
the same objects `get -o json` prints (`reconciler.output.resource_object`), with
secret-looking environment values masked; a Pipeline's stage Jobs and a Sweep's cell Jobs
are resources by their Job's name too, each with its `parent`. Each handler takes the
service and the parsed query and returns `(status, body, headers)`."""

from __future__ import annotations

import re
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from nodus_gitops.floor.budgets import Budget
from nodus_gitops.floor.errors import NotFoundError, ProviderError
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.floor.redaction import url_without_userinfo
from nodus_gitops.output import backend_events, resource_object
from nodus_gitops.providers.base import HasEvents
from nodus_gitops.source import CommitInfo
from nodus_gitops.spending import usd
from nodus_gitops.state.records import (
    BindingRecord,
    CheckRecordValue,
    EventRecord,
    InventoryRecord,
    SyncRecord,
)
from nodus_gitops.web import logs, overview_queries, queries, search
from nodus_gitops.web.html import path, with_query
from nodus_gitops.web.redact import (
    configured_secrets,
    mask,
    mask_events,
    mask_record,
    mask_sync,
)
from nodus_gitops.workloads.children import ChildJob, find_child

if TYPE_CHECKING:
    from nodus_gitops.service import Service

Params = dict[str, list[str]]
Reply = tuple[int, Any, dict[str, str]]

# Where a commit's page is, by host: known hosts, then `github.*`, `gitlab.*`, `gitea.*`.
_COMMIT_PATH = {"github.com": "/commit/", "gitlab.com": "/-/commit/", "gitea.com": "/commit/",
                "codeberg.org": "/commit/", "github": "/commit/", "gitlab": "/-/commit/",
                "gitea": "/commit/"}
_SHA = re.compile(r"^[0-9a-f]{7,64}$")


def commit_url(repo_url: str | None, sha: str | None) -> str | None:
    """The web page of `sha` when `repo_url` is an https URL of a GitHub, GitLab or Gitea
    host; None otherwise (other hosts, ssh and file URLs)."""
    if not repo_url or not sha or not _SHA.match(sha):
        return None
    parts = urlsplit(repo_url)
    host = (parts.hostname or "").lower()
    commit_path = _COMMIT_PATH.get(host) or _COMMIT_PATH.get(host.split(".", 1)[0])
    repo_path = parts.path.rstrip("/").removesuffix(".git")
    if parts.scheme != "https" or commit_path is None or repo_path.count("/") < 2:
        return None
    return f"https://{parts.netloc.rpartition('@')[2]}{repo_path}{commit_path}{sha}"


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def _one(params: Params, name: str) -> str | None:
    values = params.get(name) or []
    return values[-1] if values else None


def _limit(params: Params, default: int, most: int) -> int:
    text = _one(params, "limit") or str(default)
    if not text.isdigit() or not 1 <= int(text) <= most:
        raise ValueError(f"limit: a whole number from 1 to {most}")
    return int(text)


def resource(r: Any, parent: dict[str, str] | None = None,
             secrets: Iterable[str] = ()) -> dict[str, Any]:
    """A resource's JSON object, masked as its page is (`secrets`: `configured_secrets`)."""
    return resource_object(mask_record(r, secrets), parent)


@dataclass(frozen=True)
class Found:
    """One resource as its page and its document show it: its record (a stage's or a
    cell's Job: as its backend has it now), what it is a part of, and its events, the
    reconciler's with its backend's own (newest first)."""

    record: InventoryRecord
    child: ChildJob | None
    events: list[EventRecord]

    @property
    def parent(self) -> dict[str, str] | None:
        return self.child.parent_object() if self.child else None


def find(service: Service, kind: str, project: str, name: str,
         limit: int = 50) -> Found | None:
    """The resource `kind/project/name`: one the inventory records, or a Job a Pipeline
    or a Sweep created (not one it has not created yet); None when neither."""
    key = ResourceKey(kind, project, name)
    record = service.store.get_resource(key)
    child = find_child(service.store, project, name) if (
        record is None and kind == "Job") else None
    if record is not None:
        provider = logs.provider_of(service, record)
        events = service.store.list_events(key, limit)
    elif child is not None and child.created:
        provider = logs.provider_of(service, child.parent)
        record, events = _live(provider, child), []
    else:
        return None
    if kind == "Job" and isinstance(provider, HasEvents):
        with suppress(ProviderError):  # the backend's own events, where it answers
            events = events + backend_events(provider.events(key), key)
    return Found(record, child, sorted(events, key=lambda e: e.at, reverse=True)[:limit])


def _live(provider: Any, child: ChildJob) -> InventoryRecord:
    """A stage's or a cell's Job as its backend has it now, else as its parent recorded
    it (its backend not served here, or not answering)."""
    if provider is None:
        return child.record()
    try:
        return child.record(provider.get(child.key), asked=True)
    except ProviderError:
        return child.record()


def commit_object(repo_url: str | None, sha: str | None,
                  info: CommitInfo | None) -> dict[str, Any] | None:
    """A commit as the Overview shows it: its message's first line, author and time when
    the mirror holds it (else null), and its page on a known host."""
    if not sha:
        return None
    return {"sha": sha, "message": info.message if info else None,
            "author": info.author if info else None, "email": info.email if info else None,
            "time": _iso(info.time) if info else None, "url": commit_url(repo_url, sha)}


def budget_object(store: Any, budget: Budget | None) -> dict[str, Any] | None:
    """The binding's project budget this period; null when none is configured."""
    if budget is None:
        return None
    start, spent = overview_queries.budget_spent(store, budget, datetime.now(UTC))
    return {"project": budget.project, "limitUSD": usd(budget.limit_usd),
            "period": budget.period.value, "periodStart": _iso(start),
            "spentUSD": usd(spent), "leftUSD": usd(budget.limit_usd - spent)}


def failures_object(f: overview_queries.Failures | None) -> dict[str, Any] | None:
    """Why the binding's resources failed (null when none did): their commonest reason,
    one resource with it and its message and fix as recorded, and whose problem the
    reason is (`host`: the host that runs the backend, not the manifests)."""
    if f is None:
        return None
    key = f.resource
    return {"failed": f.failed, "reason": f.reason, "count": f.count, "cause": f.cause.value,
            "otherReasons": [{"reason": r, "count": n} for r, n in f.others],
            "resource": {"kind": key.kind, "project": key.project, "name": key.name,
                         "url": path("resources", key.kind, key.project, key.name)},
            "provider": f.provider, "message": f.message, "fix": f.fix}


def binding_object(service: Service, record: BindingRecord | None, binding_id: str,
                   counts: dict[str, int], cost: Any,
                   last: SyncRecord | None, *, head_sync: SyncRecord | None = None,
                   live: dict[str, int] | None = None,
                   failures: overview_queries.Failures | None = None) -> dict[str, Any]:
    sync = service.syncs.get(binding_id)
    url = record.url if record else (sync.binding.url if sync else None)
    shown_url = url_without_userinfo(url) if url else None
    head = record.last_seen_commit if record else None
    applied = record.last_applied_commit if record else None
    state = overview_queries.sync_status(head, applied, head_sync)
    rolled = overview_queries.health(live if live is not None else {})
    source = sync.source if sync else None
    head_info, applied_info = overview_queries.COMMITS.read_many([(source, head),
                                                                  (source, applied)])
    budget = budget_object(service.store, sync.binding.budget if sync else None)
    # Commit messages, sync messages and backends' messages are written by people and
    # tools: masked too (whole: a page that shortens one masks it first).
    return mask({
        "id": binding_id,
        "url": shown_url,
        "branch": record.branch if record else None,
        "path": record.path if record else None,
        "project": record.project if record else None,
        "interval": sync.binding.interval if sync else None,
        "lastSeenCommit": head,
        "lastAppliedCommit": applied,
        "lastPollAt": _iso(record.last_poll_at) if record else None,
        "lastError": record.last_error if record else None,
        "lastSync": {"id": last.id, "commit": last.commit, "result": last.result,
                     "message": last.message, "finishedAt": _iso(last.finished_at)}
        if last else None,
        "phases": counts,
        "costUSD": f"{cost:.2f}",
        "syncStatus": state.status.value,
        "syncReason": state.reason,
        "headSync": {"id": head_sync.id, "result": head_sync.result,
                     "message": head_sync.message, "startedAt": _iso(head_sync.started_at),
                     "finishedAt": _iso(head_sync.finished_at)} if head_sync else None,
        "health": rolled.status.value,
        "healthReason": rolled.reason,
        "failures": failures_object(failures),
        "headCommit": commit_object(shown_url, head, head_info),
        "appliedCommit": commit_object(shown_url, applied, applied_info),
        "spendUSD": usd(Decimal(str(cost))),  # every resource's cost recorded, deleted too
        "budget": budget,
        "budgetLeftUSD": budget["leftUSD"] if budget else None,
    }, configured_secrets(service.settings))


def repos(service: Service) -> list[dict[str, Any]]:
    """Every binding where it stands: a fixed number of queries, whatever the inventory's
    size (one grouped scan of the inventory, one lookup of the head commits' syncs), and
    the failed resources' rows (by the phase's index) to say why they failed."""
    store = service.store
    records = {b.id: b for b in store.list_bindings()}
    totals = queries.totals(store)
    counts, live = totals.phases_by_binding(), totals.live_phases_by_binding()
    costs = totals.cost_by_binding()
    heads = {b: records[b].last_seen_commit if b in records else None for b in service.syncs}
    head_syncs = overview_queries.head_syncs(store, heads)
    failed = any(n for phases in live.values() for phase, n in phases.items()
                 if phase in overview_queries.FAILED_PHASES)
    failures = overview_queries.failures(store) if failed else {}
    return [binding_object(service, records.get(b), b, counts.get(b, {}),
                           costs.get(b, Decimal(0)), store.last_sync(b),
                           head_sync=head_syncs.get(b), live=live.get(b, {}),
                           failures=failures.get(b))
            for b in service.syncs]


def sync_object(s: SyncRecord, detail: bool = False) -> dict[str, Any]:
    out = {"id": s.id, "binding": s.binding_id, "commit": s.commit, "result": s.result,
           "message": s.message, "summary": s.summary, "startedAt": _iso(s.started_at),
           "finishedAt": _iso(s.finished_at)}
    if detail:
        out["plan"] = s.plan
    return out


def check_object(c: CheckRecordValue) -> dict[str, Any]:
    return {"context": c.context, "state": c.state, "summary": c.summary,
            "target": c.target, "postedAt": _iso(c.posted_at)}


def event_object(e: EventRecord) -> dict[str, Any]:
    return {"id": e.id, "kind": e.key.kind, "project": e.key.project, "name": e.key.name,
            "at": _iso(e.at), "type": e.type, "reason": e.reason, "message": e.message}


# -- handlers ---------------------------------------------------------------------------


def get_repos(service: Service, params: Params) -> Reply:
    return 200, repos(service), {}


def get_syncs(service: Service, params: Params) -> Reply:
    syncs = service.store.list_syncs(_one(params, "repo"), limit=_limit(params, 50, 500))
    secrets = configured_secrets(service.settings)
    return 200, [sync_object(mask_sync(s, secrets)) for s in syncs], {}


def get_sync(service: Service, params: Params, sync_id: str) -> Reply:
    s = service.store.get_sync(int(sync_id))
    if s is None:
        return 404, {"error": f"no sync {sync_id}"}, {}
    body = sync_object(mask_sync(s, configured_secrets(service.settings)), detail=True)
    body["checks"] = [check_object(c) for c in service.store.list_checks(commit=s.commit,
                                                                          binding_id=s.binding_id)]
    return 200, body, {}


def get_resources(service: Service, params: Params) -> Reply:
    q = search.ResourceSearch.from_params(params)
    records, total = queries.resources_page(service.store, q)
    headers = {"X-Total-Count": str(total), "X-Page": str(q.page),
               "X-Page-Size": str(q.page_size)}
    links = []
    if q.page * q.page_size < total:
        links.append(f'<{with_query("/api/v1/resources", q.params(page=q.page + 1))}>; '
                     'rel="next"')
    if q.page > 1:
        links.append(f'<{with_query("/api/v1/resources", q.params(page=q.page - 1))}>; '
                     'rel="prev"')
    if links:
        headers["Link"] = ", ".join(links)
    secrets = configured_secrets(service.settings)
    return 200, [resource(r, secrets=secrets) for r in records], headers


def get_resource(service: Service, params: Params, kind: str, project: str,
                 name: str) -> Reply:
    found = find(service, kind, project, name)
    if found is None:
        return 404, {"error": f"no resource {kind}/{project}/{name}"}, {}
    r = found.record
    secrets = configured_secrets(service.settings)
    body = resource(r, found.parent, secrets)
    body.update({"binding": r.binding_id, "deleted": r.deleted, "updatedAt": _iso(r.updated_at),
                 "manifest": mask(r.manifest, secrets),
                 "events": [event_object(e) for e in mask_events(found.events, secrets)]})
    return 200, body, {}


def get_events(service: Service, params: Params) -> Reply:
    parts = [_one(params, n) for n in ("kind", "project", "name")]
    if any(parts) and not all(parts):
        raise ValueError("kind, project and name: give all three, or none")
    key = ResourceKey(*parts) if all(parts) else None  # type: ignore[arg-type]
    events = service.store.list_events(key, limit=_limit(params, 100, 1000))
    secrets = configured_secrets(service.settings)
    return 200, [event_object(e) for e in mask_events(events, secrets)], {}


def get_logs(service: Service, params: Params, kind: str, project: str, name: str) -> Reply:
    r = service.store.get_resource(ResourceKey(kind, project, name))
    child = find_child(service.store, project, name) if r is None and kind == "Job" else None
    if child is not None and child.created:  # a stage's or a cell's Job: its own logs
        r, params = child.parent, {**params, "job": [name]}
    if r is None:
        return 404, {"error": f"no resource {kind}/{project}/{name}"}, {}
    jobs = logs.child_jobs(r)
    job = _one(params, "job") or (jobs[0] if jobs else name)
    if job not in jobs:
        return 404, {"error": f"{job!r} is not a Job of {kind}/{name}"}, {}
    reader = logs.log_reader(service, r)
    if isinstance(reader, str):
        return 404, {"error": f"no logs of {kind}/{name} here: {reader}"}, {}
    index_text = _one(params, "index") or "0"
    tail_text = _one(params, "tail") or str(logs.DEFAULT_TAIL)
    if not index_text.isdigit() or not tail_text.isdigit():
        raise ValueError("index and tail: whole numbers")
    try:
        body = logs.tail(reader, ResourceKey("Job", project, job), int(index_text),
                         int(tail_text), configured_secrets(service.settings))
    except NotFoundError as exc:
        return 404, {"error": str(exc)}, {}
    return 200, body, {}
