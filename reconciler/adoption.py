"""Adoption: a binding whose state store was lost gets its inventory back from the backend.

Without it, the first sync after a lost `state.db` (or a fresh PostgreSQL) plans a create
for every manifest, and each is refused ("already exists, created with another
idempotency key") or, on a backend without that guard, run a second time. Here the
resources the backend lists with this instance's ownership marks are recorded as the
inventory before that sync, so it plans against what really runs: a noop for an
unchanged spec, the usual patch, replace or block for a changed one.

Labels can be copied, so adoption is narrow: only for a binding the store has no history
of, only what the backend lists as this instance's, created from this binding's repo and
path, and not recorded by another binding.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from nodus_gitops.config import Binding
from nodus_gitops.floor.identity import (
    ANNOTATION_SOURCE_COMMIT,
    ANNOTATION_SOURCE_FILE,
    ANNOTATION_SOURCE_REPO,
    ANNOTATION_SPEC_HASH,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    ResourceKey,
    owned_by,
)
from nodus_gitops.floor.phases import is_terminal
from nodus_gitops.providers.base import Observed, Provider
from nodus_gitops.state.records import InventoryRecord
from nodus_gitops.state.store import Store

log = logging.getLogger("nodus_gitops.adoption")

# What `apply.workload_for` adds to Git's manifest; removed again when adopting.
OWNERSHIP_LABELS = frozenset({LABEL_MANAGED_BY, LABEL_INSTANCE})
SOURCE_ANNOTATIONS = frozenset({ANNOTATION_SOURCE_REPO, ANNOTATION_SOURCE_COMMIT,
                                ANNOTATION_SOURCE_FILE, ANNOTATION_SPEC_HASH})


def adopt_owned(store: Store, provider: Provider, binding: Binding, instance: str, *,
                clock: Callable[[], datetime] = lambda: datetime.now(UTC),
                history: bool | None = None) -> list[ResourceKey]:
    """Record as `binding`'s inventory what `provider` holds of it, when the store has
    no history of the binding; returns the keys adopted, sorted (none otherwise).
    `history` is what the caller saw before it recorded anything itself (default: ask
    the store now).

    A backend that cannot be listed raises its ProviderError: a sync must not plan on
    top of a backend it could not read."""
    if history if history is not None else store.has_history(binding.id):
        return []
    # Keys other bindings recorded in the project stay theirs (one query, not one a key).
    taken = {r.key for r in store.list_inventory(project=binding.project)}
    records = []
    for observed in provider.list_owned(binding.project, instance):
        record = _record(observed, binding, instance, provider.name, clock)
        if record is not None and record.key not in taken:
            records.append(record)
    records.sort(key=lambda r: r.key)
    with store.batch():
        store.upsert_resources(records)
        store.add_events([(r.key, "Normal", "Adopted",
                           f"adopted from the {provider.name} backend (the state store had no "
                           f"record of it); created from {r.source_file} at "
                           f"{(r.source_commit or '?')[:12]}") for r in records])
    for r in records:
        log.info("adopted resource", extra={"binding": binding.id, "resource": str(r.key)})
    return [r.key for r in records]


def as_in_git(created: dict[str, Any]) -> dict[str, Any]:
    """The manifest Git had for a resource created as `created`: without the marks
    `workload_for` added, and without what a backend adds (a Nodus object's namespace,
    uid and status), since Git's metadata holds only a name, labels and annotations.
    The plan compares metadata too, so anything left over would show as a change."""
    meta = created.get("metadata") or {}
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in OWNERSHIP_LABELS}
    notes = {k: v for k, v in (meta.get("annotations") or {}).items()
             if k not in SOURCE_ANNOTATIONS}
    metadata: dict[str, Any] = {"name": meta.get("name")}
    if labels:
        metadata["labels"] = labels
    if notes:
        metadata["annotations"] = notes
    manifest = {k: created[k] for k in ("apiVersion", "kind") if k in created}
    return {**manifest, "metadata": metadata, "spec": created.get("spec") or {}}


def _record(observed: Observed, binding: Binding, instance: str, provider: str,
            clock: Callable[[], datetime]) -> InventoryRecord | None:
    """The inventory record of `observed`, or None when it is not this binding's."""
    created = observed.manifest
    if created is None or observed.key.project != binding.project \
            or not owned_by(created, instance):
        return None  # without the manifest as created there is nothing faithful to record
    notes = (created.get("metadata") or {}).get("annotations") or {}
    file, spec_hash = notes.get(ANNOTATION_SOURCE_FILE), notes.get(ANNOTATION_SPEC_HASH)
    if notes.get(ANNOTATION_SOURCE_REPO) != binding.url or not spec_hash \
            or not _under(file, binding.path):
        return None  # another binding's (or a stage or cell Job, which has no source)
    return InventoryRecord(
        key=observed.key, binding_id=binding.id, manifest=as_in_git(created),
        spec_hash=spec_hash, source_commit=notes.get(ANNOTATION_SOURCE_COMMIT),
        source_file=file, provider=provider, provider_id=observed.provider_id,
        phase=observed.phase, reason=observed.reason, message=observed.message,
        fix=observed.fix, status=observed.status, cost_usd=observed.cost_usd,
        finished_at=_finished_at(observed, clock) if is_terminal(observed.phase) else None)


def _under(file: str | None, path: str) -> bool:
    """Whether the repo-relative `file` lies in the binding's `path` (all when empty)."""
    prefix = "/".join(p for p in path.replace("\\", "/").split("/") if p not in ("", "."))
    return file is not None and (not prefix or file.startswith(prefix + "/"))


def _finished_at(observed: Observed, clock: Callable[[], datetime]) -> datetime:
    """When the run finished, as the backend says (budgets count a cost in the period it
    finished in); now, when it does not say."""
    try:
        done = datetime.fromisoformat(str(observed.status.get("completionTime")))
    except ValueError:
        return clock()
    return done if done.tzinfo else done.replace(tzinfo=UTC)
