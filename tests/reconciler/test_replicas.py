"""Several replicas on one PostgreSQL store: each binding reconciled by exactly one,
bindings spread, a dead replica's bindings taken over within one lease period."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from nodus_gitops.config import Binding, Settings
from nodus_gitops.leases import LeaseKeeper
from nodus_gitops.providers.base import FakeProvider
from nodus_gitops.state.store import Store
from nodus_gitops.wiring import build_service

from tests.fixtures_git import ManifestRepo

TTL = 1.5
JOB = ("apiVersion: nodus.dev/v1\nkind: Job\nmetadata:\n  name: {name}\nspec:\n"
       "  command: [python3, -c, pass]\n")


@pytest.fixture
def repo(manifest_repo: ManifestRepo) -> ManifestRepo:
    for team in "abcd":
        manifest_repo.write(f"{team}/job.yaml", JOB.format(name=f"job-{team}"))
    manifest_repo.commit("four teams")
    manifest_repo.push()
    return manifest_repo


def replica(name: str, repo: ManifestRepo, url: str, tmp: Path, provider: FakeProvider,
            **fields: object):
    bindings = tuple(Binding(id=f"team-{t}", url=repo.push_url, path=t, project=t, **fields)
                     for t in "abcd")
    store = Store.open(url)
    settings = Settings(state_dir=tmp / name, instance="shared", bindings=bindings)
    service = build_service(settings, store, provider_factory=lambda _n: provider)
    service.leases = LeaseKeeper(store, service.syncs, replica=name, ttl=TTL)
    return service


def test_bindings_spread_and_a_dead_replica_is_taken_over(repo, pg_state_url, tmp_path):
    backend = FakeProvider()  # one backend both replicas drive
    a = replica("replica-a", repo, pg_state_url, tmp_path, backend)
    b = replica("replica-b", repo, pg_state_url, tmp_path, backend)
    a.keep_leases()
    assert len(a.leases.held) == 4  # alone: all of them
    b.keep_leases()  # b is alive now; a gives back its surplus on its next tick
    a.keep_leases()
    b.keep_leases()
    assert len(a.leases.held) == 2 and len(b.leases.held) == 2
    assert not set(a.leases.held) & set(b.leases.held)

    # Each replica reconciles only its own bindings; together, each binding once.
    synced_a = [r.binding for r in a.reconcile_all()]
    synced_b = [r.binding for r in b.reconcile_all()]
    assert sorted(synced_a + synced_b) == ["team-a", "team-b", "team-c", "team-d"]
    assert sorted(k.name for k in backend.resources) == ["job-a", "job-b", "job-c", "job-d"]

    # a dies (no more renewals); within one lease period b holds everything.
    deadline = time.monotonic() + TTL * 3
    while len(b.leases.held) < 4:
        assert time.monotonic() < deadline, b.leases.held
        time.sleep(TTL / 3)
        b.keep_leases()
    assert not any(a.leases.holds(x) for x in a.syncs)  # a's own view: expired
    assert a.reconcile("team-a") is None  # a zombie a applies nothing
    # b carries on: a new commit for a's former binding is applied by b, once.
    repo.write("a/more.yaml", JOB.format(name="job-a2"))
    repo.commit("more")
    repo.push()
    reports = {r.binding: r for r in b.reconcile_all()}
    assert reports["team-a"].result == "applied"
    creates = [k.name for op, k in backend.calls if op == "create"]
    assert sorted(creates) == ["job-a", "job-a2", "job-b", "job-c", "job-d"]


def test_a_binding_taken_over_is_polled_at_once_not_at_its_next_interval(
        repo, pg_state_url, tmp_path):
    # a takes every lease and dies before syncing any; b, serving with a 10-minute
    # interval, takes them over once they expire. Each must be synced then, not when
    # its next poll comes round (up to an interval later: a push to a dead replica's
    # binding waited for it).
    backend = FakeProvider()
    a = replica("replica-a", repo, pg_state_url, tmp_path, backend, interval=600)
    a.keep_leases()
    assert len(a.leases.held) == 4
    b = replica("replica-b", repo, pg_state_url, tmp_path, backend, interval=600)
    b.follow_up = False
    took_over = threading.Event()

    def stop_when_all_created() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(backend.resources) < 4:
            if len(b.leases.held) == 4:
                took_over.set()
            time.sleep(0.05)
        b.stopping.set()

    threading.Thread(target=stop_when_all_created, daemon=True).start()
    b.run()
    assert took_over.is_set(), "b never took a's leases over"
    assert sorted(k.name for k in backend.resources) == ["job-a", "job-b", "job-c", "job-d"]


def test_clean_stop_gives_leases_back_at_once(repo, pg_state_url, tmp_path):
    backend = FakeProvider()
    a = replica("replica-a", repo, pg_state_url, tmp_path, backend)
    b = replica("replica-b", repo, pg_state_url, tmp_path, backend)
    a.keep_leases()
    a.leases.release_all()
    b.keep_leases()
    assert len(b.leases.held) == 4


def test_lease_is_exclusive_and_fenced(pg_state_url):
    from datetime import timedelta

    store = Store.open(pg_state_url)
    store.upsert_binding("x", "u", "main", "", "p")
    ttl = timedelta(seconds=TTL)
    assert store.acquire_lease("x", "one", ttl) == 1
    assert store.acquire_lease("x", "two", ttl) is None
    assert store.acquire_lease("x", "one", ttl) == 1  # renewal keeps the token
    time.sleep(TTL + 0.2)
    assert store.acquire_lease("x", "two", ttl) == 2  # taken over: a new token
    assert store.acquire_lease("x", "one", ttl) is None


def test_one_off_reconcile_refuses_a_binding_a_replica_holds(repo, pg_state_url, tmp_path,
                                                            capsys):
    from datetime import timedelta

    from nodus_gitops.cli import main
    from nodus_gitops.config import binding_from_flags

    binding = binding_from_flags(repo.push_url, "main", "a", "a", None, None)
    store = Store.open(pg_state_url)
    assert store.acquire_lease(binding.id, "serve-1", timedelta(seconds=60)) == 1
    args = ["reconcile", "--once", "--repo", repo.push_url, "--path", "a", "--project", "a",
            "--state", pg_state_url, "--state-dir", str(tmp_path / "s")]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "already being reconciled" in err and "serve-1" in err
    store.release_lease(binding.id, "serve-1")
    assert main(args) == 0


def test_a_binding_syncing_now_is_not_given_back(repo, pg_state_url, tmp_path):
    backend = FakeProvider()
    a = replica("replica-a", repo, pg_state_url, tmp_path, backend)
    b = replica("replica-b", repo, pg_state_url, tmp_path, backend)
    a.keep_leases()
    b.keep_leases()
    for lock in a.locks.values():
        lock.acquire()  # every binding of a is syncing
    a.keep_leases()
    assert len(a.leases.held) == 4  # nothing given back mid-sync
    for lock in a.locks.values():
        lock.release()
    a.keep_leases()
    assert len(a.leases.held) == 2  # the surplus goes once the syncs are done
