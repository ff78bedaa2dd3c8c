"""The state schema: the SQLModel tables the store reads and writes, and nothing else.

Every timestamp is a timezone-aware UTC `datetime` (stored naive-UTC on SQLite, as
`timestamptz` on PostgreSQL); every structured value is a `sqlalchemy.JSON` column, which
both databases round-trip. Enumerated string columns have a `StrEnum` here. Constraint and
index names are explicit so later migrations can refer to them. These models are the
head revision of state/alembic/versions (a test fails when the two differ).
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from nodus_gitops.floor.results import SyncResult
from sqlalchemy import JSON, CheckConstraint, DateTime, Dialect, Index, UniqueConstraint
from sqlalchemy.types import TypeDecorator
from sqlmodel import Field, SQLModel


class UTCDateTime(TypeDecorator[datetime]):
    """A `DateTime` that accepts only aware datetimes and always returns aware UTC ones."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: the state store keeps aware UTC times")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class IntentState(StrEnum):
    PENDING = "pending"
    DONE = "done"
    FAILED = "failed"


class EventType(StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


def _json() -> Any:
    """A non-null JSON column holding a dict (default `{}`)."""
    return Field(default_factory=dict, sa_type=JSON, nullable=False)


class RepoBinding(SQLModel, table=True):
    """One repository path feeding one Nodus project, and where its polling stands."""

    __tablename__ = "repo_binding"

    id: str = Field(primary_key=True, max_length=200)
    url: str
    branch: str
    path: str
    project: str
    last_seen_commit: str | None = None
    last_applied_commit: str | None = None
    last_poll_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    last_error: str | None = None
    updated_at: datetime = Field(sa_type=UTCDateTime)


class Sync(SQLModel, table=True):
    """One attempt to bring a binding to a commit: its plan, result and counts."""

    __tablename__ = "sync"
    __table_args__ = {"sqlite_autoincrement": True}

    id: int | None = Field(default=None, primary_key=True)
    binding_id: str = Field(foreign_key="repo_binding.id", index=True)
    commit: str
    started_at: datetime = Field(sa_type=UTCDateTime)
    finished_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    result: str = Field(default=SyncResult.PENDING.value)
    message: str = ""
    plan: dict[str, Any] = _json()
    summary: dict[str, Any] = _json()


class InventoryItem(SQLModel, table=True):
    """A resource the reconciler created and still answers for, keyed by (kind, project, name)."""

    __tablename__ = "inventory"
    # The dashboard's queries (reconciler/web/queries.py, overview_queries.py) read these
    # narrow indexes instead of the rows, whose manifest and status JSON are most of
    # their size: the grouped totals and /metrics (rollup), a project's spend this period
    # (budget), counts by kind and phase, and the resources table sorted by age, commit,
    # reason or name.
    __table_args__ = (
        UniqueConstraint("kind", "project", "name", name="uq_inventory_key"),
        Index("ix_inventory_rollup", "binding_id", "kind", "phase", "deleted", "cost_usd"),
        Index("ix_inventory_budget", "project", "finished_at", "deleted", "updated_at",
              "cost_usd"),
        Index("ix_inventory_kind_phase", "kind", "phase", "cost_usd"),
        Index("ix_inventory_created_at", "created_at"),
        Index("ix_inventory_source_commit", "source_commit"),
        Index("ix_inventory_reason", "reason"),
        Index("ix_inventory_name", "name"),
    )

    id: int | None = Field(default=None, primary_key=True)
    kind: str
    project: str
    name: str
    binding_id: str = Field(foreign_key="repo_binding.id", index=True)
    manifest: dict[str, Any] = _json()
    spec_hash: str
    source_commit: str | None = None
    source_file: str | None = None
    provider: str | None = None
    provider_id: str | None = None
    phase: str | None = Field(default=None, index=True)
    reason: str | None = None
    message: str | None = None
    fix: str | None = None
    status: dict[str, Any] = _json()
    cost_usd: str = "0"
    created_at: datetime = Field(sa_type=UTCDateTime)
    updated_at: datetime = Field(sa_type=UTCDateTime)
    finished_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    deleted: bool = False


class InventoryLabel(SQLModel, table=True):
    """One label of a resource's manifest (`metadata.labels`), so that a label selector is
    an indexed lookup instead of a read of every manifest. Kept in step with the
    manifest by the store (state/labels.py); gone with its resource."""

    __tablename__ = "inventory_label"
    __table_args__ = (Index("ix_inventory_label_key_value", "key", "value"),)

    inventory_id: int = Field(foreign_key="inventory.id", ondelete="CASCADE",
                              primary_key=True)
    key: str = Field(primary_key=True)
    value: str


class Intent(SQLModel, table=True):
    """The journal: one provider call announced before it is made, and its outcome."""

    __tablename__ = "intent"
    # Every poll asks for a binding's pending intents: with one index per column SQLite
    # may pick binding_id and read every intent the binding ever had.
    __table_args__ = (Index("ix_intent_binding_state", "binding_id", "state"),
                      {"sqlite_autoincrement": True})

    id: int | None = Field(default=None, primary_key=True)
    binding_id: str = Field(foreign_key="repo_binding.id", index=True)
    sync_id: int | None = Field(default=None, foreign_key="sync.id")
    action: str
    kind: str
    project: str
    name: str
    spec_hash: str
    idempotency_key: str = Field(unique=True)
    payload: dict[str, Any] = _json()
    state: str = Field(default=IntentState.PENDING.value)
    outcome: dict[str, Any] = _json()
    created_at: datetime = Field(sa_type=UTCDateTime)
    done_at: datetime | None = Field(default=None, sa_type=UTCDateTime)


class Event(SQLModel, table=True):
    """Something that happened to a resource, worth showing a person (like kubectl events)."""

    __tablename__ = "event"
    __table_args__ = (
        Index("ix_event_key", "kind", "project", "name"),
        {"sqlite_autoincrement": True},
    )

    id: int | None = Field(default=None, primary_key=True)
    kind: str
    project: str
    name: str
    at: datetime = Field(sa_type=UTCDateTime, index=True)
    type: str = EventType.NORMAL.value
    reason: str
    message: str = ""


class CheckRecord(SQLModel, table=True):
    """The last commit check posted per (commit, context, target), so none is posted twice."""

    __tablename__ = "check_record"
    __table_args__ = (UniqueConstraint("commit", "context", "target", name="uq_check_record_key"),)

    id: int | None = Field(default=None, primary_key=True)
    binding_id: str = Field(foreign_key="repo_binding.id", index=True)
    commit: str
    context: str
    state: str
    summary: str = ""
    posted_at: datetime = Field(sa_type=UTCDateTime)
    target: str


class Lease(SQLModel, table=True):
    """Which replica reconciles a binding, until when. `token` grows with every new holder,
    so a replica that lost its lease can tell (fencing)."""

    __tablename__ = "lease"

    binding_id: str = Field(primary_key=True, max_length=200)
    holder: str
    expires_at: datetime = Field(sa_type=UTCDateTime)
    token: int = 1


class Replica(SQLModel, table=True):
    """A running `serve` process and when it last said it was alive."""

    __tablename__ = "replica"

    id: str = Field(primary_key=True, max_length=200)
    heartbeat_at: datetime = Field(sa_type=UTCDateTime, index=True)


class WebhookDelivery(SQLModel, table=True):
    """A verified webhook delivery, by the id its host gave it, kept a while (state.
    deliveries) so that the same delivery again triggers nothing, on any replica."""

    __tablename__ = "webhook_delivery"

    host: str = Field(primary_key=True, max_length=20)
    delivery_id: str = Field(primary_key=True, max_length=200)
    received_at: datetime = Field(sa_type=UTCDateTime, index=True)


class SchemaVersion(SQLModel, table=True):
    """The marker of the ordered migrations before Alembic (which now keeps the revision in
    `alembic_version`): its one row stays at `migrations.LEGACY_GUARD`, newer than those
    releases know, so they refuse the database instead of taking it for an empty one."""

    __tablename__ = "schema_version"
    __table_args__ = (CheckConstraint("id = 1", name="ck_schema_version_single_row"),)

    id: int = Field(default=1, primary_key=True)
    version: int

