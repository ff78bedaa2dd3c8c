"""A Pipeline's stages and a Sweep's cells are Jobs a user reaches by name, as the seeds
say ("every Job command works on a stage: logs, exec, describe and cp"): real runs on the
local backend, reconciled and then read through the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from nodus_gitops.floor.phases import FIXES, Reason

from tests.support.local_runs import stop_local_runs

ROOT = Path(__file__).resolve().parents[2]
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@e", "-c", "init.defaultBranch=main"]

CONTAINED = """\
apiVersion: nodus.dev/v1
kind: Pipeline
metadata:
  name: te
spec:
  stages:
    - name: prep
      template:
        command: [sh, -c, "echo prep out; printf rows > $NODUS_OUTPUTS_DIR/data.txt"]
        outputs: [{name: data, path: /nodus/outputs/data.txt}]
    - name: train
      dependsOn: [prep]
      template:
        command: [python3, -c, "import sys; print('train out'); sys.exit(3)"]
---
apiVersion: nodus.dev/v1
kind: Sweep
metadata:
  name: sw
spec:
  matrix:
    params:
      BS: ["1", "2"]
  template:
    kind: Job
    metadata:
      labels: {team: ml}
    spec:
      command: [python3, -c, "import os; print('cell', os.environ['NODUS_PARAM_BS'])"]
---
apiVersion: nodus.dev/v1
kind: Job
metadata:
  name: solo
  labels: {team: ml}
spec:
  command: [python3, -c, "print('solo')"]
---
apiVersion: nodus.dev/v1
kind: Job
metadata:
  name: many
spec:
  command: [python3, -c, "[print('line', i) for i in range(200000)]"]
"""

LOOSE = """\
apiVersion: nodus.dev/v1
kind: Job
metadata:
  name: free
spec:
  command: [python3, -c, "print('free')"]
"""


def cli(*args: str, config: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nodus_gitops.cli", *args, "--config",
                           str(config)], cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One reconcile to the end of a repository with a Pipeline (a stage fails), a Sweep
    and a Job on the contained local backend, and a Job on an uncontained one
    (`sandbox: none`); returns the config file."""
    tmp = tmp_path_factory.mktemp("children")
    repo = tmp / "repo"
    (repo / "contained").mkdir(parents=True)
    (repo / "loose").mkdir()
    (repo / "contained" / "all.yaml").write_text(CONTAINED)
    (repo / "loose" / "free.yaml").write_text(LOOSE)
    subprocess.run([*GIT, "init", "-q", str(repo)], check=True)
    subprocess.run([*GIT, "-C", str(repo), "add", "."], check=True)
    subprocess.run([*GIT, "-C", str(repo), "commit", "-qm", "workloads"], check=True)
    config = tmp / "config.yaml"
    config.write_text(
        f"stateDir: {tmp / 'state'}\n"
        "repos:\n"
        f"  - {{id: c, url: {repo}, path: contained, project: a}}\n"
        f"  - {{id: l, url: {repo}, path: loose, project: b, provider: loose}}\n"
        "providers:\n"
        "  local: {type: local}\n"
        f"  loose: {{type: local, sandbox: none, root: {tmp / 'state' / 'loose'}}}\n"
        "checks: {gitnotes: false}\n")
    try:
        done = cli("reconcile", "--timeout", "240", config=config)
        assert "Traceback" not in done.stderr, done.stderr
        assert "Pipeline   te     Failed" in done.stdout, done.stdout + done.stderr
        yield config
    finally:
        stop_local_runs(tmp / "state" / "local")
        stop_local_runs(tmp / "state" / "loose")


def test_the_stage_fix_text_works_as_written(ran: Path) -> None:
    """StageFailed's fix says `describe job/<pipeline>-<stage>`: that command, for the
    failed stage, tells why it failed and names its Pipeline."""
    assert "describe job/<pipeline>-<stage>" in FIXES[Reason.STAGE_FAILED]
    done = cli("describe", "job/te-train", config=ran)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "Name:        te-train" in out and "Kind:        Job" in out
    assert "Parent:      Pipeline/te (stage train)" in out
    assert "Phase:       Failed" in out
    assert "Reason:      BackoffLimitExceeded" in out
    # The backend's own events of the stage's Job: its run and how it ended.
    assert "Started" in out and "index 0 attempt 1" in out


def test_a_cell_is_a_job_for_get_with_its_sweep_as_parent(ran: Path) -> None:
    assert "describe job/<sweep>-<index>" in FIXES[Reason.CELLS_FAILED]
    done = cli("get", "job/sw-1", "-o", "json", config=ran)
    assert done.returncode == 0, done.stderr
    [obj] = json.loads(done.stdout)
    assert (obj["kind"], obj["name"], obj["project"], obj["phase"]) == (
        "Job", "sw-1", "a", "Succeeded")
    assert obj["parent"] == {"kind": "Sweep", "project": "a", "name": "sw", "cell": "1"}
    assert obj["status"]["completedIndexes"] == "0"  # the Job's own status, not a summary
    done = cli("describe", "job/sw-0", config=ran)
    assert done.returncode == 0 and "Parent:      Sweep/sw (cell 0)" in done.stdout
    # A top-level resource has none.
    [solo] = json.loads(cli("get", "job/solo", "-o", "json", config=ran).stdout)
    assert solo["parent"] is None


def test_get_jobs_lists_stage_and_cell_jobs_with_their_parent(ran: Path) -> None:
    done = cli("get", "jobs", config=ran)
    assert done.returncode == 0, done.stderr
    header, *rows = (line.split() for line in done.stdout.splitlines())
    assert header == ["NAME", "PHASE", "GPU", "ATTEMPT", "COST", "AGE", "PARENT"]
    by_name = {row[0]: row for row in rows}
    assert set(by_name) == {"solo", "many", "free", "te-prep", "te-train", "sw-0",
                            "sw-1"}
    assert by_name["te-train"][1] == "Failed" and by_name["te-train"][-1] == "pipeline/te"
    assert by_name["sw-0"][1] == "Succeeded" and by_name["sw-0"][-1] == "sweep/sw"
    assert by_name["solo"][-1] == "-"
    # Read from the Jobs themselves: the attempt and the age, as for any Job.
    assert by_name["sw-0"][3] == "1" and by_name["te-train"][3] == "7"
    assert all(by_name[job][5] != "-" for job in ("te-prep", "sw-0", "sw-1"))
    # Every kind at once: the children are Jobs there too.
    done = cli("get", config=ran)
    kinds = {line.split()[1]: line.split()[0] for line in done.stdout.splitlines()[1:]}
    assert kinds["te-prep"] == "Job" and kinds["te"] == "Pipeline"


def test_get_jobs_by_label_as_the_seeds_show(ran: Path) -> None:
    """`get jobs -l nodus.dev/pipeline=train-eval` lists a Pipeline's stage Jobs."""
    def names(selector: str) -> list[str]:
        done = cli("get", "jobs", "-l", selector, config=ran)
        assert done.returncode == 0, done.stderr
        return [line.split()[0] for line in done.stdout.splitlines()[1:]]

    assert names("nodus.dev/pipeline=te") == ["te-prep", "te-train"]
    assert names("nodus.dev/sweep==sw") == ["sw-0", "sw-1"]
    assert names("team=ml") == ["solo", "sw-0", "sw-1"]  # a Sweep template's labels
    assert names("team=ml,nodus.dev/sweep") == ["sw-0", "sw-1"]
    assert names("team!=ml,nodus.dev/pipeline") == ["te-prep", "te-train"]
    assert names("nodus.dev/pipeline=nope") == []
    done = cli("get", "jobs", "-l", "team=", config=ran)
    assert done.returncode == 1 and "'team=' is not KEY=VALUE" in done.stderr
    assert "Traceback" not in done.stderr


def test_logs_and_cp_of_a_stage(ran: Path, tmp_path: Path) -> None:
    done = cli("logs", "job/sw-1", config=ran)
    assert done.returncode == 0 and done.stdout == "cell 2\n", done.stderr
    done = cli("cp", "job/te-prep:outputs/data", str(tmp_path / "data.txt"), config=ran)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "data.txt").read_text() == "rows"


def test_a_name_that_is_no_job_is_not_found(ran: Path) -> None:
    for command in (("describe", "job/te-nope"), ("get", "job/te-nope"),
                    ("describe", "job/nope")):
        done = cli(*command, config=ran)
        assert done.returncode == 1 and "not found" in done.stderr, done
        assert "Traceback" not in done.stderr


def test_describe_says_what_contained_the_run(ran: Path) -> None:
    """sandbox: none is the config's choice; describe says so where it is read, from what
    the run recorded, and a contained run says what contained it."""
    done = cli("describe", "job/free", config=ran)
    assert done.returncode == 0, done.stderr
    assert ("Sandbox:     none: the command runs as the reconciler's own user and sees the "
            "whole machine") in done.stdout
    assert "NoSandbox" in done.stdout  # the backend's warning event
    done = cli("describe", "job/solo", config=ran)
    assert done.returncode == 0, done.stderr
    assert "Sandbox:     bubblewrap: runs as " in done.stdout
    assert "NoSandbox" not in done.stdout


def test_output_cut_short_by_the_reader_ends_quietly(ran: Path) -> None:
    """`get -o yaml | head -3` and `logs job/X | head -1`: the command ends with 0 and no
    traceback when the reader stops, as kubectl does."""
    base = [sys.executable, "-m", "nodus_gitops.cli"]
    for command in (["get", "-o", "yaml"], ["describe", "job/te-train"]):
        # The reader is gone before the command writes its first byte.
        proc = subprocess.Popen([*base, *command, "--config", str(ran)], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        proc.stdout.close()
        stderr = proc.stderr.read().decode()
        assert proc.wait(timeout=120) == 0, stderr
        assert stderr == ""
    # Through a shell pipe into head; the log is much longer than a pipe's buffer.
    script = (f"{sys.executable} -m nodus_gitops.cli {{}} --config {ran} | head -{{}}; "
              "echo \"status ${{PIPESTATUS[0]}}\" >&2")
    done = subprocess.run(["bash", "-c", script.format("get -o yaml", 3)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert len(done.stdout.splitlines()) == 3 and done.stderr == "status 0\n", done.stderr
    done = subprocess.run(["bash", "-c", script.format("logs job/many", 1)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.stdout == "line 0\n" and done.stderr == "status 0\n", done.stderr


def test_a_cell_not_started_yet_has_no_job(tmp_path: Path) -> None:
    """A cell waiting for maxParallel has no Job: the commands say so, and which cell of
    which Sweep it is, instead of showing a Job that does not exist."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "sweep.yaml").write_text(
        "apiVersion: nodus.dev/v1\nkind: Sweep\nmetadata:\n  name: slow\nspec:\n"
        "  maxParallel: 1\n  matrix:\n    params:\n      N: ['1', '2']\n"
        "  template:\n    kind: Job\n    spec:\n"
        "      command: [python3, -c, 'import time; time.sleep(600)']\n")
    subprocess.run([*GIT, "init", "-q", str(repo)], check=True)
    subprocess.run([*GIT, "-C", str(repo), "add", "."], check=True)
    subprocess.run([*GIT, "-C", str(repo), "commit", "-qm", "sweep"], check=True)
    config = tmp_path / "config.yaml"
    config.write_text(f"stateDir: {tmp_path / 'state'}\nrepos:\n  - {{id: s, url: {repo}}}\n"
                      "checks: {gitnotes: false}\n")
    try:
        done = cli("reconcile", "--once", config=config)
        assert done.returncode == 0, done.stdout + done.stderr
        for command in (("describe", "job/slow-1"), ("get", "job/slow-1"),
                        ("logs", "job/slow-1")):
            done = cli(*command, config=config)
            assert done.returncode == 1, done
            assert ("job/slow-1 not found: Sweep/slow (cell 1) has not created its Job "
                    "(Pending)") in done.stderr
        done = cli("describe", "job/slow-0", config=config)
        assert done.returncode == 0 and "Parent:      Sweep/slow (cell 0)" in done.stdout
    finally:
        stop_local_runs(tmp_path / "state" / "local")
