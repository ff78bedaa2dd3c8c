"""Log tails for the dashboard, read through the binding's backend's read-only log
interface (`providers.base.HasLogs`, on the local and slurm backends alike): the latest
attempt of one index of one Job, its last lines."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from nodus_gitops.floor.errors import NotFoundError
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.providers.base import HasLogs, Provider
from nodus_gitops.state.records import InventoryRecord
from nodus_gitops.web.redact import Masker

if TYPE_CHECKING:
    from nodus_gitops.service import Service

MAX_TAIL = 2000
DEFAULT_TAIL = 200


def provider_of(service: Service, record: InventoryRecord) -> Provider | None:
    """The backend that runs `record` (its binding's), None when its binding is not
    served here."""
    sync = service.syncs.get(record.binding_id)
    return sync.applier.provider if sync is not None else None


def log_reader(service: Service, record: InventoryRecord) -> HasLogs | str:
    """The backend that reads `record`'s logs, or why there is none (a sentence)."""
    provider = provider_of(service, record)
    if provider is None:
        return f"the binding {record.binding_id} is not served here, so neither is its backend"
    if not isinstance(provider, HasLogs):
        return (f"the {provider.name} backend keeps no logs the reconciler can read; read "
                "them with that platform's own tools")
    return provider


def child_jobs(record: InventoryRecord) -> list[str]:
    """The Jobs whose logs belong to `record`: itself, or its stages' or cells' Jobs."""
    if record.key.kind == "Job":
        return [record.key.name]
    entries = (record.status or {}).get("stages" if record.key.kind == "Pipeline" else "cells")
    return [str(e["job"]) for e in entries or [] if isinstance(e, dict) and e.get("job")]


def indexes(reader: HasLogs, key: ResourceKey) -> int:
    """How many indexes the Job runs (spec.completions), 1 when unknown."""
    try:
        return reader.log_info(key).indexes
    except NotFoundError:
        return 1


def tail(reader: HasLogs, key: ResourceKey, index: int, lines: int,
         secrets: Iterable[str] = ()) -> dict[str, Any]:
    """The last `lines` lines of `index`'s latest attempt, their secret parts (token
    shapes, the configured `secrets`) hidden; NotFoundError when not run."""
    info = reader.log_info(key, index)
    masker = Masker(secrets)
    kept: deque[str] = deque(maxlen=max(1, min(lines, MAX_TAIL)))
    total = 0
    for line in reader.logs(key, index=index):
        kept.append(line)
        total += 1
    return {"job": key.name, "index": index, "indexes": info.indexes,
            "attempt": info.attempts[-1] if info.attempts else None,
            "attempts": list(info.attempts), "phase": info.phase,
            "lines": [masker.text(line) for line in kept],
            "truncated": total > len(kept)}
