"""spec.distributed on Slurm: one allocation of `nodes` nodes with one task (rank) on
each, started by srun, each rank with the variables torchrun reads.

The test cluster is one node: a gang of two or more nodes cannot be placed there. What
it can run is the wrapper itself: an allocation of one node with several tasks, which
srun starts the same way (one rank per task) as on several nodes."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from nodus_gitops.floor.phases import Phase
from nodus_gitops.providers.local.spec import parse_job
from nodus_gitops.providers.slurm import submit

from tests.providers.slurm.conftest import manifest

pytestmark = pytest.mark.slurm

RANKS = """
import json, os
env = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                      "MASTER_PORT", "NODUS_INDEX", "NODUS_OUTPUTS_DIR")}
print("env", json.dumps(env), flush=True)
open(os.path.join(os.environ["NODUS_OUTPUTS_DIR"], "result.txt"), "w").write(env["RANK"])
open(os.path.join(os.environ["NODUS_CHECKPOINT_DIR"], "mine"), "w").write(env["RANK"])
"""


def _body(spec, job_dir: Path, shim: Path) -> dict:
    return submit.job_body(spec, {}, name="gang", note="nodus-gitops test gang",
                           job_dir=job_dir, shim=shim, attempt=1, indexes=[0],
                           partitions={}, default_partition=None, time_limit=120)


def test_a_gang_is_one_allocation_of_its_nodes_with_one_task_on_each(tmp_path):
    spec = parse_job(manifest("gang", "pass", distributed={"nodes": 3, "gpusPerNode": 2},
                              resources={"gpu": "L4"}))
    body = _body(spec, tmp_path, tmp_path)
    assert body["nodes"] == [3, 3] and body["tasks"] == 3 and body["tasks_per_node"] == 1
    assert body["gres"] == "gpu:L4:2"  # GRES is per node: gpusPerNode on each
    assert "array" not in body
    assert "srun --label --kill-on-bad-exit=1" in submit.script(spec, tmp_path, "auto")


def test_a_gangs_run_costs_every_node_it_holds():
    from nodus_gitops.providers.slurm.observe import cost
    from nodus_gitops.providers.slurm.status import Run

    runs = [Run(index=0, attempt=1, job_id=7, state="COMPLETED", seconds=10.0)]
    doc = {"ratePerSecond": 0.5, "manifest": manifest("gang", "pass", distributed={"nodes": 3})}
    assert cost(doc, runs) == 15.0
    doc["manifest"] = manifest("single", "pass")
    assert cost(doc, runs) == 5.0


@pytest.mark.parametrize("sandbox", ["none", "auto"])
def test_the_gang_wrapper_runs_every_rank_under_srun(slurm, sandbox):
    """One node, two tasks: srun starts rank 0 and rank 1, each stores its outputs
    under its rank and keeps its own checkpoint directory (under bubblewrap where the
    node has it, as /nodus/outputs and /nodus/state)."""
    spec = parse_job(manifest("gang", RANKS, distributed={"nodes": 2}))
    job_dir = slurm.root / f"gang-wrapper-{sandbox}"
    job_dir.mkdir(parents=True)
    body = _body(spec, job_dir, job_dir)
    body.update(nodes=[1, 1], tasks=2, tasks_per_node=2)  # what this one-node cluster has
    (job_dir / "slurm").mkdir()
    job_id = slurm.provider.client.submit(submit.script(spec, job_dir, sandbox), body)
    try:
        exit_file = job_dir / "exits" / "0-1"
        deadline = time.monotonic() + 90
        while not exit_file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        log = (job_dir / "logs" / "0-1.log").read_text()
        assert exit_file.read_text().strip() == "0", log
    finally:
        slurm.provider.client.cancel(job_id)
    envs = {}
    for line in log.splitlines():  # srun --label: "<rank>: <line>"
        rank, _, text = line.partition(": ")
        if text.startswith("env "):
            envs[int(rank)] = json.loads(text.removeprefix("env "))
    assert sorted(envs) == [0, 1], log
    for rank, env in envs.items():
        assert env["RANK"] == str(rank) and env["WORLD_SIZE"] == "2", env
        assert env["LOCAL_RANK"] == "0" and env["NODUS_INDEX"] == "0", env
        assert env["MASTER_ADDR"] and env["MASTER_PORT"] == envs[0]["MASTER_PORT"], env
        contained = sandbox == "auto" and shutil.which("bwrap") is not None
        assert (env["NODUS_OUTPUTS_DIR"] == "/nodus/outputs") == contained, env
    assert (job_dir / "outputs" / "result.txt").read_text() == "0"
    assert (job_dir / "outputs" / "rank-1" / "result.txt").read_text() == "1"
    for rank in range(2):
        assert (job_dir / "state" / f"0.rank{rank}" / "mine").read_text() == str(rank)


def test_one_rank_failing_fails_the_gang_wrapper(slurm):
    code = "import os, sys, time\nif os.environ['RANK'] == '1': sys.exit(4)\ntime.sleep(60)"
    spec = parse_job(manifest("gang-fails", code, distributed={"nodes": 2}))
    job_dir = slurm.root / "gang-fails"
    job_dir.mkdir(parents=True)
    (job_dir / "slurm").mkdir()
    body = _body(spec, job_dir, job_dir)
    body.update(nodes=[1, 1], tasks=2, tasks_per_node=2)
    job_id = slurm.provider.client.submit(submit.script(spec, job_dir, "none"), body)
    try:
        exit_file = job_dir / "exits" / "0-1"
        deadline = time.monotonic() + 50  # well before rank 0's minute is up
        while not exit_file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert exit_file.exists(), (job_dir / "logs" / "0-1.log").read_text()
        assert exit_file.read_text().strip() != "0"
    finally:
        slurm.provider.client.cancel(job_id)


def test_a_gang_larger_than_the_cluster_fails_with_capacity_unavailable(slurm):
    """The platform's reason, message and fix, never Slurm's own words: the test cluster
    has one node in each partition."""
    k = slurm.create("too-wide", "pass", distributed={"nodes": 2})
    o = slurm.wait(k, lambda o: o.phase in (Phase.FAILED, Phase.SUCCEEDED), timeout=60)
    assert o.phase == Phase.FAILED and o.reason == "CapacityUnavailable", o
    assert o.message == ("the gang needs 2 nodes at once (one rank on each, CPU only); "
                         "partition debug has 1 node"), o.message
    assert o.fix == ("lower spec.distributed.nodes (or gpusPerNode), or run the Job on a "
                     "cluster with at least 2 such nodes"), o.fix
    assert "slurm" not in o.message.lower() and "slurm" not in o.fix.lower()
    # over several partitions (regions), with GPUs on each node
    k = slurm.create("too-wide-gpus", "pass", distributed={"nodes": 3}, resources={"gpu": "L4"},
                     placement={"regions": ["us", "eu"]})
    o = slurm.wait(k, lambda o: o.phase in (Phase.FAILED, Phase.SUCCEEDED), timeout=60)
    assert (o.phase, o.reason) == (Phase.FAILED, "CapacityUnavailable"), o
    assert o.message == ("the gang needs 3 nodes at once (one rank on each, L4 x1); "
                         "partitions debug, eu have at most 1 node"), o.message


def test_fields_slurm_cannot_honour_are_in_the_status(slurm):
    k = slurm.create("placed", "pass", placement={"regions": ["eu"], "interruptible": True},
                     completeByTime="2030-01-01T00:00:00Z")
    o = slurm.wait(k, lambda o: o.phase == Phase.SUCCEEDED)
    notes = o.status["notHonoured"]
    assert [n.split(" ")[0].rstrip(":") for n in notes] == ["placement.interruptible",
                                                           "completeByTime"]
    assert o.status["slurm"]["partition"] == "eu"  # regions are honoured as partitions
    plain = slurm.create("plain", "pass")
    assert "notHonoured" not in slurm.wait(plain, lambda o: o.phase == Phase.SUCCEEDED).status
    fetched = slurm.create("fetched", "pass", source={"git": {"repo": "team/code", "ref": "v1"}})
    [note] = slurm.wait(fetched, lambda o: o.phase == Phase.SUCCEEDED).status["notHonoured"]
    assert note.startswith("source.git (team/code@v1): the slurm backend fetches no source")
