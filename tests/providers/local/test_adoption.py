"""Recovery from a lost state store on the local backend: real runs (bubblewrap
processes) created by a real sync, `state.db` deleted, a commit that touches no
manifest, then the new process adopts what the run records say this instance created."""

from __future__ import annotations

from pathlib import Path

import pytest
from nodus_gitops.floor.identity import (
    ANNOTATION_SOURCE_REPO,
    ANNOTATION_SPEC_HASH,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    MANAGED_BY_VALUE,
    ResourceKey,
)
from nodus_gitops.plan import spec_hash
from nodus_gitops.providers.base import Workload
from nodus_gitops.providers.local.provider import LocalProvider
from nodus_gitops.workloads import CompositeProvider

from tests.fixtures_git import ManifestRepo
from tests.providers.local.conftest import local_config
from tests.support.lost_store import INSTANCE, PROJECT, LostStore, actions
from tests.support.waiting import wait_for


def job(name: str, code: str, cap: str = "1.00") -> str:
    return (f"apiVersion: nodus.dev/v1\nkind: Job\nmetadata:\n  name: {name}\n"
            f"  labels:\n    team: vision\nspec:\n  command: [python3, -c, {code!r}]\n"
            f"  maxCostUSD: \"{cap}\"\n")


PIPELINE = ("apiVersion: nodus.dev/v1\nkind: Pipeline\nmetadata:\n  name: p\nspec:\n"
            "  stages:\n    - name: s\n      template:\n        command: [python3, -c, pass]\n")
SLEEP = "import time; time.sleep(60)"


def key(name: str, kind: str = "Job") -> ResourceKey:
    return ResourceKey(kind, PROJECT, name)


@pytest.fixture
def rig(manifest_repo: ManifestRepo, tmp_path: Path):
    state = tmp_path / "state"
    state.mkdir()
    local = LocalProvider(state / "local", local_config())
    r = LostStore(manifest_repo, f"sqlite:///{state / 'state.db'}",
                  CompositeProvider(local, state / "workloads"), tmp_path)
    yield r
    for k in (key("p", "Pipeline"), key("a"), key("b"), key("foreign")):
        r.provider.delete(k)  # ends every process a test left running
    r.close()


def test_lost_state_db_adopts_the_runs_and_a_changed_spec_is_planned(rig: LostStore) -> None:
    first = rig.push({"manifests/a.yaml": job("a", SLEEP), "manifests/b.yaml": job("b", "pass"),
                      "manifests/p.yaml": PIPELINE})
    assert rig.reconcile().result == "applied"
    for k in (key("b"), key("p", "Pipeline")):
        assert wait_for(rig.provider, k, "Succeeded", timeout=30)[1]
    before = {k: rig.provider.get(k) for k in rig.inventory()}
    # Another instance's run of a name this repo does not have: never taken, never deleted.
    marks = {LABEL_MANAGED_BY: MANAGED_BY_VALUE, LABEL_INSTANCE: "elsewhere"}
    spec = {"command": ["python3", "-c", "pass"]}
    rig.provider.create(Workload(key("foreign"), {
        "apiVersion": "nodus.dev/v1", "kind": "Job",
        "metadata": {"name": "foreign", "labels": marks,
                     "annotations": {ANNOTATION_SOURCE_REPO: rig.binding.url}},
        "spec": spec}, spec_hash({"spec": spec})), "foreign-1")

    rig.lose_store()
    head = rig.push_no_manifest()
    adopted = rig.adopt()
    report = rig.reconcile()

    assert adopted == [key("a"), key("b"), key("p", "Pipeline")]
    assert (report.result, report.commit, actions(report)) == ("noop", head, {})
    inventory = rig.inventory()
    owned = {o.key: o for o in rig.provider.list_owned(PROJECT, INSTANCE)}
    assert set(inventory) == set(owned) == set(before)  # no stage Job, nothing foreign
    for k, record in inventory.items():
        assert record.provider_id == before[k].provider_id  # the same run, not a second
        assert record.spec_hash == owned[k].annotations[ANNOTATION_SPEC_HASH]
        assert record.source_commit == first
        assert "nodus.dev/source-repo" not in record.manifest["metadata"].get(
            "annotations", {})
    assert rig.provider.get(key("p-s")) is not None  # the stage is the Pipeline's, kept
    assert rig.provider.get(key("foreign")) is not None
    assert rig.store.get_resource(key("foreign")) is None

    rig.push({"manifests/a.yaml": job("a", SLEEP, cap="2.00"),
              "manifests/b.yaml": job("b", "print(1)")})
    report = rig.reconcile()

    assert actions(report) == {"a": "patch", "b": "blocked"}
    assert report.result == "blocked"
    assert rig.inventory()[key("a")].manifest["spec"]["maxCostUSD"] == "2.00"
    live = {o.key: o for o in rig.provider.list_owned(PROJECT, INSTANCE)}
    assert live[key("a")].manifest["spec"]["maxCostUSD"] == "2.00"
    assert live[key("a")].provider_id == before[key("a")].provider_id
