"""`Sweep.jobs()` is "the cell Jobs the Sweep created": against a real served reconciler,
cells that never started (maxParallel, then a cancel) have no Job to list."""

from __future__ import annotations

from nodus_gitops import sdk as nodus

from tests.sdk.conftest import World, poll

SLEEP = {"image": "python:3.12-slim", "command": ["python3", "-c", "import time; time.sleep(120)"]}


def _cell_phases(sweep: nodus.Sweep) -> list[str]:
    try:
        return [c.phase for c in sweep.cells()]
    except nodus.errors.NotFound:
        return []


def test_jobs_lists_only_the_cells_it_created(configured: World) -> None:
    sweep = nodus.Sweep(SLEEP, grid={"N": [1, 2, 3]}, max_parallel=1,
                        name="one-at-a-time").run()
    poll(lambda: _cell_phases(sweep)[:1] == ["Running"])
    assert [j.name for j in sweep.jobs()] == ["one-at-a-time-0"]
    assert [c.phase for c in sweep.cells()] == ["Running", "Pending", "Pending"]

    sweep.cancel()
    report = sweep.wait(timeout=40)
    assert report.phase == "Cancelled"
    assert [c.phase for c in report.cells] == ["Cancelled"] * 3
    jobs = sweep.jobs()
    assert [(j.name, j.cell, j.phase) for j in jobs] == [("one-at-a-time-0", 0, "Cancelled")]
