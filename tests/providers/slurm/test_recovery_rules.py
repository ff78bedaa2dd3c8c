"""The slurm backend's recovery rules without a cluster: recovery.maxAttempts for each
index, NoProgress for two short recoveries in a row (the first run is no recovery)."""

from __future__ import annotations

import pytest
from nodus_gitops.floor.phases import Phase, Reason
from nodus_gitops.providers.local.spec import parse_job
from nodus_gitops.providers.slurm.status import LOST, Run, decide


def spec(**recovery):
    return parse_job({"metadata": {"name": "j"},
                      "spec": {"command": ["true"], "completions": 2, "recovery": recovery}})


def step(s, runs):
    return decide(s, runs, desired="Running", now=1000.0, active_seconds=None, capped=False,
                  cancel_requested=False)


def lost(index, attempt, seconds=1.0):
    return Run(index, attempt, 10 + attempt, LOST, seconds=seconds)


def failed(index, attempt, seconds=1.0):
    return Run(index, attempt, 10 + attempt, "FAILED", exit_code=1 << 8, seconds=seconds)


@pytest.mark.parametrize(("runs", "max_attempts", "phase"), [
    ([lost(0, 0)], 1, Phase.FAILED),  # its one attempt lost
    ([lost(0, 0)], 2, Phase.RECOVERING),
    ([lost(0, 0), lost(0, 1)], 2, Phase.FAILED),
    ([lost(0, 0), lost(1, 1)], 2, Phase.RECOVERING),  # one loss each: neither used up
    ([lost(0, 0), failed(0, 1), lost(0, 2)], 3, Phase.RECOVERING),  # a failure is no loss
])
def test_max_attempts_counts_the_lost_attempts_of_each_index(runs, max_attempts, phase):
    d = step(spec(maxAttempts=max_attempts), runs)
    assert d.phase == phase, d
    if phase == Phase.FAILED:
        assert d.reason == Reason.RECOVERY_LIMIT_EXCEEDED and "index 0" in d.message


@pytest.mark.parametrize(("runs", "reason"), [
    ([lost(0, 0), lost(0, 1)], None),  # the first run and one recovery
    ([lost(0, 0), lost(0, 1), lost(0, 2)], Reason.NO_PROGRESS),
    ([lost(0, 0), lost(0, 1), lost(0, 2, seconds=900.0)], None),  # the last made progress
    ([lost(0, 0), failed(0, 1), lost(0, 2), lost(0, 3)], None),  # run 2 was a retry
    ([lost(0, 0), lost(1, 1), lost(0, 2)], None),  # each index's own runs
])
def test_no_progress_needs_two_short_recoveries_in_a_row(runs, reason):
    d = step(spec(minProgressDuration="5m", maxAttempts=10), runs)
    assert d.reason == reason, d
