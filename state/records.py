"""The values the store hands out: small frozen dataclasses, detached from any session.

Callers read these and never a table row, so the schema can change without touching them.
Dict fields (manifest, status, plan, ...) are plain dicts decoded from JSON: treat them as
read-only; build a changed record with `dataclasses.replace`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from nodus_gitops.floor.identity import ResourceKey


@dataclass(frozen=True, slots=True)
class BindingRecord:
    """A repo binding and where its polling and applying stand."""

    id: str
    url: str
    branch: str
    path: str
    project: str
    last_seen_commit: str | None = None
    last_applied_commit: str | None = None
    last_poll_at: datetime | None = None
    last_error: str | None = None
    updated_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class SyncRecord:
    """One sync of a binding to a commit; `result` is a `SyncResult` value."""

    id: int
    binding_id: str
    commit: str
    started_at: datetime
    finished_at: datetime | None
    result: str
    message: str
    plan: dict[str, Any]
    summary: dict[str, Any]


@dataclass(frozen=True, slots=True)
class InventoryRecord:
    """A managed resource as recorded. `created_at`/`updated_at` are set by the store."""

    key: ResourceKey
    binding_id: str
    manifest: dict[str, Any]
    spec_hash: str
    source_commit: str | None = None
    source_file: str | None = None
    provider: str | None = None
    provider_id: str | None = None
    phase: str | None = None
    reason: str | None = None
    message: str | None = None
    fix: str | None = None
    status: dict[str, Any] = field(default_factory=dict)
    cost_usd: str = "0"
    created_at: datetime | None = None
    updated_at: datetime | None = None
    finished_at: datetime | None = None
    deleted: bool = False


@dataclass(frozen=True, slots=True)
class IntentRecord:
    """A journal entry: a provider call announced before it was made."""

    id: int
    binding_id: str
    sync_id: int | None
    action: str
    key: ResourceKey
    spec_hash: str
    idempotency_key: str
    payload: dict[str, Any]
    state: str
    outcome: dict[str, Any]
    created_at: datetime
    done_at: datetime | None


@dataclass(frozen=True, slots=True)
class EventRecord:
    """Something that happened to a resource; `type` is `Normal` or `Warning`."""

    id: int
    key: ResourceKey
    at: datetime
    type: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class CheckRecordValue:
    """The last check posted for (commit, context, target)."""

    id: int
    binding_id: str
    commit: str
    context: str
    state: str
    summary: str
    posted_at: datetime
    target: str
