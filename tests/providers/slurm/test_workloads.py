"""Pipelines and Sweeps on Slurm through the reconciler's controllers
(`CompositeProvider(SlurmProvider(...), state_dir)`): stages hand outputs to inputs on the
shared filesystem, and a Sweep over the cluster's two GPU types reports cost and the
best cells."""

from __future__ import annotations

import sys
from decimal import Decimal

import pytest
from nodus_gitops.floor.identity import (
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    MANAGED_BY_VALUE,
    ResourceKey,
)
from nodus_gitops.floor.phases import Phase
from nodus_gitops.providers.base import Workload
from nodus_gitops.workloads import CompositeProvider

pytestmark = pytest.mark.slurm

PY = sys.executable
LABELS = {LABEL_MANAGED_BY: MANAGED_BY_VALUE, LABEL_INSTANCE: "test"}

PREPARE = """
import os
d = os.path.join(os.environ["NODUS_OUTPUTS_DIR"], "shards")
os.makedirs(d, exist_ok=True)
open(os.path.join(d, "data.txt"), "w").write("3 4 5")
"""
TRAIN = """
import os
nums = open(os.path.join(os.environ["NODUS_INPUT_DATA"], "data.txt")).read().split()
d = os.path.join(os.environ["NODUS_OUTPUTS_DIR"], "model")
os.makedirs(d, exist_ok=True)
open(os.path.join(d, "model.txt"), "w").write(str(sum(map(int, nums))))
assert os.environ.get("CUDA_VISIBLE_DEVICES")
"""
EVAL = """
import os
print("model", open(os.path.join(os.environ["NODUS_INPUT_MODEL"], "model.txt")).read())
"""
CELL = """
import os, time
import nodus
bs = int(os.environ["NODUS_PARAM_BATCH"])
assert os.environ.get("CUDA_VISIBLE_DEVICES")
for _ in range(bs * 8):  # the same 1.2 s whatever the batch: a batch of 4 is 4x as fast
    time.sleep(1.2 / (bs * 8))
    nodus.log.unit("batch", 1200 / (bs * 8))
"""


def _wait(composite, key, timeout=90.0):
    import time

    deadline = time.monotonic() + timeout
    o = None
    while time.monotonic() < deadline:
        o = composite.get(key)
        if o is not None and o.phase in (Phase.SUCCEEDED, Phase.FAILED, Phase.CANCELLED):
            return o
        time.sleep(0.3)
    raise AssertionError(f"timed out on {key}: {o}")


def test_pipeline_stages_pass_outputs_as_inputs(slurm, tmp_path):
    composite = CompositeProvider(slurm.provider, tmp_path / "workloads")
    key = ResourceKey("Pipeline", "team-a", "train-eval")
    spec = {
        "maxCostUSD": "1.00",
        "defaults": {"timeout": "5m"},
        "stages": [
            {"name": "prepare", "template": {
                "command": [PY, "-c", PREPARE],
                "outputs": [{"name": "shards", "path": "/nodus/outputs/shards"}]}},
            {"name": "train", "dependsOn": ["prepare"],
             "inputs": [{"name": "data", "fromStage": "prepare", "output": "shards"}],
             "template": {"resources": {"gpu": "L4"}, "command": [PY, "-c", TRAIN],
                          "outputs": [{"name": "model", "path": "/nodus/outputs/model"}]}},
            {"name": "eval", "dependsOn": ["train"],
             "inputs": [{"name": "model", "fromStage": "train", "output": "model"}],
             "template": {"command": [PY, "-c", EVAL]}},
        ],
    }
    manifest = {"apiVersion": "nodus.dev/v1", "kind": "Pipeline",
                "metadata": {"name": key.name, "labels": LABELS}, "spec": spec}
    for stage in ("prepare", "train", "eval"):
        slurm.keys.append(ResourceKey("Job", "team-a", f"train-eval-{stage}"))
    o = composite.create(Workload(key, manifest, "h"), "pipe-1")
    assert o.phase in (Phase.QUEUED, Phase.RUNNING)
    o = _wait(composite, key)
    assert o.phase == Phase.SUCCEEDED, o
    assert [s["phase"] for s in o.status["stages"]] == ["Succeeded"] * 3
    assert o.status["progress"] == "3/3"
    model = slurm.provider.output_location(ResourceKey("Job", "team-a", "train-eval-train"),
                                           "model")
    assert (model / "model.txt").read_text() == "12"
    eval_log = list(slurm.provider.logs(ResourceKey("Job", "team-a", "train-eval-eval")))
    assert eval_log == ["model 12"]


def test_sweep_over_two_gpu_types_reports_cells_cost_and_best(slurm_factory, tmp_path):
    # A10 ten times the price of L4: whole-second run times cannot reverse the order
    slurm = slurm_factory(rates={"gpuHour": {"L4": 1.0, "A10": 10.0}})
    composite = CompositeProvider(slurm.provider, tmp_path / "workloads")
    key = ResourceKey("Sweep", "team-a", "bs")
    spec = {
        "maxParallel": 4,
        "matrix": {"gpu": ["L4", "A10"], "params": {"BATCH": ["1", "4"]}},
        "template": {"kind": "Job", "spec": {"command": [PY, "-c", CELL], "timeout": "5m"}},
    }
    manifest = {"apiVersion": "nodus.dev/v1", "kind": "Sweep",
                "metadata": {"name": key.name, "labels": LABELS}, "spec": spec}
    for i in range(4):
        slurm.keys.append(ResourceKey("Job", "team-a", f"bs-{i}"))
    composite.create(Workload(key, manifest, "h"), "sweep-1")
    o = _wait(composite, key)
    assert o.phase == Phase.SUCCEEDED, o
    cells = o.status["cells"]
    assert [(c["gpu"], c["params"]["BATCH"]) for c in cells] == [
        ("L4", "1"), ("L4", "4"), ("A10", "1"), ("A10", "4")]
    assert all(c["phase"] == Phase.SUCCEEDED for c in cells)
    assert all(Decimal(c["costUSD"]) > 0 and c["wallSeconds"] > 0 for c in cells)
    assert all(c["unitsPerSecond"] for c in cells)
    # L4 is the cheaper GPU on this rate card; a batch of 4 reports four times the units
    # (wall times are Slurm's whole seconds: 1 or 2 here, so 4x cannot be reversed)
    assert cells[o.status["best"]["byCost"]]["gpu"] == "L4"
    assert cells[o.status["best"]["byThroughput"]]["params"]["BATCH"] == "4"
    assert Decimal(o.cost_usd) == sum(Decimal(c["costUSD"]) for c in cells)
    for i, gpu in enumerate(["L4", "L4", "A10", "A10"]):  # one Slurm job per cell, its GRES
        job_id = slurm.job_ids(ResourceKey("Job", "team-a", f"bs-{i}"))[0]
        asked = slurm.cluster.run("squeue", "-h", "-t", "all", "-j", str(job_id), "-o", "%b")
        assert asked.strip().endswith(f"gpu:{gpu}:1"), asked
