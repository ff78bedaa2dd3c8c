"""The state store: inventory, journal, syncs, events (SQLite or PostgreSQL)."""

from nodus_gitops.state.records import (
    BindingRecord,
    CheckRecordValue,
    EventRecord,
    IntentRecord,
    InventoryRecord,
    SyncRecord,
)
from nodus_gitops.state.store import Store, utc_now

__all__ = [
    "BindingRecord",
    "CheckRecordValue",
    "EventRecord",
    "IntentRecord",
    "InventoryRecord",
    "Store",
    "SyncRecord",
    "utc_now",
]
