"""Log tails for the dashboard, read through the local backend's read-only log interface
(`providers.local.logs`): the latest attempt of one index of one Job, its last lines."""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodus_gitops.floor.errors import NotFoundError
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.providers.jsonfiles import read_json
from nodus_gitops.providers.local.logs import attempts, iter_logs
from nodus_gitops.providers.local.rundir import RunDir
from nodus_gitops.state.records import InventoryRecord

if TYPE_CHECKING:
    from nodus_gitops.service import Service

MAX_TAIL = 2000
DEFAULT_TAIL = 200


def local_root(service: Service, record: InventoryRecord) -> Path | None:
    """Where the local backend keeps `record`'s Jobs; None when its backend is not local."""
    sync = service.syncs.get(record.binding_id)
    name = sync.binding.provider if sync is not None else (record.provider or "local")
    settings = service.settings.provider_settings(name)
    if settings.get("type", name) != "local":
        return None
    return Path(settings.get("root") or Path(service.settings.state_dir) / "local")


def child_jobs(record: InventoryRecord) -> list[str]:
    """The Jobs whose logs belong to `record`: itself, or its stages' or cells' Jobs."""
    if record.key.kind == "Job":
        return [record.key.name]
    entries = (record.status or {}).get("stages" if record.key.kind == "Pipeline" else "cells")
    return [str(e["job"]) for e in entries or [] if isinstance(e, dict) and e.get("job")]


def indexes(root: Path, key: ResourceKey) -> int:
    """How many indexes the Job runs (spec.completions), 1 when unknown."""
    try:
        doc = read_json(RunDir.for_key(root, key).manifest) or {}
    except ValueError:
        return 1
    completions = ((doc.get("manifest") or {}).get("spec") or {}).get("completions")
    return completions if isinstance(completions, int) and completions > 0 else 1


def tail(root: Path, key: ResourceKey, index: int, lines: int) -> dict[str, Any]:
    """The last `lines` lines of `index`'s latest attempt; NotFoundError when not run."""
    try:
        run = RunDir.for_key(root, key)
    except ValueError as exc:
        raise NotFoundError(str(exc)) from None
    if not run.exists():
        raise NotFoundError(f"{key.short} has not run on this machine")
    kept: deque[str] = deque(maxlen=max(1, min(lines, MAX_TAIL)))
    total = 0
    for line in iter_logs(root, key, index=index):
        kept.append(line)
        total += 1
    status = read_json(run.status) or {}
    found = attempts(run, index)
    return {"job": key.name, "index": index, "indexes": indexes(root, key),
            "attempt": found[-1] if found else None, "attempts": found,
            "phase": status.get("phase"), "lines": list(kept),
            "truncated": total > len(kept)}
