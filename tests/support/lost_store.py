"""A reconciler that loses its state store, for the adoption tests of every backend.

`LostStore` joins a manifests repo served over HTTP, a real state database (SQLite or
PostgreSQL) and one provider. `lose_store()` is the incident: the database is wiped (the
SQLite file deleted, the PostgreSQL schema dropped and made again) and a new reconciler
process starts over the same backend; `adopt()` is what that process does first.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote

from nodus_gitops.adoption import adopt_owned
from nodus_gitops.config import Binding, Settings
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.providers.base import Provider
from nodus_gitops.state.records import InventoryRecord
from nodus_gitops.state.store import Store
from nodus_gitops.sync import BindingSync, SyncReport
from nodus_gitops.wiring import build_sync
from sqlalchemy import create_engine, text

from tests.fixtures_git import ManifestRepo
from tests.fixtures_postgres import PG_URL

PROJECT = "team-a"
INSTANCE = "test"


def wipe_state(url: str) -> None:
    """Lose everything the state database holds."""
    if url.startswith("sqlite:///"):
        db = Path(url.removeprefix("sqlite:///"))
        for suffix in ("", "-wal", "-shm", "-journal"):
            db.with_name(db.name + suffix).unlink(missing_ok=True)
        return
    schema = unquote(url).split("search_path=", 1)[1]  # tests.fixtures_postgres's URL
    admin = create_engine(PG_URL)
    try:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    finally:
        admin.dispose()


class LostStore:
    """One binding (`manifests/` of `repo` into project team-a) reconciled by `provider`."""

    def __init__(self, repo: ManifestRepo, state_url: str, provider: Provider, tmp: Path, *,
                 binding_id: str = "team-a", url: str | None = None) -> None:
        self.repo = repo
        self.state_url = state_url
        self.provider = provider
        self.tmp = tmp
        self.binding = Binding(id=binding_id, url=url or repo.push_url, branch="main",
                               path="manifests", project=PROJECT)
        self.store = Store.open(state_url)
        self.starts = 0
        self.sync = self._start()

    def _start(self) -> BindingSync:
        """A new reconciler process: nothing remembered but what the store holds."""
        self.starts += 1
        return build_sync(Settings(state_dir=self.tmp / f"start-{self.starts}",
                                   instance=INSTANCE), self.store, self.binding, self.provider)

    def push(self, files: dict[str, str | None], message: str = "change") -> str:
        for path, body in files.items():
            if body is None:
                self.repo.remove(path)
            else:
                self.repo.write(path, body)
        sha = self.repo.commit(message)
        self.repo.push()
        return sha

    def push_no_manifest(self) -> str:
        """A commit that touches no manifest (a README beside the manifests folder)."""
        readme = self.repo.work / "README.md"
        text = readme.read_text() if readme.exists() else ""
        return self.push({"README.md": text + "one more line\n"}, "docs only")

    def reconcile(self) -> SyncReport:
        return self.sync.reconcile_once()

    def lose_store(self) -> None:
        self.store.close()
        wipe_state(self.state_url)
        self.store = Store.open(self.state_url)
        self.sync = self._start()

    def adopt(self) -> list[ResourceKey]:
        """What the new process does before its first sync (the hook in reconcile_once)."""
        return adopt_owned(self.store, self.provider, self.binding, INSTANCE)

    def inventory(self) -> dict[ResourceKey, InventoryRecord]:
        return {r.key: r for r in self.store.list_inventory(binding_id=self.binding.id)}

    def close(self) -> None:
        self.store.close()


def actions(report: SyncReport) -> dict[str, str]:
    """`name -> action` of the report's plan (no-op entries included)."""
    assert report.plan is not None, (report.result, report.message, report.problems)
    return {a.key.name: a.action.value for a in report.plan.actions}
