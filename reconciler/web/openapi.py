"""The OpenAPI 3.1 description of the JSON API, served at `/api/v1/openapi.json`."""

from __future__ import annotations

from typing import Any

from nodus_gitops.floor.results import SyncResult
from nodus_gitops.web.overview_queries import Cause, Health, SyncStatus
from nodus_gitops.web.queries import MAX_PAGE_SIZE, PAGE_SIZE, SORT_KEYS


def _q(name: str, description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "description": description,
            "schema": schema or {"type": "string"}}


def _p(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}


def _ok(description: str, schema: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"200": {"description": description,
                    "content": {"application/json": {"schema": schema}}, **extra},
            "404": {"$ref": "#/components/responses/NotFound"}}


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _list(name: str) -> dict[str, Any]:
    return {"type": "array", "items": _ref(name)}


_NULLABLE_STR = {"type": ["string", "null"]}
_TIME = {"type": ["string", "null"], "format": "date-time"}
_KEY = [_p("kind"), _p("project"), _p("name")]
_RESOURCE_FILTERS = [
    _q("repo", "binding id"), _q("kind", "Job, Pipeline or Sweep"),
    _q("phase", "one phase or several, comma-separated; Unknown for none yet"),
    _q("project", "project"), _q("name", "substring of the name"),
    _q("label", "label selector over metadata.labels, comma-separated terms: key=value, "
       "key!=value (a resource without the key matches), key (has it), !key (has not); "
       "repeat the parameter to add terms"),
    _q("commit", "the start of the commit a resource was applied from: 4 to 40 hex digits"),
    _q("q", "the search box's words: a bare word is part of the name; key=value, "
       "key!=value and !key are labels; kind:, phase:, repo:, project:, commit: and label: "
       "set those filters"),
    _q("sort", f"one of {', '.join(SORT_KEYS)}; prefix '-' for descending"),
    _q("page", "page number, from 1", {"type": "integer", "minimum": 1}),
    _q("pageSize", f"resources a page (default {PAGE_SIZE})",
       {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_SIZE}),
]

SCHEMAS: dict[str, Any] = {
    "Error": {"type": "object", "properties": {"error": {"type": "string"}},
              "required": ["error"]},
    "Repo": {"type": "object", "required": ["id", "phases", "costUSD"], "properties": {
        "id": {"type": "string"}, "url": _NULLABLE_STR, "branch": _NULLABLE_STR,
        "path": _NULLABLE_STR, "project": _NULLABLE_STR, "interval": {"type": ["number", "null"]},
        "lastSeenCommit": _NULLABLE_STR, "lastAppliedCommit": _NULLABLE_STR,
        "lastPollAt": _TIME, "lastError": _NULLABLE_STR,
        "lastSync": {"type": ["object", "null"]},
        "phases": {"type": "object", "additionalProperties": {"type": "integer"},
                   "description": "resources by phase, deleted ones included"},
        "costUSD": {"type": "string", "description": "spend rounded to the cent"},
        "syncStatus": {"enum": [s.value for s in SyncStatus], "description":
                       "from the head commit's own latest sync: Synced (applied, and its "
                       "sync applied it), OutOfSync (not applied yet: never synced, or "
                       "syncing now), Failed (its sync errored or was partial), Blocked "
                       "(invalid, or a guard refused changes), Unknown (no head seen)"},
        "syncReason": {"type": "string", "description": "why, in one line"},
        "headSync": {"type": ["object", "null"], "description": "the head commit's latest "
                     "sync (id, result, message, startedAt, finishedAt)"},
        "health": {"enum": [h.value for h in Health], "description":
                   "the live resources' phases rolled up, worst first: Degraded (Failed, "
                   "CreateFailed), Unknown (no phase yet, or one not known), Progressing "
                   "(Queued, Provisioning, Running, Recovering, Suspending, Cancelling), "
                   "Suspended, Healthy (Succeeded, Cancelled); Missing when there are none"},
        "healthReason": {"type": "string", "description": "the phases that decided it"},
        "failures": {"oneOf": [_ref("Failures"), {"type": "null"}]},
        "headCommit": {"oneOf": [_ref("Commit"), {"type": "null"}]},
        "appliedCommit": {"oneOf": [_ref("Commit"), {"type": "null"}]},
        "spendUSD": {"type": "string", "description": "the cost recorded of every resource "
                     "of the binding, deleted ones included, to the micro-dollar"},
        "budget": {"type": ["object", "null"], "description": "the project's budget this "
                   "period; null when none is configured", "properties": {
                       "project": {"type": "string"}, "limitUSD": {"type": "string"},
                       "period": {"enum": ["day", "week", "month"]}, "periodStart": _TIME,
                       "spentUSD": {"type": "string"}, "leftUSD": {"type": "string"}}},
        "budgetLeftUSD": {"type": ["string", "null"], "description": "budget.leftUSD: "
                          "negative past the limit; null when no budget is configured"}}},
    "Failures": {
        "type": "object", "required": ["failed", "reason", "count", "cause", "resource"],
        "description": "why the binding's live resources in a failed phase (Failed, "
        "CreateFailed) failed, as their records say; null when none did",
        "properties": {
            "failed": {"type": "integer", "description": "how many failed"},
            "reason": {"type": ["string", "null"], "description": "their commonest reason "
                       "(a resource's own before StageFailed and CellsFailed, which point "
                       "at its children); null: the backend recorded none"},
            "count": {"type": "integer", "description": "how many of them have it"},
            "cause": {"enum": [c.value for c in Cause], "description": "whose problem the "
                      "reason is: host (the host that runs the backend cannot run anything, "
                      "as SandboxUnavailable; not the manifests), backend (the backend could "
                      "not give or refused what the resource asks: its set-up or the "
                      "manifest), resource (the resource's own run)"},
            "otherReasons": {"type": "array", "items": {
                "type": "object", "properties": {"reason": _NULLABLE_STR,
                                                 "count": {"type": "integer"}}}},
            "resource": {"type": "object", "description": "the first recorded of those with "
                         "the reason, and its page", "properties": {
                             "kind": {"type": "string"}, "project": {"type": "string"},
                             "name": {"type": "string"}, "url": {"type": "string"}}},
            "provider": _NULLABLE_STR,
            "message": {"type": ["string", "null"], "description": "its message, else its "
                        "latest warning event's; masked"},
            "fix": {"type": ["string", "null"], "description": "the fix its backend "
                    "recorded"}}},
    "Commit": {"type": "object", "required": ["sha"], "properties": {
        "sha": {"type": "string"},
        "message": {"type": ["string", "null"], "description": "its first line; null when "
                    "the mirror does not hold the commit (not fetched yet)"},
        "author": _NULLABLE_STR, "email": _NULLABLE_STR,
        "time": {"type": ["string", "null"], "format": "date-time",
                 "description": "the author's time, in the author's UTC offset"},
        "url": {"type": ["string", "null"], "description": "its page on GitHub, GitLab or "
                "Gitea when the binding's URL is one of theirs"}}},
    "Sync": {"type": "object", "required": ["id", "binding", "commit", "result"], "properties": {
        "id": {"type": "integer"}, "binding": {"type": "string"}, "commit": {"type": "string"},
        "result": {"enum": [r.value for r in SyncResult
                            if r not in (SyncResult.UNCHANGED, SyncResult.BACKOFF)]},
        "message": {"type": "string"}, "summary": {"type": "object"}, "startedAt": _TIME,
        "finishedAt": _TIME, "plan": {"type": "object"},
        "checks": {"type": "array", "items": {"type": "object"}}}},
    "Resource": {"type": "object", "required": ["kind", "name", "project", "status"],
                 "description": "The object `nodus-gitops get -o json` prints.", "properties": {
        "kind": {"enum": ["Job", "Pipeline", "Sweep"]}, "name": {"type": "string"},
        "project": {"type": "string"}, "phase": _NULLABLE_STR, "reason": _NULLABLE_STR,
        "message": _NULLABLE_STR, "fix": _NULLABLE_STR, "costUSD": {"type": "string"},
        "sourceCommit": _NULLABLE_STR, "file": _NULLABLE_STR, "specHash": {"type": "string"},
        "createdAt": _TIME, "finishedAt": _TIME, "status": {"type": "object"},
        "parent": {"type": ["object", "null"], "description": "the Pipeline or Sweep whose "
                   "stage or cell this Job is (kind, project, name, and stage or cell); "
                   "null for what Git declares", "properties": {
                       "kind": {"enum": ["Pipeline", "Sweep"]}, "project": {"type": "string"},
                       "name": {"type": "string"}, "stage": {"type": "string"},
                       "cell": {"type": "string"}}}}},
    "ResourceDetail": {"allOf": [_ref("Resource"), {"type": "object", "properties": {
        "binding": {"type": "string"}, "deleted": {"type": "boolean"}, "updatedAt": _TIME,
        "manifest": {"type": "object"}, "events": _list("Event")}}]},
    "Event": {"type": "object", "properties": {
        "id": {"type": "integer"}, "kind": {"type": "string"}, "project": {"type": "string"},
        "name": {"type": "string"}, "at": _TIME, "type": {"enum": ["Normal", "Warning"]},
        "reason": {"type": "string"}, "message": {"type": "string"}}},
    "Logs": {"type": "object", "properties": {
        "job": {"type": "string"}, "index": {"type": "integer"}, "indexes": {"type": "integer"},
        "attempt": {"type": ["integer", "null"]}, "attempts": {"type": "array"},
        "phase": _NULLABLE_STR, "lines": {"type": "array", "items": {"type": "string"}},
        "truncated": {"type": "boolean"}}},
    "PlanAnswer": {"type": "object", "required": ["binding", "commit", "exitCode", "text",
                                                  "json"], "properties": {
        "binding": {"type": "string"}, "commit": {"type": "string"},
        "exitCode": {"enum": [0, 1, 2], "description": "as `plan`'s: 0 no changes, 2 "
                                                       "changes pending, 1 problems"},
        "text": {"type": "string", "description": "what `plan` prints"},
        "json": {"type": "string", "description": "what `plan -o json` prints"}}},
}

_PAGED_HEADERS = {"headers": {
    "X-Total-Count": {"schema": {"type": "integer"}, "description": "resources matching"},
    "Link": {"schema": {"type": "string"}, "description": "rel=next / rel=prev pages"}}}

SPEC: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "nodus-gitops dashboard API", "version": "1",
             "description": "Read-only: every method but GET and HEAD is refused (405), "
                            "except asking for a sync and receiving webhooks."},
    "paths": {
        "/api/v1/repos": {"get": {"summary": "Repo bindings and where they stand",
                                  "responses": _ok("bindings", _list("Repo"))}},
        "/api/v1/repos/{id}/refresh": {"post": {
            "summary": "Ask for a sync of one binding now", "parameters": [_p("id")],
            "responses": {"202": {"description": "sync requested"},
                          "404": {"$ref": "#/components/responses/NotFound"}}}},
        "/api/v1/repos/{id}/plan": {"post": {
            "summary": "The plan `nodus-gitops plan` would print of the binding's branch tip "
                       "(or ref), made against this server's state; masked",
            "parameters": [_p("id"), _q("ref", "branch, tag, SHA or ref (default: the "
                                               "branch's tip, fetched)")],
            "responses": {**_ok("the plan", _ref("PlanAnswer")),
                          "404": {"$ref": "#/components/responses/NotFound"},
                          "422": {"description": "the ref or the repository could not be "
                                                 "read", "content": {"application/json": {
                                                     "schema": _ref("Error")}}},
                          "503": {"description": "a sync of the binding is running; "
                                                 "Retry-After says when to ask again"}}}},
        "/api/v1/syncs": {"get": {
            "summary": "Syncs, newest first",
            "parameters": [_q("repo", "binding id"),
                           _q("limit", "at most (default 50)", {"type": "integer"})],
            "responses": _ok("syncs", _list("Sync"))}},
        "/api/v1/syncs/{id}": {"get": {
            "summary": "One sync with its plan and the checks posted for its commit",
            "parameters": [_p("id")], "responses": _ok("the sync", _ref("Sync"))}},
        "/api/v1/resources": {"get": {
            "summary": "Managed resources, filtered, sorted and paged",
            "parameters": _RESOURCE_FILTERS,
            "responses": _ok("one page", _list("Resource"), **_PAGED_HEADERS)}},
        "/api/v1/resources/{kind}/{project}/{name}": {"get": {
            "summary": "One resource with its manifest and events (a stage's or a cell's "
                       "Job too, by its Job's name, with its parent)", "parameters": _KEY,
            "responses": _ok("the resource", _ref("ResourceDetail"))}},
        "/api/v1/resources/{kind}/{project}/{name}/logs": {"get": {
            "summary": "The tail of one index's latest attempt (local backend)",
            "parameters": [*_KEY, _q("job", "a stage or cell Job of a Pipeline or Sweep"),
                           _q("index", "index (default 0)", {"type": "integer"}),
                           _q("tail", "lines (default 200, at most 2000)",
                              {"type": "integer"})],
            "responses": _ok("log lines", _ref("Logs"))}},
        "/api/v1/resources/Job/{project}/{name}/outputs/{output}": {"get": {
            "summary": "A succeeded Job's stored output: a file as it is, a directory as a "
                       "tar archive; only where the dashboard requires authentication",
            "parameters": [_p("project"), _p("name"), _p("output")],
            "responses": {"200": {
                "description": "the output's bytes, checked against the recorded SHA-256 "
                               "before they are sent",
                "headers": {h: {"schema": {"type": "string"}, "description": d} for h, d in (
                    ("X-Nodus-Output-Sha256", "the SHA-256 recorded when the Job finished"),
                    ("X-Nodus-Output-Type", "file or directory"),
                    ("X-Nodus-Output-Name", "the name it is copied as into a folder"))},
                "content": {"application/octet-stream": {}, "application/x-tar": {}}},
                "403": {"description": "the dashboard has no authentication configured"},
                "404": {"$ref": "#/components/responses/NotFound"}}}},
        "/api/v1/events": {"get": {
            "summary": "Events, newest first",
            "parameters": [_q("kind", "with project and name: one resource's events"),
                           _q("project", "project"), _q("name", "name"),
                           _q("limit", "at most (default 100)", {"type": "integer"})],
            "responses": _ok("events", _list("Event"))}},
    },
    "components": {
        "schemas": SCHEMAS,
        "responses": {"NotFound": {"description": "no such object", "content": {
            "application/json": {"schema": _ref("Error")}}}},
    },
}
