"""PostgreSQL restarted in the middle of a sync: the sync fails cleanly, nothing is
lost, and the next one finishes the work exactly once."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest
import sqlalchemy
from nodus_gitops.config import Binding, Settings
from nodus_gitops.providers.base import FakeProvider
from nodus_gitops.state.store import Store
from nodus_gitops.wiring import build_service

from tests.fixtures_git import ManifestRepo

JOB = ("apiVersion: nodus.dev/v1\nkind: Job\nmetadata:\n  name: {name}\nspec:\n"
       "  command: [python3, -c, pass]\n")


def restart_postgres() -> None:
    subprocess.run(["pg_ctlcluster", "15", "main", "restart"], check=True, timeout=120,
                   capture_output=True)


def wait_for(url: str) -> None:
    engine = sqlalchemy.create_engine(url)
    deadline = time.monotonic() + 60
    while True:
        try:
            with engine.connect() as conn:
                conn.execute(sqlalchemy.text("SELECT 1"))
            break
        except sqlalchemy.exc.OperationalError:
            assert time.monotonic() < deadline, "PostgreSQL did not come back"
            time.sleep(0.5)
    engine.dispose()


@pytest.mark.postgres_restart  # no other test may use the server meanwhile
@pytest.mark.skipif(shutil.which("pg_ctlcluster") is None,
                    reason="pg_ctlcluster is missing: PostgreSQL cannot be restarted here")
def test_postgres_restart_during_a_sync(manifest_repo: ManifestRepo, pg_state_url: str,
                                        tmp_path: Path) -> None:
    restarted = []

    def handler(op, key, arg):
        if op == "create" and not restarted:
            restarted.append(key)
            restart_postgres()  # the store goes away between this call and its record
        return None

    provider = FakeProvider(handler)
    store = Store.open(pg_state_url)
    binding = Binding(id="pg", url=manifest_repo.push_url, project="p")
    service = build_service(Settings(state_dir=tmp_path / "s", bindings=(binding,)), store,
                      provider_factory=lambda _n: provider)
    service.follow_up = False
    for name in "abc":
        manifest_repo.write(f"{name}.yaml", JOB.format(name=name))
    head = manifest_repo.commit("three")
    manifest_repo.push()

    # The store goes away under the sync: a broken connection is replaced (pre-ping) or
    # the sync fails and its intents wait; either way the service goes on.
    first = service.reconcile("pg")
    wait_for(pg_state_url)
    if first is None or first.result != "applied":
        second = service.reconcile("pg")
        assert second is not None and second.result in ("applied", "noop"), second
    # Each Job created once; the inventory agrees with the backend; the commit applied.
    creates = [k.name for op, k in provider.calls if op == "create"]
    assert sorted(set(creates)) == ["a", "b", "c"] and len(creates) == len(set(creates))
    assert {r.key.name for r in store.list_inventory()} == {"a", "b", "c"}
    assert store.pending_intents() == []
    assert store.get_binding("pg").last_applied_commit == head
