"""ttlSecondsAfterFinished on the local backend with nobody looking: under a serving
reconciler a finished Job goes, with its outputs and logs, once its TTL has passed,
although nothing reads it after it finished; the reconciler's record of it stays final,
so a later sync plans nothing for it (no second run, no drift). A Job the reconciler has
not yet seen finish is kept until it has, however short its TTL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.floor.phases import is_terminal
from nodus_gitops.providers.jsonfiles import read_json

from tests.fixtures_git import ManifestRepo
from tests.support.local_runs import stop_local_runs
from tests.support.serving import Served, wait_until

PROJECT = "p"


def job(name: str, ttl: int) -> str:
    return f"""apiVersion: nodus.dev/v1
kind: Job
metadata:
  name: {name}
spec:
  ttlSecondsAfterFinished: {ttl}
  command:
    - python3
    - -c
    - |
      import os
      print("wrote the result")
      open(os.environ["NODUS_OUTPUTS_DIR"] + "/result.txt", "w").write("42")
  outputs: [{{name: result, path: /nodus/outputs/result.txt}}]
"""


@pytest.fixture
def serve(manifest_repo: ManifestRepo, tmp_path: Path) -> Iterator:
    made: list[Served] = []

    def make(**service_fields) -> Served:
        served = Served(manifest_repo, tmp_path / "state", "local",
                        {"type": "local", "prestartSupervisor": False}, PROJECT,
                        **service_fields)
        made.append(served)
        return served

    yield make
    for served in made:
        served.stop()
    stop_local_runs(tmp_path / "state" / "local")


def run_dir(tmp_path: Path, name: str) -> Path:
    return tmp_path / "state" / "local" / PROJECT / name


def planned(served: Served, name: str) -> list[str]:
    key = ResourceKey("Job", PROJECT, name)
    report = served.sync()
    return [f"{a.action.value}: {a.reason}" for a in report.plan.actions if a.key == key]


def test_a_finished_job_goes_with_its_outputs_when_its_ttl_passed(serve, tmp_path) -> None:
    served = serve()
    served.start_ticking()
    served.push({"brief.yaml": job("brief", 2)})
    done = served.wait_record("Job", "brief", lambda r: is_terminal(r.phase))
    assert done.phase == "Succeeded", done.status
    assert done.status["outputs"]["result"]["size"] == 2  # it wrote its output
    # Nothing reads a finished Job: only the service's refresh tick runs from here.
    wait_until(lambda: not run_dir(tmp_path, "brief").exists(),
               "the Job's run directory (outputs, logs) to go after its TTL", timeout=60)
    record = served.record("Job", "brief")
    assert (record.phase, record.deleted) == ("Succeeded", False)  # final, not "Missing"
    # ...and its history says where it went: `describe` shows the TTL removed it.
    expired = [e for e in served.store.list_events(record.key) if e.reason == "Expired"]
    assert len(expired) == 1 and "ttlSecondsAfterFinished" in expired[0].message, expired
    assert planned(served, "brief") == []  # neither created again nor drift
    assert not run_dir(tmp_path, "brief").exists()


def test_a_job_goes_only_after_the_reconciler_saw_it_finish(serve, tmp_path) -> None:
    served = serve(follow_up=False)  # no refresh comes by itself: the test runs the ticks
    served.push({"instant.yaml": job("instant", 0)})
    status = run_dir(tmp_path, "instant") / "status.json"
    wait_until(lambda: is_terminal((read_json(status) or {}).get("phase")),
               "the Job to finish", timeout=60)
    # A TTL sweep before the refresh came to the Job (a refresh that waited for a long
    # sync, another binding's refresh first) keeps it: its record is still Queued.
    served.service.expire_finished()
    assert run_dir(tmp_path, "instant").exists()
    wait_until(lambda: served.service.refresh_all() or not run_dir(tmp_path, "instant")
               .exists(), "the Job to go once the refresh saw it finish", timeout=60)
    record = served.record("Job", "instant")
    assert (record.phase, record.deleted) == ("Succeeded", False), (record.reason,
                                                                     record.message)
    assert planned(served, "instant") == []


PIPELINE = """apiVersion: nodus.dev/v1
kind: Pipeline
metadata:
  name: brief-pipe
spec:
  ttlSecondsAfterFinished: 2
  stages:
    - name: first
      template:
        command: [python3, -c, "print('first')"]
    - name: second
      dependsOn: [first]
      template:
        command: [python3, -c, "print('second')"]
"""


def test_a_finished_pipeline_goes_with_its_stages_at_the_services_tick(serve, tmp_path) -> None:
    """The Pipeline's TTL fires with nobody reading: the service's own tick removes its
    stage Jobs, and a later sync plans nothing for it."""
    served = serve()
    served.start_ticking()
    served.push({"pipe.yaml": PIPELINE})
    done = served.wait_record("Pipeline", "brief-pipe", lambda r: is_terminal(r.phase))
    assert done.phase == "Succeeded", done.status
    stages = [run_dir(tmp_path, "brief-pipe-first"), run_dir(tmp_path, "brief-pipe-second")]
    wait_until(lambda: not any(d.exists() for d in stages),
               "the stage Jobs to go after the Pipeline's TTL", timeout=60)
    key = ResourceKey("Pipeline", PROJECT, "brief-pipe")
    report = served.sync()
    assert [a for a in report.plan.actions if a.key == key and a.action.value != "noop"] == []
    assert (served.record("Pipeline", "brief-pipe").phase,
            served.record("Pipeline", "brief-pipe").deleted) == ("Succeeded", False)
