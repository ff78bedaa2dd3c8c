"""Capacity lost on a real Slurm cluster, and what each attempt of an index finds: a run
the cluster forgot is recovered per recovery.* (maxAttempts for each index, NoProgress
for recoveries only), a retried index starts fresh, and every path of
recovery.checkpointPaths is a checkpoint directory that comes back after a loss.

A loss is what slurmctld forgetting a running job looks like to the backend: the task
is renamed (no longer the Job's) and cancelled before its wrapper records an exit
status."""

from __future__ import annotations

import json

import pytest
from nodus_gitops.floor.phases import Phase, Reason

pytestmark = pytest.mark.slurm

# Prints what it finds, leaves a file in its outputs and checkpoint directories, and (on
# its first attempt of the index) waits to lose its capacity.
LOSES_FIRST = """
import json, os, time
out, state = os.environ["NODUS_OUTPUTS_DIR"], os.environ["NODUS_CHECKPOINT_DIR"]
seen = {"outputs": sorted(os.listdir(out)), "state": sorted(os.listdir(state))}
print("seen", json.dumps(seen), flush=True)
open(os.path.join(out, "partial-" + os.environ["NODUS_INDEX"]), "w").write("x")
open(os.path.join(state, "step"), "w").write("1")
while not seen["state"]:
    time.sleep(0.2)
"""

# Never finishes: every attempt waits to lose its capacity.
FOREVER = "import time\nprint('start', flush=True)\nwhile True:\n    time.sleep(0.2)\n"


def _log(slurm, k, index: int, attempt: int) -> str:
    path = slurm.root / k.project / k.name / "logs" / f"{index}-{attempt}.log"
    return path.read_text() if path.exists() else ""


def _seen(slurm, k, index: int, attempt: int) -> dict:
    line = next(x for x in _log(slurm, k, index, attempt).splitlines() if x.startswith("seen"))
    return json.loads(line.removeprefix("seen "))


def _running(slurm, k, index: int) -> dict | None:
    """The newest submission that runs `index`, once its command printed something."""
    doc = json.loads((slurm.root / k.project / k.name / "job.json").read_text())
    subs = [s for s in doc["submissions"] if index in (s.get("open") or [])]
    if subs and _log(slurm, k, index, subs[-1]["attempt"]).strip():
        return subs[-1]
    return None


def lose(slurm, k, index: int = 0) -> None:
    """The cluster forgets the running run of `index`."""
    slurm.wait(k, lambda o: _running(slurm, k, index) is not None)
    sub = _running(slurm, k, index)
    target = f"{sub['jobId']}_{index}" if sub.get("array") else str(sub["jobId"])
    slurm.cluster.run("scontrol", "update", f"JobId={target}", "Name=lost-capacity")
    slurm.cluster.run("scancel", target)
    before = len(slurm.job_ids(k))
    slurm.wait(k, lambda o: len(slurm.job_ids(k)) > before or o.phase in (
        Phase.FAILED, Phase.SUCCEEDED, Phase.CANCELLED))


def test_a_lost_run_resumes_from_its_checkpoint_on_fresh_outputs(slurm):
    k = slurm.create("resumed", LOSES_FIRST)
    lose(slurm, k)
    done = slurm.wait(k)
    assert done.phase == Phase.SUCCEEDED, done
    assert done.status["recoveries"] == 1
    assert _seen(slurm, k, 0, 0) == {"outputs": [], "state": []}
    assert _seen(slurm, k, 0, 1) == {"outputs": [], "state": ["step"]}


def test_an_index_that_uses_up_max_attempts_fails_the_job(slurm):
    k = slurm.create("unlucky", FOREVER, recovery={"maxAttempts": 1})
    lose(slurm, k)
    done = slurm.wait(k)
    assert (done.phase, done.reason) == (Phase.FAILED, Reason.RECOVERY_LIMIT_EXCEEDED), done
    assert "index 0" in done.message and "maxAttempts (1)" in done.message
    assert len(slurm.job_ids(k)) == 1  # never submitted again


def test_max_attempts_counts_each_index_on_its_own(slurm):
    k = slurm.create("each", LOSES_FIRST, completions=3, parallelism=1,
                     recovery={"maxAttempts": 2})
    lose(slurm, k, 0)  # index 0 loses one of its two attempts
    lose(slurm, k, 1)  # then index 1 (the array goes on with it), then 2
    lose(slurm, k, 2)
    done = slurm.wait(k, timeout=120)
    assert done.phase == Phase.SUCCEEDED, done
    assert done.status["recoveries"] == 3


def test_no_progress_counts_recoveries_only(slurm):
    k = slurm.create("stuck", FOREVER,
                     recovery={"minProgressDuration": "10m", "maxAttempts": 5})
    lose(slurm, k)  # the first run was short, but it was no recovery
    lose(slurm, k)  # the first recovery was short
    assert slurm.provider.get(k).phase not in (Phase.FAILED, Phase.SUCCEEDED)
    lose(slurm, k)  # and the second, right after it
    done = slurm.wait(k)
    assert (done.phase, done.reason) == (Phase.FAILED, Reason.NO_PROGRESS), done
    assert "minProgressDuration" in done.message and done.fix


# Looks at its outputs and checkpoint directory, leaves a file in each, and fails until
# its third attempt (counted in its working directory).
RETRIED = """
import json, os, sys
out, state = os.environ["NODUS_OUTPUTS_DIR"], os.environ["NODUS_CHECKPOINT_DIR"]
print("seen", json.dumps({"outputs": sorted(os.listdir(out)),
                          "state": sorted(os.listdir(state))}), flush=True)
tries = os.path.join(os.environ["NODUS_JOB_DIR"], "work", "tries")
os.makedirs(tries, exist_ok=True)
n = len(os.listdir(tries))
open(os.path.join(tries, str(n)), "w").close()
open(os.path.join(out, f"attempt-{n}"), "w").write(str(n))
open(os.path.join(state, f"attempt-{n}"), "w").write(str(n))
sys.exit(0 if n == 2 else 1)
"""


def test_a_retried_index_starts_fresh(slurm):
    k = slurm.create("retried", RETRIED, backoffLimit=2,
                     outputs=[{"name": "last", "path": "/nodus/outputs/attempt-2"}])
    done = slurm.wait(k, timeout=120)
    assert done.phase == Phase.SUCCEEDED, done
    for attempt in (0, 1, 2):
        assert _seen(slurm, k, 0, attempt) == {"outputs": [], "state": []}, attempt
    outputs = slurm.root / k.project / k.name / "outputs"
    assert sorted(p.name for p in outputs.iterdir()) == ["attempt-2"]


# Reports NODUS_CHECKPOINT_DIR and what its checkpoint paths hold, keeps a checkpoint in
# each, and (first attempt) waits to lose its capacity.
CHECKPOINTS = """
import json, os, time
paths = ["/nodus/ckpt", "/nodus/cache", "/nodus/state"]
found = {p: sorted(os.listdir(p)) if os.path.isdir(p) else None for p in paths}
print("seen", json.dumps({"dir": os.environ["NODUS_CHECKPOINT_DIR"], "found": found}),
      flush=True)
first = not found["/nodus/ckpt"]
for p in paths[:2]:
    open(os.path.join(p, "saved"), "w").write(p)
while first:
    time.sleep(0.2)
"""


def test_every_checkpoint_path_exists_and_comes_back_after_a_loss(slurm):
    k = slurm.create("paths", CHECKPOINTS,
                     recovery={"checkpointPaths": ["/nodus/ckpt", "/nodus/cache"]})
    lose(slurm, k)
    done = slurm.wait(k)
    assert done.phase == Phase.SUCCEEDED, done
    first, second = _seen(slurm, k, 0, 0), _seen(slurm, k, 0, 1)
    if first["dir"] != "/nodus/ckpt":
        pytest.skip("the node has no bubblewrap: checkpoint paths are mount points")
    assert first["found"] == {"/nodus/ckpt": [], "/nodus/cache": [], "/nodus/state": None}
    assert second["found"] == {"/nodus/ckpt": ["saved"], "/nodus/cache": ["saved"],
                               "/nodus/state": None}
