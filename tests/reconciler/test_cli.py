"""The command line as people use it: exit codes, output shapes, clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from nodus_gitops.cli import main
from nodus_gitops.config import Binding, Settings
from nodus_gitops.providers.base import FakeProvider
from nodus_gitops.state.store import Store
from nodus_gitops.wiring import build_service

from tests.fixtures_git import ManifestRepo

ROOT = Path(__file__).resolve().parents[2]
JOB = ("apiVersion: nodus.dev/v1\nkind: Job\nmetadata:\n  name: {name}\nspec:\n"
       "  command: [python3, -c, pass]\n  maxCostUSD: \"{cap}\"\n")


def run_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nodus_gitops.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_validate_examples_repo_is_clean() -> None:
    done = run_cli("validate", "examples-repo")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "valid" in done.stdout


def test_validate_exit_codes_and_json(tmp_path: Path, capsys) -> None:
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "train.yaml").write_text(JOB.format(name="train", cap="0.25")
                                                  + "  timeout: 10x\n")
    assert main(["validate", str(tmp_path), "-o", "json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["resources"] == [{"kind": "Job", "name": "train", "line": 1,
                                 "file": f"{tmp_path.as_posix()}/jobs/train.yaml"}]
    [problem] = out["problems"]
    assert problem["path"] == "spec.timeout" and problem["line"] == 8
    assert set(problem) == {"file", "line", "kind", "name", "path", "message"}
    assert main(["validate", str(tmp_path / "missing")]) == 2
    with pytest.raises(SystemExit) as e:
        main(["validate", "-o", "xml"])
    assert e.value.code == 2


def test_no_traceback_on_bad_input(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_bytes(b"\xff\xfe not yaml: [")
    done = run_cli("validate", str(tmp_path))
    assert done.returncode == 1 and "Traceback" not in done.stderr + done.stdout
    done = run_cli("get", "--state-dir", str(tmp_path / "s"), "--state", "mysql://x")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "--state" in done.stderr
    bad_config = tmp_path / "c.yaml"
    bad_config.write_text("repos:\n  - id: A_B\n    url: x\n")
    done = run_cli("plan", "--config", str(bad_config), "--state-dir", str(tmp_path / "s"))
    assert done.returncode == 1 and "repos[0].id" in done.stderr
    assert "Traceback" not in done.stderr


def test_plan_exit_codes_and_json(manifest_repo: ManifestRepo, tmp_path: Path) -> None:
    state = tmp_path / "state"
    common = ["--repo", manifest_repo.push_url, "--branch", "main", "--project", "p",
              "--state-dir", str(state)]
    manifest_repo.write("a.yaml", JOB.format(name="a", cap="1.00"))
    sha = manifest_repo.commit("a")
    manifest_repo.push()
    done = run_cli("plan", *common, "-o", "json")
    assert done.returncode == 2, done.stderr  # changes pending
    assert not (state / "state.db").exists()  # planning made no store to plan against
    out = json.loads(done.stdout)
    assert out["commit"] == sha and out["problems"] == []
    assert out["actions"] == [{"action": "create", "kind": "Job", "name": "a",
                               "file": "a.yaml", "changes": [], "reason": ""}]
    # Apply it (the service, with an in-memory provider), then plans are empty.
    store = Store.open(None, state)
    binding = Binding(id=flag_binding_id(manifest_repo), url=manifest_repo.push_url, project="p")
    provider = FakeProvider()
    service = build_service(Settings(state_dir=state, bindings=(binding,)), store,
                      provider_factory=lambda _n: provider)
    assert service.reconcile(binding.id).result == "applied"
    assert run_cli("plan", *common).returncode == 0
    # A lowered cap: blocked, exit 1, the reason in the text.
    manifest_repo.write("a.yaml", JOB.format(name="a", cap="0.50"))
    manifest_repo.commit("lower")
    manifest_repo.push()
    done = run_cli("plan", *common)
    assert done.returncode == 1 and "the cap can only be raised" in done.stdout
    # An invalid manifest: exit 1 with file and line.
    manifest_repo.write("b.yaml", "kind: Job\n")
    manifest_repo.commit("bad")
    manifest_repo.push()
    done = run_cli("plan", *common)
    assert done.returncode == 1 and "b.yaml:1" in done.stdout

    # get and describe read the same state.
    done = run_cli("get", "-o", "json", "--state-dir", str(state))
    [obj] = json.loads(done.stdout)
    assert {k: obj[k] for k in ("kind", "name", "project", "phase", "costUSD", "file")} == {
        "kind": "Job", "name": "a", "project": "p", "phase": "Running", "costUSD": "0",
        "file": "a.yaml"}
    assert obj["sourceCommit"] == sha and "status" in obj and "reason" in obj
    done = run_cli("get", "job/a", "--state-dir", str(state))
    assert done.returncode == 0 and "Running" in done.stdout
    assert run_cli("get", "job/zzz", "--state-dir", str(state)).returncode == 1
    done = run_cli("describe", "job/a", "--state-dir", str(state))
    assert done.returncode == 0 and "Created" in done.stdout and "a.yaml" in done.stdout


def flag_binding_id(repo: ManifestRepo) -> str:
    """The binding id `--repo URL --project p` derives."""
    from nodus_gitops.config import binding_from_flags

    return binding_from_flags(repo.push_url, "main", None, "p", None, None).id


@pytest.mark.parametrize("command", [["get"], ["get", "jobs"], ["describe", "job/x"]])
def test_a_read_without_state_says_where_it_looked_and_creates_nothing(
        tmp_path: Path, command: list[str]) -> None:
    for where in ([], ["--state-dir", str(tmp_path / "elsewhere")]):
        done = run_cli(*command, *where, cwd=tmp_path)
        assert done.returncode == 1, done
        assert "no state database at" in done.stderr and "--state-dir" in done.stderr
        assert "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_plan_and_get_read_an_old_schema_without_upgrading_it(
        manifest_repo: ManifestRepo, tmp_path: Path) -> None:
    import hashlib
    import sqlite3

    state = tmp_path / "state"
    state.mkdir()
    with sqlite3.connect(state / "state.db") as db:
        db.executescript((ROOT / "tests/state/legacy/v3.sqlite.sql").read_text())
    before = hashlib.sha256((state / "state.db").read_bytes()).hexdigest()
    manifest_repo.write("a.yaml", JOB.format(name="a", cap="1.00"))
    manifest_repo.commit("a")
    manifest_repo.push()
    for command in (["plan", "--repo", manifest_repo.push_url, "--branch", "main"], ["get"]):
        done = run_cli(*command, "--state-dir", str(state), cwd=tmp_path)
        assert done.returncode == 1, done
        assert "pre-Alembic version 3" in done.stderr and "upgrade" in done.stderr
    assert hashlib.sha256((state / "state.db").read_bytes()).hexdigest() == before
    assert sorted(p.name for p in state.iterdir() if p.name != "mirrors") == ["state.db"]


def test_get_prints_the_seeds_job_columns(tmp_path: Path, capsys) -> None:
    """get: the phase, the GPU, the attempt, the cost so far and the age; -o wide adds the
    offering, its rate and progress. A cost below a cent shows its value."""
    from nodus_gitops.floor.identity import ResourceKey
    from nodus_gitops.state.records import InventoryRecord

    state = tmp_path / "state"
    store = Store.open(None, state)
    store.upsert_binding("b", "https://github.com/acme/ml.git", "main", "", "p")
    status = {"attempts": 2, "succeeded": 0, "gpus": [{"type": "L4", "name": "L4"}],
              "offering": "local-l4", "rateUSDPerHour": "0.80"}
    store.upsert_resource(InventoryRecord(
        ResourceKey("Job", "p", "hello"), "b", {"kind": "Job", "spec": {}}, "h",
        phase="Running", status=status, cost_usd="0.0031", source_file="hello.yaml"))
    assert main(["get", "jobs", "--state-dir", str(state)]) == 0
    header, row = (line.split() for line in capsys.readouterr().out.splitlines())
    assert header == ["NAME", "PHASE", "GPU", "ATTEMPT", "COST", "AGE"]
    assert row[:5] == ["hello", "Running", "L4", "2", "$0.0031"]
    assert main(["get", "job/hello", "-o", "wide", "--state-dir", str(state)]) == 0
    header, row = (line.split() for line in capsys.readouterr().out.splitlines())
    assert header[6:9] == ["OFFERING", "RATE", "PROGRESS"]
    assert row[6:9] == ["local-l4", "$0.80/h", "0/1"]


@pytest.mark.parametrize("command", [["cp", "job/../../etc:outputs/x", "dest"],
                                     ["logs", "job/../../etc"], ["logs", "job/a/../b"]])
def test_a_job_name_that_is_a_path_is_refused_in_one_line(tmp_path: Path,
                                                          command: list[str]) -> None:
    done = run_cli(*command, "--state-dir", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 1, done
    assert "is not a Job name" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_get_watch_prints_the_row_of_a_resource_that_changed(tmp_path: Path) -> None:
    import time

    from nodus_gitops.floor.identity import ResourceKey
    from nodus_gitops.state.records import InventoryRecord

    state = tmp_path / "state"
    store = Store.open(None, state)
    store.upsert_binding("b", "https://github.com/acme/ml.git", "main", "", "p")

    def record(phase: str) -> None:
        store.upsert_resource(InventoryRecord(
            ResourceKey("Job", "p", "hello"), "b", {"kind": "Job", "spec": {}}, "h",
            phase=phase, source_file="hello.yaml"))

    record("Running")
    watch = subprocess.Popen([sys.executable, "-m", "nodus_gitops.cli", "get", "jobs", "--watch",
                              "--state-dir", str(state)], stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(7)  # three refreshes with nothing changed but the age
        record("Succeeded")
        time.sleep(5)
    finally:
        watch.terminate()
        out = watch.communicate(timeout=30)[0]
    # the table once, then only the row that changed, as kubectl's get -w
    lines = out.strip().splitlines()
    assert lines[0].split()[:2] == ["NAME", "PHASE"], out
    assert [line.split()[:2] for line in lines[1:]] == [["hello", "Running"],
                                                        ["hello", "Succeeded"]], out


def test_get_watch_events_are_one_json_line_each(tmp_path: Path) -> None:
    import json
    import time

    from nodus_gitops.floor.identity import ResourceKey
    from nodus_gitops.state.records import InventoryRecord

    state = tmp_path / "state"
    store = Store.open(None, state)
    store.upsert_binding("b", "https://github.com/acme/ml.git", "main", "", "p")

    def record(name: str, phase: str) -> None:
        store.upsert_resource(InventoryRecord(
            ResourceKey("Job", "p", name), "b", {"kind": "Job", "spec": {}}, "h",
            phase=phase, source_file=f"{name}.yaml"))

    record("hello", "Running")
    record("gone", "Running")
    watch = subprocess.Popen([sys.executable, "-m", "nodus_gitops.cli", "get", "jobs", "-w",
                              "-o", "json", "--output-watch-events", "--state-dir", str(state)],
                             stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(5)  # two refreshes with nothing changed
        record("hello", "Succeeded")
        store.remove_resource(ResourceKey("Job", "p", "gone"))
        time.sleep(5)
    finally:
        watch.terminate()
        out = watch.communicate(timeout=30)[0]
    events = [json.loads(line) for line in out.splitlines()]
    assert [(e["type"], e["object"]["name"]) for e in events] == [
        ("ADDED", "gone"), ("ADDED", "hello"), ("MODIFIED", "hello"), ("DELETED", "gone")], out
    assert events[2]["object"]["phase"] == "Succeeded"
    done = subprocess.run([sys.executable, "-m", "nodus_gitops.cli", "get", "-w",
                           "--output-watch-events", "--state-dir", str(state)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "needs -o json or -o yaml" in done.stderr


def test_reconcile_with_a_config_reconciles_only_the_binding_named(
        manifest_repo: ManifestRepo, tmp_path: Path) -> None:
    manifest_repo.write("a/one.yaml", JOB.format(name="one", cap="0.25"))
    manifest_repo.write("b/two.yaml", JOB.format(name="two", cap="0.25"))
    manifest_repo.commit()
    manifest_repo.push()
    config = tmp_path / "config.yaml"
    config.write_text(f"stateDir: {tmp_path / 's'}\nrepos:\n"
                      f"  - {{id: team-a, url: {manifest_repo.push_url}, path: a}}\n"
                      f"  - {{id: team-b, url: {manifest_repo.push_url}, path: b}}\n"
                      "checks: {gitnotes: false}\n")
    done = run_cli("reconcile", "--config", str(config), "--binding", "team-b", "--once")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "team-b: applied" in done.stdout and "team-a" not in done.stdout
    done = run_cli("reconcile", "--config", str(config), "--binding", "team-c", "--once")
    assert done.returncode == 1 and "no repo binding 'team-c'" in done.stderr
    assert "Traceback" not in done.stderr


def test_reconcile_closes_the_backends_it_built(manifest_repo: ManifestRepo, tmp_path: Path,
                                                monkeypatch, capsys) -> None:
    import nodus_gitops.wiring

    built: list[FakeProvider] = []

    def fake_backend(name: str, settings: dict, state_dir: Path) -> FakeProvider:
        built.append(FakeProvider())
        return built[-1]

    monkeypatch.setattr(nodus_gitops.wiring, "build_backend", fake_backend)
    manifest_repo.write("a.yaml", JOB.format(name="a", cap="0.25"))
    manifest_repo.commit("a")
    manifest_repo.push()
    assert main(["reconcile", "--repo", manifest_repo.push_url, "--branch", "main",
                 "--state-dir", str(tmp_path / "s"), "--once"]) == 0, capsys.readouterr()
    assert built and all(p.closed for p in built)
