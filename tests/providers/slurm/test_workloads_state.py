"""The controllers' run-time rules on Slurm (the same code as on local): a cancel reaches
every unfinished cell, those never submitted included, and a Sweep template's metadata
reaches its cell Jobs."""

from __future__ import annotations

import copy
import sys
import time

import pytest
from nodus_gitops.floor.identity import (
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    LABEL_SWEEP,
    MANAGED_BY_VALUE,
    ResourceKey,
)
from nodus_gitops.floor.phases import is_terminal
from nodus_gitops.providers.base import Workload
from nodus_gitops.workloads import CompositeProvider

pytestmark = pytest.mark.slurm

LABELS = {LABEL_MANAGED_BY: MANAGED_BY_VALUE, LABEL_INSTANCE: "test"}


def _sweep(name: str, code: str, n: int, **spec) -> dict:
    return {"apiVersion": "nodus.dev/v1", "kind": "Sweep",
            "metadata": {"name": name, "labels": LABELS},
            "spec": {"matrix": {"params": {"N": [str(i) for i in range(n)]}},
                     "template": {"kind": "Job", "spec": {
                         "command": [sys.executable, "-c", code], "timeout": "5m"}}, **spec}}


def _wait(composite, key, until, timeout=90.0):
    deadline = time.monotonic() + timeout
    o = None
    while time.monotonic() < deadline:
        o = composite.get(key)
        if o is not None and until(o):
            return o
        time.sleep(0.3)
    raise AssertionError(f"timed out on {key}: {o}")


def test_cancel_reaches_cells_never_submitted(slurm, tmp_path) -> None:
    composite = CompositeProvider(slurm.provider, tmp_path / "workloads")
    key = ResourceKey("Sweep", "team-a", "quit")
    manifest = _sweep("quit", "import time; time.sleep(120)", 4, maxParallel=2)
    for i in range(4):
        slurm.keys.append(ResourceKey("Job", "team-a", f"quit-{i}"))
    composite.create(Workload(key, manifest, "h"), "quit-1")
    _wait(composite, key, lambda o: [c["phase"] for c in o.status["cells"]][:2]
          == ["Running"] * 2)
    cancelled = copy.deepcopy(manifest)
    cancelled["spec"]["state"] = "Cancelled"
    composite.patch(Workload(key, cancelled, "h2"), {"spec": {"state": "Cancelled"}})
    done = _wait(composite, key, lambda o: is_terminal(o.phase))
    assert done.phase == "Cancelled", done
    assert [c["phase"] for c in done.status["cells"]] == ["Cancelled"] * 4
    assert [c["created"] for c in done.status["cells"]] == [True, True, False, False]
    assert slurm.provider.get(ResourceKey("Job", "team-a", "quit-2")) is None  # never submitted


def test_template_metadata_reaches_the_cell_jobs(slurm, tmp_path) -> None:
    composite = CompositeProvider(slurm.provider, tmp_path / "workloads")
    key = ResourceKey("Sweep", "team-a", "tagged")
    manifest = _sweep("tagged", "pass", 1)
    manifest["spec"]["template"]["metadata"] = {
        "labels": {"team": "vision", LABEL_SWEEP: "forged"},
        "annotations": {"example.com/owner": "ada"}}
    slurm.keys.append(ResourceKey("Job", "team-a", "tagged-0"))
    composite.create(Workload(key, manifest, "h"), "tagged-1")
    done = _wait(composite, key, lambda o: is_terminal(o.phase))
    assert done.phase == "Succeeded", done
    cell = slurm.provider.get(ResourceKey("Job", "team-a", "tagged-0"))
    assert cell.labels["team"] == "vision" and cell.labels[LABEL_SWEEP] == "tagged"
    assert cell.annotations["example.com/owner"] == "ada"
