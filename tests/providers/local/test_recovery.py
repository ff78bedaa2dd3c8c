"""Run directories outlive the reconciler: a new provider over the same root finds the
running Jobs, and a Job whose supervisor was killed is recovered per recovery.*."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.floor.phases import FIXES
from nodus_gitops.providers.base import Workload
from nodus_gitops.providers.jsonfiles import read_json
from nodus_gitops.providers.local.procs import is_same_process

from tests.providers.local.conftest import INSTANCE, PROJECT, manifest
from tests.providers.local.test_lifecycle import checkpointed, started


def kill_supervisor(local, k) -> tuple[int, int]:
    """SIGKILL the Job's supervisor; returns its run's (pid, ticks)."""
    rec = next(iter(read_json(local.run(k).status)["runs"].values()))
    os.kill(local.supervisor_pid(k), signal.SIGKILL)
    return rec["pid"], rec["ticks"]


def test_restarted_reconciler_sees_running_jobs_without_duplicates(local):
    k = local.create("long", checkpointed(20))
    first = local.wait(k, lambda o: o.status["active"] == 1)
    pid = local.supervisor_pid(k)

    later = local.reopen()
    seen = later.get(k)
    assert seen.phase == "Running" and seen.provider_id == first.provider_id
    again = later.create(Workload(k, manifest("long", checkpointed(20)), "hash"), "long-1")
    assert again.provider_id == first.provider_id
    assert [o.key for o in later.list_owned(PROJECT, INSTANCE)] == [k]
    assert local.supervisor_pid(k) == pid
    done = local.wait(k, provider=later)
    assert done.phase == "Succeeded" and done.status["attempts"] == 1
    assert len(list(local.run(k).logs.iterdir())) == 1


def test_jobs_outlive_the_reconciler_process(local):
    script = f"""
import sys
from pathlib import Path
from nodus_gitops.providers.base import Workload
from nodus_gitops.providers.local import LocalConfig, LocalProvider
from nodus_gitops.floor.identity import ResourceKey
from tests.providers.local.conftest import manifest
p = LocalProvider(Path({str(local.root)!r}), LocalConfig(detect_gpus=False))
k = ResourceKey("Job", {PROJECT!r}, "orphan")
print(p.create(Workload(k, manifest("orphan", {checkpointed(10)!r}), "h"), "orphan-1").phase)
"""
    out = subprocess.run([sys.executable, "-c", script], check=True, timeout=60,
                         capture_output=True, text=True, cwd=Path(__file__).parents[3])
    assert out.stdout.strip() == "Queued"  # and that reconciler process has exited
    k = ResourceKey("Job", PROJECT, "orphan")
    local.keys.append(k)
    done = local.wait(k)
    assert done.phase == "Succeeded" and done.status["attempts"] == 1
    assert done.status["recoveries"] == 0 and local.log(k) == "start 0"


def test_killed_supervisor_is_recovered_from_the_checkpoint(local):
    k = local.create("fragile", checkpointed(30))
    started(local, k, 0.5)
    run_pid, run_ticks = kill_supervisor(local, k)
    deadline = time.monotonic() + 2
    while is_same_process(run_pid, run_ticks) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not is_same_process(run_pid, run_ticks)  # the orphaned run died with it
    saved = int((local.run(k).state_for(0) / "step").read_text())
    assert 0 < saved < 30
    recovering = local.provider.get(k)
    assert recovering.phase == "Recovering", recovering
    assert recovering.status["recoveries"] == 1
    done = local.wait(k)
    assert done.phase == "Succeeded", done
    assert local.log(k) == f"start {saved}" and done.status["recoveries"] == 1
    assert sorted(p.name for p in local.run(k).logs.iterdir()) == ["0-1.log", "0-2.log"]
    reasons = [e["reason"] for e in local.run(k).read_events()]
    assert "CapacityLost" in reasons and "Recovering" in reasons


def test_restartable_recovery_starts_again_from_the_beginning(local):
    k = local.create("again", checkpointed(10), recovery={"continuity": "Restartable"})
    started(local, k)
    kill_supervisor(local, k)
    assert local.wait(k).phase == "Succeeded"
    assert local.log(k) == "start 0"


def test_an_index_that_uses_up_max_attempts_fails_the_job(local):
    k = local.create("unlucky", checkpointed(100), recovery={"maxAttempts": 1})
    started(local, k, 0.1)
    kill_supervisor(local, k)  # its one attempt is lost
    done = local.wait(k)
    assert (done.phase, done.reason, done.fix) == (
        "Failed",
        "RecoveryLimitExceeded",
        FIXES["RecoveryLimitExceeded"],
    )
    assert "index 0" in done.message and "maxAttempts" in done.message
    assert sorted(p.name for p in local.run(k).logs.iterdir()) == ["0-1.log"]


# Index i waits to lose its capacity on its first attempt and finishes on the next.
LOSES_ONCE = """
import os, time
mark = os.path.join(os.environ["NODUS_CHECKPOINT_DIR"], "lost-once")
again = os.path.exists(mark)
open(mark, "w").close()
print("start", os.environ["NODUS_INDEX"], flush=True)
while not again:
    time.sleep(0.1)
"""


def test_max_attempts_counts_each_index_on_its_own(local):
    k = local.create("each", LOSES_ONCE, completions=3, parallelism=1,
                     recovery={"maxAttempts": 2})
    for index in range(3):  # each index loses one of its two attempts
        local.wait(k, lambda o, i=index: o.status["active"] == 1
                   and local.run(k).log_for(i, 1).exists()
                   and local.log(k, i).startswith("start"))
        kill_supervisor(local, k)
    done = local.wait(k)
    assert done.phase == "Succeeded", done
    assert done.status["recoveries"] == 3
    # Each loss is told against the index's own budget, not the Job's total recoveries.
    lost = [e["message"] for e in local.run(k).read_events() if e["reason"] == "CapacityLost"]
    assert len(lost) == 3
    for index, message in enumerate(lost):
        assert f"index {index} has lost 1 of its 2 attempts" in message, message


def test_two_short_recoveries_in_a_row_are_no_progress(local):
    k = local.create(
        "stuck", checkpointed(100), recovery={"minProgressDuration": "30s", "maxAttempts": 5}
    )
    started(local, k, 0.1)
    kill_supervisor(local, k)  # the first run was short, but it was no recovery
    local.wait(k, lambda o: o.status["recoveries"] == 1 and o.status["active"] == 1)
    kill_supervisor(local, k)  # the first recovery was short
    recovering = local.wait(k, lambda o: o.status["recoveries"] == 2 and o.status["active"] == 1)
    assert recovering.phase == "Running", recovering
    kill_supervisor(local, k)  # and the second, right after it
    done = local.wait(k)
    assert (done.phase, done.reason, done.fix) == ("Failed", "NoProgress", FIXES["NoProgress"])
    assert "minProgressDuration" in done.message
    assert len(list(local.run(k).logs.iterdir())) == 3


def test_ephemeral_job_fails_when_capacity_is_lost(local):
    k = local.create("ephemeral", checkpointed(100), recovery={"continuity": "Ephemeral"})
    started(local, k, 0.1)
    kill_supervisor(local, k)
    done = local.wait(k)
    assert done.phase == "Failed" and "Ephemeral" in done.message and done.fix


def test_a_prestarted_supervisor_takes_the_next_job_and_exits_when_unused(local_factory):
    import gc

    from nodus_gitops.providers.local.procs import start_ticks

    local = local_factory(prestart_supervisor=True)
    first = local.create("first", "print(1)")
    spare = local.provider._spare[0]
    second = local.create("second", "print(2)")
    assert local.supervisor_pid(second) == spare.pid
    assert local.wait(first).phase == "Succeeded" and local.wait(second).phase == "Succeeded"
    assert local.log(second) == "2"
    unused = local.provider._spare[0]
    ticks = start_ticks(unused.pid)
    local.provider = None
    gc.collect()
    assert unused.wait(timeout=10) == 0
    assert not is_same_process(unused.pid, ticks)
