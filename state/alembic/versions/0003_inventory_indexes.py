"""Indexes on the inventory for the dashboard's queries: each reads a narrow index
instead of every row's manifest and status JSON (seconds at 100,000 resources).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None

INDEXES = {
    "ix_inventory_rollup": ["binding_id", "kind", "phase", "deleted", "cost_usd"],
    "ix_inventory_budget": ["project", "finished_at", "deleted", "updated_at", "cost_usd"],
    "ix_inventory_kind_phase": ["kind", "phase", "cost_usd"],
    "ix_inventory_created_at": ["created_at"],
    "ix_inventory_source_commit": ["source_commit"],
    "ix_inventory_reason": ["reason"],
    "ix_inventory_name": ["name"],
}


def upgrade() -> None:
    for name, columns in INDEXES.items():
        op.create_index(name, "inventory", columns)


def downgrade() -> None:
    for name in INDEXES:
        op.drop_index(name, "inventory")
