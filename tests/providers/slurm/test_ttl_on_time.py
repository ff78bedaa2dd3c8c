"""ttlSecondsAfterFinished on Slurm with nobody looking: under a serving reconciler a
finished Job's directory (record, outputs, logs) goes once its TTL has passed, although
nothing reads the Job after the refresh saw it finish; the reconciler's record stays
final, so a later sync plans nothing for it (no second submission, no drift)."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.floor.phases import is_terminal

from tests.fixtures_git import ManifestRepo
from tests.support.serving import Served, wait_until

pytestmark = pytest.mark.slurm

PROJECT = "team-a"
JOB = f"""apiVersion: nodus.dev/v1
kind: Job
metadata:
  name: brief
spec:
  ttlSecondsAfterFinished: 2
  command:
    - {sys.executable}
    - -c
    - |
      import os
      print("wrote the result")
      open(os.environ["NODUS_OUTPUTS_DIR"] + "/result.txt", "w").write("42")
  outputs: [{{name: result, path: /nodus/outputs/result.txt}}]
"""


@pytest.fixture
def root(slurm_cluster) -> Path:
    """The backend's directory on the cluster's shared filesystem."""
    return slurm_cluster.session_root / f"ttl-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def served(slurm_cluster, root: Path, manifest_repo: ManifestRepo, tmp_path
           ) -> Iterator[Served]:
    s = Served(manifest_repo, tmp_path / "state", "slurm", slurm_cluster.settings(root),
               PROJECT)
    yield s
    s.stop()


def test_a_finished_job_goes_with_its_outputs_when_its_ttl_passed(served, root) -> None:
    job_dir = root / PROJECT / "brief"
    served.start_ticking()
    served.push({"brief.yaml": JOB})
    done = served.wait_record("Job", "brief", lambda r: is_terminal(r.phase), timeout=120)
    assert done.phase == "Succeeded", (done.reason, done.message, done.status)
    assert done.status["outputs"]["result"]["size"] == 2  # it wrote its output
    # Nothing reads a finished Job: only the service's refresh tick runs from here.
    wait_until(lambda: not job_dir.exists(),
               "the Job's directory (record, outputs, logs) to go after its TTL", timeout=60)
    record = served.record("Job", "brief")
    assert (record.phase, record.deleted) == ("Succeeded", False)  # final, not "Missing"
    report = served.sync()
    assert [a for a in report.plan.actions if a.key == ResourceKey("Job", PROJECT, "brief")
            ] == []  # neither submitted again nor drift
    assert not job_dir.exists()
