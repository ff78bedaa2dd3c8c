"""The inventory's labels as rows of their own (`inventory_label`), indexed by (key, value),
so that a label selector looks labels up instead of reading every manifest; filled here
from the manifests already recorded.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None

_BATCH = 1000  # manifests read at a time


def upgrade() -> None:
    labels = op.create_table(
        "inventory_label",
        sa.Column("inventory_id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(), nullable=False),
        sa.Column("value", sa.String(), nullable=False),
        sa.ForeignKeyConstraint(["inventory_id"], ["inventory.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("inventory_id", "key"),
    )
    op.create_index("ix_inventory_label_key_value", "inventory_label", ["key", "value"])
    inventory = sa.table("inventory", sa.column("id", sa.Integer()),
                         sa.column("manifest", sa.JSON()))
    conn = op.get_bind()
    last = 0
    while True:  # by id, a batch at a time: the manifests are most of the database
        batch = conn.execute(sa.select(inventory.c.id, inventory.c.manifest)
                             .where(inventory.c.id > last).order_by(inventory.c.id)
                             .limit(_BATCH)).all()
        if not batch:
            break
        rows = [{"inventory_id": id, "key": k, "value": v}
                for id, manifest in batch for k, v in _labels(manifest).items()]
        if rows:
            conn.execute(labels.insert(), rows)
        last = batch[-1][0]


def _labels(manifest: Any) -> dict[str, str]:
    """`metadata.labels` with string keys and values (state/labels.py, frozen here)."""
    metadata = manifest.get("metadata") if isinstance(manifest, dict) else None
    found = metadata.get("labels") if isinstance(metadata, dict) else None
    if not isinstance(found, dict):
        return {}
    return {k: v for k, v in found.items() if isinstance(k, str) and isinstance(v, str)}


def downgrade() -> None:
    op.drop_index("ix_inventory_label_key_value", "inventory_label")
    op.drop_table("inventory_label")
