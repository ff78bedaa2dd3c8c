"""Suspend, resume and cancel through spec.state, the cost cap, delete and ttl."""

from __future__ import annotations

import time
from decimal import Decimal

import pytest
from nodus_gitops.floor.errors import PermanentError
from nodus_gitops.floor.phases import FIXES
from nodus_gitops.providers.jsonfiles import read_json
from nodus_gitops.providers.local import RateCard, estimate
from nodus_gitops.providers.local.config import GpuSlot
from nodus_gitops.providers.local.procs import is_same_process

from tests.providers.local.conftest import INSTANCE, PROJECT, manifest

# Counts to STEPS, saving its step to the checkpoint directory as it goes and on
# SIGTERM (then exiting 0); starts from the saved step.
CHECKPOINTED = """
import os, signal, sys, time
state = os.path.join(os.environ["NODUS_CHECKPOINT_DIR"], "step")
step = int(open(state).read()) if os.path.exists(state) else 0
def save():
    open(state + ".tmp", "w").write(str(step))
    os.replace(state + ".tmp", state)
signal.signal(signal.SIGTERM, lambda *_: (save(), sys.exit(0)))
print("start", step, flush=True)
while step < STEPS:
    step += 1
    save()
    time.sleep(0.05)
open(os.path.join(os.environ["NODUS_OUTPUTS_DIR"], "final"), "w").write(str(step))
"""


def checkpointed(steps: int) -> str:
    return CHECKPOINTED.replace("STEPS", str(steps))


def started(local, k, pause: float = 0.3) -> None:
    """Wait until the program has installed its SIGTERM handler, then let it work."""
    local.wait(k, lambda o: local.log(k).startswith("start"))
    time.sleep(pause)


def active_pid(observed_run_dir) -> tuple[int, int]:
    rec = next(iter(read_json(observed_run_dir.status)["runs"].values()))
    return rec["pid"], rec["ticks"]


def test_suspend_saves_state_and_resume_continues_from_it(local):
    k = local.create("train", checkpointed(30))
    started(local, k)
    suspended = local.patch(k, state="Suspended")
    assert suspended.phase in ("Suspending", "Suspended")
    suspended = local.wait(k, "Suspended")
    saved = int((local.run(k).state_for(0) / "step").read_text())
    assert 0 < saved < 30
    assert suspended.status["active"] == 0
    cond = next(c for c in suspended.status["conditions"] if c["type"] == "Suspended")
    assert cond["status"] == "True"
    cost = suspended.cost_usd
    time.sleep(0.2)
    assert local.provider.get(k).cost_usd == cost  # no billing while suspended

    local.patch(k, state="Running")
    done = local.wait(k)
    assert done.phase == "Succeeded"
    assert local.log(k) == f"start {saved}"  # the latest attempt resumed from the checkpoint
    assert (local.run(k).outputs / "final").read_text() == "30"
    assert done.status["attempts"] == 2


def test_restartable_job_resumes_from_the_beginning(local):
    k = local.create("restart", checkpointed(20), recovery={"continuity": "Restartable"})
    started(local, k)
    local.patch(k, state="Suspended")
    local.wait(k, "Suspended")
    local.patch(k, state="Running")
    assert local.wait(k).phase == "Succeeded"
    assert local.log(k) == "start 0"


def test_failed_save_goes_back_to_running_and_is_retried_three_times(local_factory):
    local = local_factory(suspend_retry_seconds=1.0)
    code = (
        "import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *a: sys.exit(5))\n"
        "print('ready', flush=True)\ntime.sleep(60)"
    )
    k = local.create("stubborn", code)
    local.wait(k, lambda o: local.log(k) == "ready")
    local.patch(k, state="Suspended")
    first = local.wait(k, lambda o: o.status["suspendFailures"] == 1 and o.phase == "Running")
    cond = next(c for c in first.status["conditions"] if c["type"] == "Suspended")
    assert (cond["status"], cond["reason"]) == ("False", "SuspendFailed")
    assert "exited with code 5" in cond["message"]
    third = local.wait(
        k,
        lambda o: (
            o.status["suspendFailures"] == 3 and o.phase == "Running" and o.status["active"] == 1
        ),
    )
    assert (
        "gave up after 3 tries"
        in next(c for c in third.status["conditions"] if c["type"] == "Suspended")["message"]
    )
    time.sleep(1.2)
    still = local.provider.get(k)
    assert (still.phase, still.status["suspendFailures"]) == ("Running", 3)
    local.patch(k, state="Cancelled")
    assert local.wait(k).phase == "Cancelled"


def test_cancel_stops_for_good(local):
    k = local.create("cancel-me", "import time; time.sleep(60)")
    local.wait(k, lambda o: o.status["active"] == 1)
    pid, ticks = active_pid(local.run(k))
    local.patch(k, state="Cancelled")
    done = local.wait(k)
    assert (done.phase, done.reason) == ("Cancelled", None)
    assert not is_same_process(pid, ticks)
    local.patch(k, state="Running")  # a finished Job stays finished
    time.sleep(0.2)
    assert local.provider.get(k).phase == "Cancelled"


def test_created_suspended_never_starts_until_resumed(local):
    k = local.create("later", "print('ran')", state="Suspended")
    held = local.wait(k, "Suspended")
    assert held.status["attempts"] == 0
    local.patch(k, state="Running")
    assert local.wait(k).phase == "Succeeded" and local.log(k) == "ran"


def test_max_cost_suspends_and_raising_the_cap_resumes(local_factory):
    local = local_factory(rates=RateCard(cpu_core_hour=3600.0, memory_gib_hour=0.0))  # $1/s
    k = local.create("capped", checkpointed(30), maxCostUSD="0.4")
    capped = local.wait(k, "Suspended")
    assert (capped.reason, capped.fix) == ("MaxCostReached", FIXES["MaxCostReached"])
    assert Decimal(capped.cost_usd) >= Decimal("0.4")
    assert Decimal(capped.cost_usd) < Decimal("1.0")
    saved = int((local.run(k).state_for(0) / "step").read_text())
    assert saved > 0
    with pytest.raises(PermanentError, match="can only be raised"):
        local.patch(k, maxCostUSD="0.1")
    local.patch(k, maxCostUSD="10")
    done = local.wait(k)
    assert done.phase == "Succeeded" and local.log(k) == f"start {saved}"
    assert Decimal(done.cost_usd) > Decimal(capped.cost_usd)


def test_a_job_naming_no_gpu_type_is_charged_the_rate_of_the_slot_it_got(local_factory):
    """resources.gpu.minMemory leaves the type to placement: the H100 the run held is
    what it costs, not the rate card's price for a type it does not list."""
    rates = RateCard(cpu_core_hour=0.0, memory_gib_hour=0.0, gpu_hour={"H100": 3600.0},
                     default_gpu_hour=0.0)  # an H100 costs $1/s, any other GPU nothing
    local = local_factory(gpu_slots=[GpuSlot("H100", "80Gi")], rates=rates)
    k = local.create("roomy", "import time; time.sleep(1)",
                     resources={"gpu": {"minMemory": "40Gi"}})
    done = local.wait(k)
    assert done.phase == "Succeeded", done
    assert done.status["gpus"][0]["type"] == "H100"
    assert Decimal(done.cost_usd) >= Decimal("0.9")  # held it for a second at least
    # get -o wide's OFFERING and RATE: what the run got and an hour of it
    assert (done.status["offering"], done.status["rateUSDPerHour"]) == ("local/H100", "3600")
    plain = local.wait(local.create("plain", "pass"))
    assert (plain.status["offering"], plain.status["rateUSDPerHour"]) == ("local/cpu", "0")


def test_delete_cancels_and_removes_everything(local):
    k = local.create("doomed", "import time; time.sleep(60)")
    local.wait(k, lambda o: o.status["active"] == 1)
    pid, ticks = active_pid(local.run(k))
    local.provider.delete(k)
    assert not local.run(k).path.exists()
    assert not is_same_process(pid, ticks)
    assert local.provider.get(k) is None
    local.provider.delete(k)  # already gone is success


def test_finished_job_is_removed_after_its_ttl_and_never_rerun(local):
    k = local.create("short-lived", "print('once')", ttlSecondsAfterFinished=1)
    done = local.wait(k, "Succeeded")
    assert local.provider.list_owned(PROJECT, INSTANCE)[0].key == k
    later = local.reopen()
    later._clock = lambda: time.time() + 2
    assert later.get(k) is None
    assert not local.run(k).path.exists()
    assert later.list_owned(PROJECT, INSTANCE) == []
    from nodus_gitops.providers.base import Workload

    again = later.create(
        Workload(k, manifest("short-lived", "print('once')"), "hash"), "short-lived-1"
    )
    assert again.phase == "Succeeded" and again.provider_id == done.provider_id
    assert not local.run(k).path.exists()  # not started again
    # logs and cp say what happened to it, not that it never ran here
    from nodus_gitops.floor.errors import NotFoundError

    for read in (lambda: list(later.logs(k)), lambda: later.copy_output(k, "o", local.root)):
        with pytest.raises(NotFoundError, match="removed, with its logs and outputs, by its "
                                                 "ttlSecondsAfterFinished"):
            read()


def test_estimate_uses_expected_duration_or_timeout():
    rates = RateCard(cpu_core_hour=1.0, memory_gib_hour=0.5, gpu_hour={"L4": 2.0})
    m = manifest("e", resources={"cpu": "2", "memory": "2Gi", "gpu": "L4"}, expectedDuration="30m")
    assert estimate(m, rates) == "2.5"  # (2 cores + 2 GiB + one L4) = $5/h, for half an hour
    m["spec"].update(completions=4, parallelism=2)
    assert estimate(m, rates) == "5"  # two indexes at a time
    m["spec"].pop("expectedDuration")
    m["spec"]["timeout"] = "1h"
    assert estimate(m, rates) == "10"
    m["spec"]["maxCostUSD"] = "3"
    assert estimate(m, rates) == "3"
    m["spec"].pop("timeout")
    assert estimate(m, rates) == "unknown"


def test_timeout_can_be_lowered_on_a_running_job(local):
    k = local.create("patient", "import time; time.sleep(60)", timeout="10m")
    before = local.wait(k, lambda o: o.status["active"] == 1)
    after = local.patch(k, timeout="1s")
    assert after.status["timeoutTime"] < before.status["timeoutTime"]
    done = local.wait(k, timeout=10)
    assert (done.phase, done.reason) == ("Failed", "DeadlineExceeded")


def test_time_suspended_does_not_count_against_the_timeout(local):
    k = local.create("pausing", checkpointed(30), timeout="3s")
    started(local, k)
    local.patch(k, state="Suspended")
    held = local.wait(k, "Suspended")
    time.sleep(2.5)
    assert local.provider.get(k).status["timeoutTime"] > held.status["timeoutTime"]
    local.patch(k, state="Running")
    done = local.wait(k)
    assert done.phase == "Succeeded", done
