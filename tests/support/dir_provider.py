"""A provider that keeps its resources as JSON files, so that several processes (and a
process killed with SIGKILL) see one backend. For the crash tests only.

Every real creation appends a line to `created.log`, so a duplicate is visible.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from nodus_gitops.floor.errors import NotFoundError, PermanentError
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.providers.base import Observed, Workload


class DirProvider:
    name = "dir"
    native_kinds = frozenset({"Job", "Pipeline", "Sweep"})

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def close(self) -> None:
        pass  # nothing held open: every call reads and writes the folder

    def _path(self, key: ResourceKey) -> Path:
        return self.root / f"{key.kind}.{key.project}.{key.name}.json"

    def _write(self, key: ResourceKey, data: dict[str, Any]) -> None:
        tmp = self._path(key).with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self._path(key))

    def _observed(self, key: ResourceKey, data: dict[str, Any]) -> Observed:
        return Observed(key, data["id"], data.get("phase", "Running"))

    def create(self, workload: Workload, idempotency_key: str) -> Observed:
        path = self._path(workload.key)
        if path.exists():
            data = json.loads(path.read_text())
            if data["idempotencyKey"] != idempotency_key:
                raise PermanentError(f"{workload.key.short} already exists")
            return self._observed(workload.key, data)
        data = {"id": f"dir-{workload.key.name}", "idempotencyKey": idempotency_key,
                "manifest": workload.manifest}
        self._write(workload.key, data)
        with open(self.root / "created.log", "a") as log:
            log.write(f"{workload.key}\n")
        return self._observed(workload.key, data)

    def patch(self, workload: Workload, changes: dict[str, Any]) -> Observed:
        path = self._path(workload.key)
        if not path.exists():
            raise NotFoundError(f"{workload.key.short} does not exist")
        data = json.loads(path.read_text())
        data["manifest"] = workload.manifest
        self._write(workload.key, data)
        return self._observed(workload.key, data)

    def delete(self, key: ResourceKey) -> None:
        self._path(key).unlink(missing_ok=True)

    def get(self, key: ResourceKey) -> Observed | None:
        path = self._path(key)
        if not path.exists():
            return None
        return self._observed(key, json.loads(path.read_text()))

    def list_owned(self, project: str, instance: str) -> list[Observed]:
        out = []
        for path in sorted(self.root.glob("*.json")):
            kind, proj, name = path.stem.split(".", 2)
            if proj == project:
                out.append(self._observed(ResourceKey(kind, proj, name),
                                          json.loads(path.read_text())))
        return out

    def manifests(self) -> dict[str, dict[str, Any]]:
        return {p.stem.split(".", 2)[2]: json.loads(p.read_text())["manifest"]
                for p in sorted(self.root.glob("*.json"))}

    def creations(self) -> list[str]:
        log = self.root / "created.log"
        return log.read_text().split() if log.exists() else []
