"""Webhook deliveries: the id of each verified delivery, kept a while, so that the same
delivery again (a host's redelivery, a replay) triggers nothing on any replica.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "webhook_delivery",
        sa.Column("host", sa.String(length=20), nullable=False),
        sa.Column("delivery_id", sa.String(length=200), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("host", "delivery_id"),
    )
    op.create_index("ix_webhook_delivery_received_at", "webhook_delivery", ["received_at"])


def downgrade() -> None:
    op.drop_index("ix_webhook_delivery_received_at", "webhook_delivery")
    op.drop_table("webhook_delivery")
