"""The inventory's labels table kept in step with the manifests: whenever the store writes
a resource's manifest, the resource's rows in `inventory_label` are replaced by the labels
of that manifest, in the same transaction. A deleted resource's labels go with it (the
foreign key cascades)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from nodus_gitops.state.models import InventoryLabel
from sqlalchemy import Connection, Table, bindparam, delete

_L: Table = InventoryLabel.__table__  # type: ignore[attr-defined]

# Ids per DELETE: well under SQLite's limit on bound parameters.
_CHUNK = 500


def manifest_labels(manifest: Mapping[str, Any]) -> dict[str, str]:
    """`metadata.labels` of a manifest: its string keys with string values (what the schema
    allows; anything else is no label a selector can match)."""
    metadata = manifest.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
    if not isinstance(labels, Mapping):
        return {}
    return {k: v for k, v in labels.items() if isinstance(k, str) and isinstance(v, str)}


def replace_labels(conn: Connection, manifests: Iterable[tuple[int, Mapping[str, Any]]]) -> None:
    """Make the labels of each `(inventory id, manifest)` those of the manifest."""
    ids: list[int] = []
    rows: list[dict[str, Any]] = []
    for inventory_id, manifest in manifests:
        ids.append(inventory_id)
        rows += [{"inventory_id": inventory_id, "key": k, "value": v}
                 for k, v in manifest_labels(manifest).items()]
    stmt = delete(_L).where(_L.c.inventory_id.in_(bindparam("ids", expanding=True)))
    for start in range(0, len(ids), _CHUNK):
        conn.execute(stmt, {"ids": ids[start:start + _CHUNK]})
    if rows:
        conn.execute(_L.insert(), rows)
