"""The state store: inventory, journal, syncs, events (SQLite or PostgreSQL).

The records (plain values) import nothing heavy; `Store` and `utc_now` load SQLAlchemy
and SQLModel, so they are imported on first use: a command that only reads records or
prints help never pays for them."""

from __future__ import annotations

import importlib

from nodus_gitops.state.records import (
    BindingRecord,
    CheckRecordValue,
    EventRecord,
    IntentRecord,
    InventoryRecord,
    SyncRecord,
)

_LAZY = {"Store": "nodus_gitops.state.store", "utc_now": "nodus_gitops.state.store"}

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


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)
