"""A reconciler serving one binding as `serve` does, for tests of what happens with nobody
looking: a manifests repository, the state store, and a service over one backend whose
status refresh ticks in the background every STATUS_REFRESH_SECONDS, as `serve`'s
scheduler runs it. The test itself reads the store and the files, never the backend."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nodus_gitops.backends import build_backend
from nodus_gitops.config import Binding, Settings
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.service import STATUS_REFRESH_SECONDS
from nodus_gitops.state import InventoryRecord
from nodus_gitops.state.store import Store
from nodus_gitops.sync import SyncReport
from nodus_gitops.wiring import build_service

from tests.fixtures_git import ManifestRepo

BINDING = "w"


class Served:
    def __init__(self, repo: ManifestRepo, state: Path, backend: str,
                 backend_settings: dict[str, Any], project: str, **service_fields: Any
                 ) -> None:
        self.repo = repo
        self.project = project
        self.store = Store.open(None, state)
        binding = Binding(id=BINDING, url=repo.push_url, project=project, provider=backend)
        self.service = build_service(
            Settings(state_dir=state, bindings=(binding,)), self.store,
            provider_factory=lambda name: build_backend(name, backend_settings, state),
            **service_fields)
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def push(self, files: dict[str, str]) -> SyncReport:
        for path, text in files.items():
            self.repo.write(path, text)
        self.repo.commit("change")
        self.repo.push()
        return self.sync()

    def sync(self) -> SyncReport:
        """One sync of the whole tree, as a poll after a restart makes it."""
        report = self.service.reconcile(BINDING, force=True)
        assert report is not None and report.result in ("applied", "noop"), (
            report and (report.result, report.message, report.problems))
        return report

    def start_ticking(self) -> None:
        def tick() -> None:
            while not self._stop.wait(STATUS_REFRESH_SECONDS):
                self.service.refresh_all()

        self._ticker = threading.Thread(target=tick, daemon=True, name="status-refresh")
        self._ticker.start()

    def stop(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=60)
        self.service.close()

    def record(self, kind: str, name: str) -> InventoryRecord | None:
        return self.store.get_resource(ResourceKey(kind, self.project, name))

    def wait_record(self, kind: str, name: str, until: Callable[[InventoryRecord], bool],
                    timeout: float = 90) -> InventoryRecord:
        deadline = time.monotonic() + timeout
        while True:
            record = self.record(kind, name)
            if record is not None and until(record):
                return record
            if time.monotonic() > deadline:
                raise AssertionError(f"{kind}/{name} stuck: {record and record.phase} "
                                     f"{record and json.dumps(record.status)[:400]}")
            time.sleep(0.2)


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting: {what}")
        time.sleep(0.1)
