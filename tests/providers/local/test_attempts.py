"""What each attempt of an index finds when it starts: a retried index starts fresh (no
outputs, no checkpoint of the attempts before it), a recovered one gets back its
checkpoint paths and nothing else, and every path of recovery.checkpointPaths exists,
is saved and is restored as /nodus/state is."""

from __future__ import annotations

import json

import pytest

from tests.providers.local.conftest import HAS_BWRAP
from tests.providers.local.test_recovery import kill_supervisor

# Prints what it finds in its outputs and checkpoint directories, leaves a file of its
# own in both, and fails until its third attempt (it counts its attempts in its working
# directory, which is not what this is about).
RETRIED = """
import json, os, sys, uuid
out, state = os.environ["NODUS_OUTPUTS_DIR"], os.environ["NODUS_CHECKPOINT_DIR"]
print("seen", json.dumps({"outputs": sorted(os.listdir(out)),
                          "state": sorted(os.listdir(state))}), flush=True)
os.makedirs("tries", exist_ok=True)
n = len(os.listdir("tries"))
open(os.path.join("tries", str(n)), "w").close()
open(os.path.join(out, f"attempt-{n}"), "w").write(str(n))
open(os.path.join(state, f"attempt-{n}"), "w").write(str(n))
sys.exit(0 if n == 2 else 1)
"""

# The same look, then an output of its own and a checkpoint; the first attempt (no
# checkpoint yet) waits to lose its capacity, the next one finishes.
RECOVERED = """
import json, os, time, uuid
out, state = os.environ["NODUS_OUTPUTS_DIR"], os.environ["NODUS_CHECKPOINT_DIR"]
seen = {"outputs": sorted(os.listdir(out)), "state": sorted(os.listdir(state))}
open(os.path.join(out, f"partial-{uuid.uuid4().hex}"), "w").write("x")
first = not seen["state"]
open(os.path.join(state, "step"), "w").write("1")
print("seen", json.dumps(seen), flush=True)
while first:
    time.sleep(0.1)
"""


def seen(local, k, attempt: int, index: int = 0) -> dict:
    run = local.run(k)
    log = run.log_for(index, attempt).read_text()
    line = next((x for x in log.splitlines() if x.startswith("seen ")), None)
    # what the Job went through, when the attempt never looked (a crashed supervisor,
    # a recovery the test did not ask for)
    assert line is not None, {name: (run.path / name).read_text(errors="replace")
                              if (run.path / name).exists() else None
                              for name in ("events.jsonl", "supervisor.log", "status.json")} | {
                              "log": log}
    return json.loads(line.removeprefix("seen "))


def test_a_retried_index_starts_fresh(local):
    k = local.create("retried", RETRIED, backoffLimit=2,
                     outputs=[{"name": "last", "path": "/nodus/outputs/attempt-2"}])
    done = local.wait(k)
    assert done.phase == "Succeeded", done
    assert done.status["attempts"] == 3
    for attempt in (1, 2, 3):
        assert seen(local, k, attempt) == {"outputs": [], "state": []}, attempt
    # what the Job stores is its succeeded run's outputs only
    assert sorted(p.name for p in local.run(k).outputs.iterdir()) == ["attempt-2"]


def test_a_recovered_index_gets_back_its_checkpoint_and_no_outputs(local):
    k = local.create("resumed", RECOVERED)
    local.wait(k, lambda o: local.log(k).startswith("seen"))
    kill_supervisor(local, k)
    done = local.wait(k)
    assert done.phase == "Succeeded", done
    assert seen(local, k, 1) == {"outputs": [], "state": []}
    assert seen(local, k, 2) == {"outputs": [], "state": ["step"]}
    assert len(list(local.run(k).outputs.iterdir())) == 1  # the second attempt's


# Reports NODUS_CHECKPOINT_DIR and which of the paths exist, keeps a checkpoint in each
# listed path, and (first attempt) waits to lose its capacity.
CHECKPOINTS = """
import json, os, time
paths = ["/ckpt", "/nodus/cache", "/nodus/state"]
found = {p: sorted(os.listdir(p)) if os.path.isdir(p) else None for p in paths}
print("seen", json.dumps({"dir": os.environ["NODUS_CHECKPOINT_DIR"], "found": found}),
      flush=True)
first = not found["/ckpt"]
for p in ("/ckpt", "/nodus/cache"):
    open(os.path.join(p, "saved"), "w").write(p)
while first:
    time.sleep(0.1)
"""


@pytest.mark.skipif(not HAS_BWRAP, reason="checkpoint paths are mount points: needs bubblewrap")
@pytest.mark.parametrize("continuity", ["Checkpointed", "Restartable"])
def test_every_checkpoint_path_exists_and_is_restored_as_nodus_state_is(local, continuity):
    k = local.create("paths", CHECKPOINTS, recovery={
        "continuity": continuity, "checkpointPaths": ["/ckpt", "/nodus/cache"]})
    local.wait(k, lambda o: local.log(k).startswith("seen"))
    first = seen(local, k, 1)
    assert first == {"dir": "/ckpt",
                     "found": {"/ckpt": [], "/nodus/cache": [], "/nodus/state": None}}
    kill_supervisor(local, k)
    if continuity == "Restartable":  # starts from the beginning: it waits again
        second = local.run(k).log_for(0, 2)
        local.wait(k, lambda o: second.exists() and second.read_text().startswith("seen"))
        assert seen(local, k, 2) == first
        return
    done = local.wait(k)
    assert done.phase == "Succeeded", done
    assert seen(local, k, 2)["found"] == {"/ckpt": ["saved"], "/nodus/cache": ["saved"],
                                          "/nodus/state": None}


@pytest.mark.skipif(not HAS_BWRAP, reason="checkpoint paths are mount points: needs bubblewrap")
def test_checkpoint_paths_are_kept_across_a_suspend(local):
    code = "import signal, sys\nsignal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
    k = local.create("paused", code + CHECKPOINTS,
                     recovery={"checkpointPaths": ["/ckpt", "/nodus/cache"]})
    local.wait(k, lambda o: local.log(k).startswith("seen"))
    local.patch(k, state="Suspended")
    local.wait(k, "Suspended")
    local.patch(k, state="Running")
    done = local.wait(k)
    assert done.phase == "Succeeded", done
    assert seen(local, k, 2)["found"] == {"/ckpt": ["saved"], "/nodus/cache": ["saved"],
                                          "/nodus/state": None}


@pytest.mark.skipif(not HAS_BWRAP, reason="checkpoint paths are mount points: needs bubblewrap")
def test_a_checkpoint_path_that_cannot_be_one_is_said_not_ignored(local):
    code = "import os; print(os.environ['NODUS_CHECKPOINT_DIR'], os.path.isdir('/nodus/keep'))"
    k = local.create("odd", code, recovery={"checkpointPaths": ["/usr/ckpt", "/nodus/keep"]})
    done = local.wait(k)
    assert done.phase == "Succeeded", done
    assert local.log(k) == "/nodus/state True"
    said = [e for e in local.run(k).read_events() if e["reason"] == "CheckpointPathsRefused"]
    assert len(said) == 1 and "/usr/ckpt is part of the runtime" in said[0]["message"]


def test_without_a_sandbox_the_checkpoint_paths_are_said_to_be_approximated(local_factory):
    local = local_factory(sandbox="none")
    code = "import os; print(os.environ['NODUS_CHECKPOINT_DIR'])"
    k = local.create("bare", code, recovery={"checkpointPaths": ["/ckpt", "/cache"]})
    done = local.wait(k)
    assert done.phase == "Succeeded", done
    assert local.log(k) == str(local.run(k).state_for(0))
    said = [e for e in local.run(k).read_events()
            if e["reason"] == "CheckpointPathsApproximated"]
    assert len(said) == 1 and "/ckpt, /cache" in said[0]["message"]
