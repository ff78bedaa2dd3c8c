"""Recovery from a lost state store on a real Slurm cluster (the issue's case): Jobs
submitted by a real sync, the state database lost (SQLite file deleted, PostgreSQL schema
made again), a commit that touches no manifest, then the new process adopts what the
job records on the shared filesystem say this instance created: no second submission,
and no create refused as 'created with another idempotency key'."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from nodus_gitops.floor.identity import (
    ANNOTATION_SOURCE_REPO,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    MANAGED_BY_VALUE,
    ResourceKey,
)
from nodus_gitops.floor.phases import Phase
from nodus_gitops.plan import spec_hash
from nodus_gitops.providers.base import Workload
from nodus_gitops.workloads import CompositeProvider

from tests.fixtures_git import ManifestRepo
from tests.support.lost_store import INSTANCE, PROJECT, LostStore, actions

pytestmark = pytest.mark.slurm

PY = json.dumps(sys.executable)


def job(name: str, code: str, cap: str = "1.00") -> str:
    return (f"apiVersion: nodus.dev/v1\nkind: Job\nmetadata:\n  name: {name}\n"
            f"  labels:\n    team: vision\nspec:\n  command: [{PY}, -c, {json.dumps(code)}]\n"
            f"  timeout: 5m\n  maxCostUSD: \"{cap}\"\n")


SLEEP = "import time; time.sleep(60)"


def key(name: str) -> ResourceKey:
    return ResourceKey("Job", PROJECT, name)


@pytest.fixture
def rig(slurm, manifest_repo: ManifestRepo, state_url: str, tmp_path: Path):
    slurm.keys.extend(key(n) for n in ("a", "b", "foreign"))  # cancelled at the end
    r = LostStore(manifest_repo, state_url,
                  CompositeProvider(slurm.provider, tmp_path / "workloads"), tmp_path)
    yield r
    r.close()


def test_lost_store_on_slurm_adopts_the_jobs_without_resubmitting(rig: LostStore,
                                                                  slurm) -> None:
    first = rig.push({"manifests/a.yaml": job("a", SLEEP), "manifests/b.yaml": job("b", "pass")})
    assert rig.reconcile().result == "applied"
    slurm.wait(key("a"), lambda o: o.phase == Phase.RUNNING)
    assert slurm.wait(key("b")).phase == Phase.SUCCEEDED
    jobs = {n: slurm.job_ids(key(n)) for n in ("a", "b")}
    # Another instance's Job of a name this repo does not have: never taken or cancelled.
    spec = {"command": [sys.executable, "-c", "pass"]}
    rig.provider.create(Workload(key("foreign"), {
        "apiVersion": "nodus.dev/v1", "kind": "Job",
        "metadata": {"name": "foreign", "labels": {LABEL_MANAGED_BY: MANAGED_BY_VALUE,
                                                    LABEL_INSTANCE: "elsewhere"},
                     "annotations": {ANNOTATION_SOURCE_REPO: rig.binding.url}},
        "spec": spec}, spec_hash({"spec": spec})), "foreign-1")

    rig.lose_store()
    head = rig.push_no_manifest()
    adopted = rig.adopt()
    report = rig.reconcile()

    assert adopted == [key("a"), key("b")]
    assert (report.result, report.commit, actions(report)) == ("noop", head, {}), (
        report.message)
    inventory = rig.inventory()
    assert set(inventory) == {o.key for o in slurm.provider.list_owned(PROJECT, INSTANCE)}
    assert {n: slurm.job_ids(key(n)) for n in ("a", "b")} == jobs  # nothing resubmitted
    assert inventory[key("a")].phase == Phase.RUNNING
    assert inventory[key("b")].phase == Phase.SUCCEEDED
    assert inventory[key("b")].finished_at is not None
    assert {r.source_commit for r in inventory.values()} == {first}
    assert slurm.provider.get(key("foreign")) is not None
    assert rig.store.get_resource(key("foreign")) is None

    rig.push({"manifests/a.yaml": job("a", SLEEP, cap="2.00"),
              "manifests/b.yaml": job("b", "print(1)")})
    report = rig.reconcile()

    assert actions(report) == {"a": "patch", "b": "blocked"}, report.message
    assert report.result == "blocked"
    assert slurm.job_ids(key("a")) == jobs["a"]  # patched in place
    live = {o.key: o for o in slurm.provider.list_owned(PROJECT, INSTANCE)}
    assert live[key("a")].manifest["spec"]["maxCostUSD"] == "2.00"
