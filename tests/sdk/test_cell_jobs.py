"""`Sweep.jobs()` gives each cell's Job as the API serves it by name: the Job's own
status and manifest, and its parent, the Sweep and the cell."""

from __future__ import annotations

from nodus_gitops import sdk as nodus

from tests.sdk.conftest import World

QUICK = {"image": "python:3.12-slim", "command": ["python3", "-c", "print('hi')"]}


def test_jobs_are_the_api_job_objects_with_their_parent(configured: World) -> None:
    sweep = nodus.Sweep(QUICK, grid={"MODE": ["a", "b"]}, name="by-name").run()
    assert sweep.wait(timeout=40).phase == "Succeeded"
    jobs = sweep.jobs()
    assert [(j.name, j.cell, j.phase) for j in jobs] == [("by-name-0", 0, "Succeeded"),
                                                          ("by-name-1", 1, "Succeeded")]
    for index, job in enumerate(jobs):
        assert job.parent.to_dict() == {"kind": "Sweep", "project": "ml", "name": "by-name",
                                        "cell": str(index)}
        assert job.status.completed_indexes == "0"  # the Job's own status
        assert job.manifest["metadata"]["labels"]["nodus.dev/sweep"] == "by-name"
