"""The schema of the ordered migrations' version 3, the last before Alembic.

Revision ID: 0001
Revises:
Create Date: 2025-06-01

Table for table, column for column, the schema `SQLModel.metadata.create_all` made for
schema_version 3 (tests/state/legacy/ holds the statements it ran). `schema_version`, the
marker of those migrations, stays with its one row at 4: the releases before Alembic
refuse a version newer than their 3, so they refuse a database they can no longer follow
instead of taking it for an empty one. A database at version 3 is stamped with this
revision (state/migrations.py); one at 1 or 2 first gets the steps it missed.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None

LEGACY_GUARD = 4  # == nodus_gitops.state.migrations.LEGACY_GUARD, frozen here


def upgrade() -> None:
    op.create_table(
        "repo_binding",
        sa.Column("id", sa.String(length=200), nullable=False),
        sa.Column("url", sa.String(), nullable=False),
        sa.Column("branch", sa.String(), nullable=False),
        sa.Column("path", sa.String(), nullable=False),
        sa.Column("project", sa.String(), nullable=False),
        sa.Column("last_seen_commit", sa.String(), nullable=True),
        sa.Column("last_applied_commit", sa.String(), nullable=True),
        sa.Column("last_poll_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.String(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "event",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("project", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("type", sa.String(), nullable=False),
        sa.Column("reason", sa.String(), nullable=False),
        sa.Column("message", sa.String(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_event_at", "event", ["at"])
    op.create_index("ix_event_key", "event", ["kind", "project", "name"])
    op.create_table(
        "lease",
        sa.Column("binding_id", sa.String(length=200), nullable=False),
        sa.Column("holder", sa.String(), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("token", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("binding_id"),
    )
    op.create_table(
        "replica",
        sa.Column("id", sa.String(length=200), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_replica_heartbeat_at", "replica", ["heartbeat_at"])
    schema_version = op.create_table(
        "schema_version",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.CheckConstraint("id = 1", name="ck_schema_version_single_row"),
    )
    op.bulk_insert(schema_version, [{"id": 1, "version": LEGACY_GUARD}])
    op.create_table(
        "sync",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("binding_id", sa.String(), nullable=False),
        sa.Column("commit", sa.String(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("result", sa.String(), nullable=False),
        sa.Column("message", sa.String(), nullable=False),
        sa.Column("plan", sa.JSON(), nullable=False),
        sa.Column("summary", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.ForeignKeyConstraint(["binding_id"], ["repo_binding.id"]),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_sync_binding_id", "sync", ["binding_id"])
    op.create_table(
        "inventory",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("project", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("binding_id", sa.String(), nullable=False),
        sa.Column("manifest", sa.JSON(), nullable=False),
        sa.Column("spec_hash", sa.String(), nullable=False),
        sa.Column("source_commit", sa.String(), nullable=True),
        sa.Column("source_file", sa.String(), nullable=True),
        sa.Column("provider", sa.String(), nullable=True),
        sa.Column("provider_id", sa.String(), nullable=True),
        sa.Column("phase", sa.String(), nullable=True),
        sa.Column("reason", sa.String(), nullable=True),
        sa.Column("message", sa.String(), nullable=True),
        sa.Column("fix", sa.String(), nullable=True),
        sa.Column("status", sa.JSON(), nullable=False),
        sa.Column("cost_usd", sa.String(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("deleted", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("kind", "project", "name", name="uq_inventory_key"),
        sa.ForeignKeyConstraint(["binding_id"], ["repo_binding.id"]),
    )
    op.create_index("ix_inventory_phase", "inventory", ["phase"])
    op.create_index("ix_inventory_binding_id", "inventory", ["binding_id"])
    op.create_table(
        "check_record",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("binding_id", sa.String(), nullable=False),
        sa.Column("commit", sa.String(), nullable=False),
        sa.Column("context", sa.String(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("summary", sa.String(), nullable=False),
        sa.Column("posted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("target", sa.String(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("commit", "context", "target", name="uq_check_record_key"),
        sa.ForeignKeyConstraint(["binding_id"], ["repo_binding.id"]),
    )
    op.create_index("ix_check_record_binding_id", "check_record", ["binding_id"])
    op.create_table(
        "intent",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("binding_id", sa.String(), nullable=False),
        sa.Column("sync_id", sa.Integer(), nullable=True),
        sa.Column("action", sa.String(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("project", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("spec_hash", sa.String(), nullable=False),
        sa.Column("idempotency_key", sa.String(), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("outcome", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("done_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.ForeignKeyConstraint(["binding_id"], ["repo_binding.id"]),
        sa.ForeignKeyConstraint(["sync_id"], ["sync.id"]),
        sa.UniqueConstraint("idempotency_key"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_intent_binding_state", "intent", ["binding_id", "state"])
    op.create_index("ix_intent_binding_id", "intent", ["binding_id"])


def downgrade() -> None:
    for table in ("intent", "check_record", "inventory", "sync", "schema_version", "replica",
                  "lease", "event", "repo_binding"):
        op.drop_table(table)
