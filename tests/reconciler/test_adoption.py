"""Recovery from a lost state store, with the in-memory provider: real pushes over HTTP,
the real store (SQLite and PostgreSQL), and `adopt_owned` before the first sync of the
new process. What the backend holds with this instance's marks comes back into the
inventory; nothing is created twice, and nothing of another owner is taken."""

from __future__ import annotations

from pathlib import Path

import pytest
from nodus_gitops.adoption import adopt_owned
from nodus_gitops.floor.identity import (
    ANNOTATION_SOURCE_COMMIT,
    ANNOTATION_SOURCE_FILE,
    ANNOTATION_SOURCE_REPO,
    ANNOTATION_SPEC_HASH,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    MANAGED_BY_VALUE,
    ResourceKey,
)
from nodus_gitops.plan import spec_hash
from nodus_gitops.providers.base import FakeProvider, Observed, Workload
from nodus_gitops.state.records import InventoryRecord

from tests.fixtures_git import ManifestRepo
from tests.support.lost_store import INSTANCE, PROJECT, LostStore, actions


def job(name: str, cap: str = "1.00", command: str = "pass") -> str:
    return (f"apiVersion: nodus.dev/v1\nkind: Job\nmetadata:\n  name: {name}\n"
            "  labels:\n    team: vision\n  annotations:\n    nodus.dev/on-change: Replace\n"
            f"spec:\n  image: python:3.12-slim\n  command: [python3, -c, {command}]\n"
            f"  maxCostUSD: \"{cap}\"\n")


def key(name: str, kind: str = "Job") -> ResourceKey:
    return ResourceKey(kind, PROJECT, name)


def foreign(name: str, *, instance: str, repo: str) -> Workload:
    """A Job as another owner created it: its marks say `instance` and `repo`."""
    spec = {"command": ["python3", "-c", "pass"]}
    manifest = {"apiVersion": "nodus.dev/v1", "kind": "Job", "metadata": {
        "name": name, "labels": {LABEL_MANAGED_BY: MANAGED_BY_VALUE, LABEL_INSTANCE: instance},
        "annotations": {ANNOTATION_SOURCE_REPO: repo, ANNOTATION_SOURCE_COMMIT: "c0ffee",
                        ANNOTATION_SOURCE_FILE: f"manifests/{name}.yaml",
                        ANNOTATION_SPEC_HASH: spec_hash({"spec": spec})}}, "spec": spec}
    return Workload(key(name), manifest, spec_hash({"spec": spec}))


@pytest.fixture
def rig(manifest_repo: ManifestRepo, state_url: str, tmp_path: Path):
    r = LostStore(manifest_repo, state_url, FakeProvider(), tmp_path)
    yield r
    r.close()


def test_the_first_sync_of_a_new_process_adopts_by_itself(rig: LostStore) -> None:
    """What the service does: no explicit adoption, just the first sync after the loss."""
    rig.push({"manifests/a.yaml": job("a")})
    assert rig.reconcile().result == "applied"
    rig.lose_store()
    rig.push_no_manifest()
    rig.provider.calls.clear()
    report = rig.reconcile()
    assert report.result == "noop", report.message
    assert not [c for c in rig.provider.calls if c[0] != "get"]
    assert set(rig.inventory()) == {key("a")}
    assert [e.reason for e in rig.store.list_events(key("a"))] == ["Adopted"]


def test_lost_store_adopts_and_the_next_sync_is_a_noop(rig: LostStore) -> None:
    first = rig.push({"manifests/a.yaml": job("a"), "manifests/b.yaml": job("b")})
    assert rig.reconcile().result == "applied"
    before = rig.inventory()
    rig.lose_store()
    head = rig.push_no_manifest()
    rig.provider.calls.clear()

    assert rig.adopt() == [key("a"), key("b")]
    report = rig.reconcile()

    assert (report.result, report.commit) == ("noop", head)
    assert not [c for c in rig.provider.calls if c[0] != "get"]  # no create, patch, delete
    inventory = rig.inventory()
    assert set(inventory) == set(rig.provider.resources) == {key("a"), key("b")}
    for k, record in inventory.items():
        # The recorded manifest is Git's, not the one carrying the ownership marks.
        assert record.manifest == before[k].manifest
        assert "nodus.dev/instance" not in record.manifest["metadata"]["labels"]
        assert record.manifest["metadata"]["labels"] == {"team": "vision"}
        assert (record.spec_hash, record.source_file, record.source_commit) == (
            before[k].spec_hash, f"manifests/{k.name}.yaml", first)
        assert (record.provider, record.provider_id, record.phase) == (
            "fake", before[k].provider_id, "Running")
        assert [e.reason for e in rig.store.list_events(k)] == ["Adopted"]
    assert rig.store.get_binding("team-a").last_applied_commit == head


def test_changes_in_git_after_the_loss_get_the_usual_plan(rig: LostStore) -> None:
    rig.push({"manifests/a.yaml": job("a"), "manifests/b.yaml": job("b"),
              "manifests/c.yaml": job("c")})
    assert rig.reconcile().result == "applied"
    rig.lose_store()
    rig.push({"manifests/a.yaml": job("a", cap="2.00"),  # in place
              "manifests/b.yaml": job("b", command="exit"),  # Replace (its annotation)
              "manifests/c.yaml": None})  # removed from Git
    assert len(rig.adopt()) == 3
    rig.provider.calls.clear()

    report = rig.reconcile()

    assert actions(report) == {"a": "patch", "b": "replace", "c": "delete"}
    assert report.result == "applied"
    assert [op for op, _ in rig.provider.calls if op != "get"] == [
        "delete", "create", "patch", "delete"]
    assert set(rig.provider.resources) == set(rig.inventory()) == {key("a"), key("b")}
    assert rig.provider.manifests[key("a")]["spec"]["maxCostUSD"] == "2.00"


def test_what_another_owner_holds_is_never_adopted_nor_deleted(rig: LostStore) -> None:
    rig.push({"manifests/a.yaml": job("a")})
    assert rig.reconcile().result == "applied"
    fake = rig.provider
    # Another instance, with this very repo; this instance, but another binding's repo.
    fake.create(foreign("other-instance", instance="elsewhere", repo=rig.binding.url), "x")
    fake.create(foreign("other-repo", instance=INSTANCE, repo="https://git.test/b.git"), "y")
    # This instance and repo, but already recorded by another binding of the store.
    taken = foreign("taken", instance=INSTANCE, repo=rig.binding.url)
    fake.create(taken, "z")
    rig.lose_store()
    rig.store.upsert_binding("other", "https://git.test/o.git", "main", "", PROJECT)
    rig.store.upsert_resource(InventoryRecord(key("taken"), "other", taken.manifest,
                                              taken.spec_hash))
    rig.push_no_manifest()

    assert rig.adopt() == [key("a")]
    report = rig.reconcile()

    assert report.result == "noop" and not report.plan.actions
    assert set(fake.resources) == {key(n) for n in ("a", "other-instance", "other-repo",
                                                    "taken")}
    assert rig.store.get_resource(key("taken")).binding_id == "other"
    assert rig.store.get_resource(key("other-instance")) is None


def test_only_a_binding_with_no_history_adopts(rig: LostStore) -> None:
    rig.push({"manifests/a.yaml": job("a")})
    assert rig.reconcile().result == "applied"
    assert rig.adopt() == []  # the inventory and the syncs are there: nothing to recover
    rig.store.remove_resource(key("a"))
    assert rig.adopt() == []  # a sync was recorded: an empty inventory is the truth
    assert rig.store.get_resource(key("a")) is None


def test_list_owned_returns_the_manifest_as_created_and_only_this_instance(
        rig: LostStore) -> None:
    fake = rig.provider
    ours = foreign("ours", instance=INSTANCE, repo=rig.binding.url)
    fake.create(ours, "1")
    fake.create(foreign("theirs", instance="elsewhere", repo=rig.binding.url), "2")
    fake.create(Workload(ResourceKey("Job", "team-b", "ours"), ours.manifest, "h"), "3")

    owned = fake.list_owned(PROJECT, INSTANCE)

    assert [o.key for o in owned] == [key("ours")]
    assert owned[0].manifest == ours.manifest
    assert owned[0].annotations[ANNOTATION_SPEC_HASH] == ours.spec_hash


def test_a_listing_without_manifests_adopts_nothing(rig: LostStore) -> None:
    """A backend that cannot say what it created is not trusted with the inventory."""
    w = foreign("bare", instance=INSTANCE, repo=rig.binding.url)
    meta = w.manifest["metadata"]
    fake = FakeProvider(lambda op, k, arg: Observed(
        k, "p-1", "Running", labels=meta["labels"], annotations=meta["annotations"])
        if op == "create" else None)
    fake.create(w, "1")
    fake.manifests.clear()
    assert adopt_owned(rig.store, fake, rig.binding, INSTANCE) == []
