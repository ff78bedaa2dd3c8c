"""Per-project budgets on a real Slurm cluster: a held project's running Job is
suspended through scontrol with reason BudgetExceeded, its new Job is held pending
(Suspended, never failed), both run on when the hold is lifted, and a project without a
hold is untouched. (Which projects are held is the service's count of spend, the same
for every backend: tests/providers/local/test_budget_holds.py.)"""

from __future__ import annotations

import time
from datetime import datetime

import pytest
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.floor.phases import FIXES, Phase, Reason
from nodus_gitops.providers.base import Workload

from tests.providers.slurm.conftest import PROJECT, manifest
from tests.providers.slurm.test_jobs import TICKER, _ticks

pytestmark = pytest.mark.slurm

HELD = "project team-a spent $1 of its budget of $1 per month (since 2026-12-01)"


def test_a_held_project_is_suspended_and_held_until_the_hold_is_lifted(slurm):
    k = slurm.create("train", TICKER)
    free = ResourceKey("Job", "team-b", "free")
    slurm.keys.append(free)
    slurm.provider.create(Workload(free, manifest("free", "import time; time.sleep(2)"), "h"),
                          "free-1")
    slurm.wait(k, lambda o: o.phase == Phase.RUNNING and _ticks(slurm, k) > 3)

    slurm.provider.hold_budget(PROJECT, True, HELD)
    held = slurm.wait(k, Phase.SUSPENDED, timeout=30)
    assert (held.reason, held.message, held.fix) == (Reason.BUDGET_EXCEEDED, HELD,
                                                     FIXES[Reason.BUDGET_EXCEEDED])
    assert slurm.slurm_states(slurm.job_ids(k)[0]) == ["SUSPENDED"]
    datetime.fromisoformat(held.status["stopByTime"].replace("Z", "+00:00"))
    time.sleep(0.3)  # slurmd stops the processes just after slurmctld records SUSPENDED
    n = _ticks(slurm, k)

    late = slurm.create("late", "print('late ran')")
    waiting = slurm.wait(late, Phase.SUSPENDED, timeout=30)
    assert waiting.reason == Reason.BUDGET_EXCEEDED  # held pending: nothing ran
    assert waiting.status["attempts"] <= 1 and not waiting.status.get("startTime")
    assert slurm.wait(free).phase == Phase.SUCCEEDED  # team-b has no hold
    assert _ticks(slurm, k) <= n + 1
    assert slurm.provider.get(late).phase == Phase.SUSPENDED

    slurm.provider.hold_budget(PROJECT, False, "")
    done = slurm.wait(k, timeout=90)
    assert done.phase == Phase.SUCCEEDED and done.reason is None, done
    assert _ticks(slurm, k) == 60 and "stopByTime" not in done.status
    assert slurm.wait(late, timeout=60).phase == Phase.SUCCEEDED
