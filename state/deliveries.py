"""The webhook delivery part of the store: which deliveries were received, by the id their
host gave them, so that the same delivery again triggers nothing on any replica.

Recording is one `INSERT ... ON CONFLICT DO NOTHING`: of two replicas that receive the
same delivery at once, exactly one inserts the row and is told it is the first. The
record stays bounded: each insert removes what is older than `KEEP` (hosts redeliver
within days: GitHub keeps deliveries for 3) and the oldest beyond `LIMIT` rows.
"""

from __future__ import annotations

from datetime import timedelta

from nodus_gitops.state.base import StoreBase
from nodus_gitops.state.models import WebhookDelivery
from sqlalchemy import Table, delete, select

_W: Table = WebhookDelivery.__table__  # type: ignore[attr-defined]

KEEP = timedelta(days=7)
LIMIT = 100_000


class DeliveryStore(StoreBase):
    def record_delivery(self, host: str, delivery_id: str, *, keep: timedelta = KEEP,
                        limit: int = LIMIT) -> bool:
        """Record a verified delivery; True when it is the first with this id from
        `host` (within `keep` and the last `limit`), False when it was received before."""
        now = self._now()
        insert = self._insert(_W).values(host=host, delivery_id=delivery_id, received_at=now)
        with self._write() as conn:
            inserted = conn.execute(insert.on_conflict_do_nothing().returning(_W.c.host))
            first = inserted.first() is not None
            if first:
                conn.execute(delete(_W).where(_W.c.received_at < now - keep))
                # The newest `limit` rows stay: the cut is the time of the one just past
                # them (found through the index on received_at).
                cut = (select(_W.c.received_at).order_by(_W.c.received_at.desc())
                       .offset(limit).limit(1).scalar_subquery())
                conn.execute(delete(_W).where(_W.c.received_at <= cut))
        return first
