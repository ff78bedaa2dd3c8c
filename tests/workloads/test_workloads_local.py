"""Pipelines and Sweeps on the local backend, reconciled from real commits: every stage
and cell is a real process."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from nodus_gitops.backends import build_backend as build_provider
from nodus_gitops.composite import sweep_cells
from nodus_gitops.config import Binding, Settings
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.floor.phases import is_terminal
from nodus_gitops.service import Service
from nodus_gitops.state.store import Store
from nodus_gitops.wiring import build_service

from tests.fixtures_git import ManifestRepo

PY = "python3"


class Cluster:
    """A manifests repo, the state store and a service on the local backend."""

    def __init__(self, repo: ManifestRepo, tmp: Path, rates: dict | None = None) -> None:
        self.repo = repo
        self.tmp = tmp
        self.rates = rates
        self.store = Store.open(None, tmp / "state")
        self.service = self._service()

    def _service(self) -> Service:
        settings = {"type": "local", "prestartSupervisor": False, "suspendGraceSeconds": 2}
        if self.rates:
            settings["rates"] = self.rates
        binding = Binding(id="w", url=self.repo.push_url, project="p")
        state = self.tmp / "state"
        return build_service(Settings(state_dir=state, bindings=(binding,)), self.store,
                       provider_factory=lambda name: build_provider(name, settings, state))

    def restart(self) -> None:
        """A new reconciler process over the same state (providers, controllers, views)."""
        self.service = self._service()

    def push(self, files: dict[str, str]) -> None:
        for path, text in files.items():
            self.repo.write(path, text)
        self.repo.commit("change")
        self.repo.push()
        report = self.service.reconcile("w")
        assert report is not None and report.result in ("applied", "noop"), (
            report and (report.result, report.message, report.problems))

    def get(self, kind: str, name: str):
        return self.store.get_resource(ResourceKey(kind, "p", name))

    def wait(self, kind: str, name: str, until=None, timeout: float = 60):
        until = until or (lambda r: is_terminal(r.phase))
        deadline = time.monotonic() + timeout
        while True:
            self.service.refresh_all()
            record = self.get(kind, name)
            if record is not None and until(record):
                return record
            if time.monotonic() > deadline:
                raise AssertionError(f"{kind}/{name} stuck: {record and record.phase} "
                                     f"{record and json.dumps(record.status)[:400]}")
            time.sleep(0.2)


@pytest.fixture
def cluster(manifest_repo: ManifestRepo, tmp_path: Path) -> Cluster:
    return Cluster(manifest_repo, tmp_path)


def stage(name: str, code: str, deps: tuple[str, ...] = (), extra: str = "") -> str:
    dep = f"      dependsOn: [{', '.join(deps)}]\n" if deps else ""
    return (f"    - name: {name}\n{dep}      template:\n"
            f"        command: [{PY}, -c, {json.dumps(code)}]\n{extra}")


def pipeline(name: str, stages: list[str], spec: str = "") -> str:
    return (f"apiVersion: nodus.dev/v1\nkind: Pipeline\nmetadata:\n  name: {name}\nspec:\n"
            f"{spec}  stages:\n" + "".join(stages))


DIAMOND = [
    stage("prepare", "pass"),
    stage("left", "import sys; sys.exit(3)", ("prepare",), "        backoffLimit: 0\n"),
    stage("right", "import time; time.sleep(3)", ("prepare",)),
    stage("join", "pass", ("left", "right")),
]


def phases(record) -> dict[str, str]:
    return {s["name"]: s["phase"] for s in record.status["stages"]}


def test_fail_fast_cancels_running_and_skips_the_rest(cluster: Cluster) -> None:
    cluster.push({"p.yaml": pipeline("diamond", DIAMOND, "  failurePolicy: FailFast\n")})
    done = cluster.wait("Pipeline", "diamond")
    assert (done.phase, done.reason) == ("Failed", "StageFailed")
    assert "left" in done.message
    assert phases(done) == {"prepare": "Succeeded", "left": "Failed", "right": "Cancelled",
                            "join": "Skipped"}
    left = next(s for s in done.status["stages"] if s["name"] == "left")
    assert left["reason"] == "BackoffLimitExceeded"  # each stage keeps its own reason


def test_run_independent_lets_unrelated_stages_finish(cluster: Cluster) -> None:
    cluster.push({"p.yaml": pipeline("diamond", DIAMOND, "  failurePolicy: RunIndependent\n")})
    done = cluster.wait("Pipeline", "diamond")
    assert (done.phase, done.reason) == ("Failed", "StageFailed")
    assert phases(done) == {"prepare": "Succeeded", "left": "Failed", "right": "Succeeded",
                            "join": "Skipped"}


def test_input_hand_off_and_parallel_ready_stages(cluster: Cluster) -> None:
    write = ("import os; d=os.environ['NODUS_OUTPUTS_DIR']+'/data'; os.makedirs(d); "
             "open(d+'/x.txt','w').write('42')")
    read = "import os; assert open(os.environ['NODUS_INPUT_DATA']+'/x.txt').read()=='42'"
    outputs = "        outputs: [{name: data, path: /nodus/outputs/data}]\n"
    inputs = "      inputs: [{name: data, fromStage: make, output: data}]\n"
    stages = [stage("make", write, (), outputs),
              stage("use", read, ("make",)).replace("      template:", inputs + "      template:")]
    cluster.push({"p.yaml": pipeline("handoff", stages)})
    done = cluster.wait("Pipeline", "handoff")
    assert done.phase == "Succeeded", done.status
    assert done.status["progress"] == "2/2"


def test_pipeline_cost_cap_then_raised_in_git(manifest_repo, tmp_path) -> None:
    cluster = Cluster(manifest_repo, tmp_path, rates={"cpuCoreHour": 3600.0})  # $1/s a core
    slow = [stage("one", "import time; time.sleep(4)"), stage("two", "pass", ("one",))]
    cluster.push({"p.yaml": pipeline("capped", slow, '  maxCostUSD: "0.50"\n')})
    held = cluster.wait("Pipeline", "capped", lambda r: r.phase == "Suspended")
    assert held.reason == "MaxCostReached"
    assert phases(held)["two"] == "Pending"  # no new stage starts
    cluster.push({"p.yaml": pipeline("capped", slow, '  maxCostUSD: "100.00"\n')})
    done = cluster.wait("Pipeline", "capped")
    assert done.phase == "Succeeded", (done.reason, done.status)


def sweep(name: str, code: str, spec: str = "", params: str = '["1", "2"]') -> str:
    return (f"apiVersion: nodus.dev/v1\nkind: Sweep\nmetadata:\n  name: {name}\nspec:\n{spec}"
            f"  matrix:\n    params:\n      N: {params}\n  template:\n    kind: Job\n"
            f"    spec:\n      command: [{PY}, -c, {json.dumps(code)}]\n")


UNITS = ("import os, time, nodus\nn = int(os.environ['NODUS_PARAM_N'])\n"
         "for i in range(5 * n):\n    nodus.log.unit(str(i), 1)\n")


def test_sweep_cells_best_and_failed_cells(cluster: Cluster) -> None:
    code = UNITS + "if n == 3: raise SystemExit(1)\n"
    cluster.push({"s.yaml": sweep("grid", code, "  repetitions: 2\n",
                                  '["1", "2", "3"]').replace(
        "      command:", "      backoffLimit: 0\n      command:")})
    done = cluster.wait("Sweep", "grid")
    assert (done.phase, done.reason) == ("Failed", "CellsFailed")
    cells = done.status["cells"]
    assert [c["index"] for c in cells] == list(range(6))
    assert [c["params"]["N"] for c in cells] == ["1", "1", "2", "2", "3", "3"]
    assert [c["phase"] for c in cells] == ["Succeeded"] * 4 + ["Failed"] * 2
    assert all(c["unitsPerSecond"] for c in cells[:4])
    assert done.status["best"]["byThroughput"] in (2, 3)  # the N=2 cells report more units
    assert "byCost" in done.status["best"]
    assert "grid-4" in done.message


def test_sweep_cost_cap_and_max_parallel(manifest_repo, tmp_path) -> None:
    cluster = Cluster(manifest_repo, tmp_path, rates={"cpuCoreHour": 3600.0})
    code = "import time; time.sleep(3)"
    cluster.push({"s.yaml": sweep("capped", code, '  maxCostUSD: "0.50"\n  maxParallel: 1\n')})
    held = cluster.wait("Sweep", "capped", lambda r: r.phase == "Suspended")
    assert held.reason == "MaxCostReached"
    cells = held.status["cells"]
    assert cells[1]["phase"] == "Pending"  # maxParallel 1, and no new cell at the cap
    cluster.push({"s.yaml": sweep("capped", code, '  maxCostUSD: "100.00"\n  maxParallel: 1\n')})
    done = cluster.wait("Sweep", "capped", timeout=90)
    assert done.phase == "Succeeded", done.status


def test_reconciler_restart_in_the_middle_of_a_sweep(cluster: Cluster, tmp_path: Path) -> None:
    code = "import time; time.sleep(1)"
    cluster.push({"s.yaml": sweep("steady", code, "  maxParallel: 1\n", '["1", "2", "3"]')})
    cluster.wait("Sweep", "steady", lambda r: any(c["phase"] == "Running"
                                                  for c in r.status.get("cells", [])))
    cluster.restart()
    done = cluster.wait("Sweep", "steady")
    assert done.phase == "Succeeded"
    runs = sorted((tmp_path / "state" / "local" / "p").glob("steady-*"))
    assert [r.name for r in runs] == ["steady-0", "steady-1", "steady-2"]  # each cell once
    for run in runs:
        status = json.loads((run / "status.json").read_text())
        assert status["attempts"] == 1


def test_spec_state_reaches_every_unfinished_cell_and_delete_removes_them(
        cluster: Cluster, tmp_path: Path) -> None:
    code = "import time; time.sleep(30)"
    body = sweep("held", code, "  maxParallel: 2\n")
    cluster.push({"s.yaml": body})
    cluster.wait("Sweep", "held", lambda r: r.phase == "Running")
    cluster.push({"s.yaml": body.replace("spec:\n", "spec:\n  state: Cancelled\n", 1)})
    done = cluster.wait("Sweep", "held")
    assert done.phase == "Cancelled"
    assert {c["phase"] for c in done.status["cells"]} == {"Cancelled"}
    cluster.repo.remove("s.yaml")
    cluster.repo.write("other.yaml", sweep("other", "pass"))
    cluster.repo.commit("replace")
    cluster.repo.push()
    cluster.service.reconcile("w")
    assert cluster.get("Sweep", "held") is None
    assert not list((tmp_path / "state" / "local" / "p").glob("held-*"))


def test_cell_order_on_a_2x2x3x2_matrix() -> None:
    spec = {"matrix": {"gpu": ["L4", "A10"], "regions": ["us", "eu"],
                       "params": {"B": ["1", "2", "3"]}}, "repetitions": 2}
    cells = sweep_cells(spec)
    assert len(cells) == 24
    assert [(c.gpu, c.region, c.params["B"], c.repetition) for c in cells[:7]] == [
        ("L4", "us", "1", 0), ("L4", "us", "1", 1), ("L4", "us", "2", 0), ("L4", "us", "2", 1),
        ("L4", "us", "3", 0), ("L4", "us", "3", 1), ("L4", "eu", "1", 0)]
    assert (cells[12].gpu, cells[12].region, cells[12].params, cells[12].repetition) == (
        "A10", "us", {"B": "1"}, 0)
    assert [c.index for c in cells] == list(range(24))


def test_a_stage_own_lower_cap_holds_only_that_stage(manifest_repo, tmp_path) -> None:
    cluster = Cluster(manifest_repo, tmp_path, rates={"cpuCoreHour": 3600.0})  # $1/s a core
    stages = [stage("cheap", "import time; time.sleep(4)", (),
                    '        maxCostUSD: "0.30"\n'),
              stage("free", "import time; time.sleep(1)")]
    cluster.push({"p.yaml": pipeline("caps", stages, '  maxCostUSD: "50.00"\n')})
    held = cluster.wait("Pipeline", "caps", lambda r: {s["name"]: s.get("reason") for s in
                                                       r.status.get("stages", [])}.get(
        "cheap") == "MaxCostReached")
    assert held.phase != "Suspended" or held.reason != "MaxCostReached"  # not the pipeline's
    done_free = cluster.wait("Pipeline", "caps", lambda r: phases(r)["free"] == "Succeeded")
    assert phases(done_free)["cheap"] == "Suspended"


def test_get_prints_the_seeds_columns(cluster: Cluster) -> None:
    from nodus_gitops.output import resources_table

    cluster.push({"s.yaml": sweep("cols", UNITS)})
    done = cluster.wait("Sweep", "cols")
    table = resources_table([done])
    header, row = table.splitlines()
    assert header.split() == ["NAME", "PHASE", "CELLS", "COST", "BEST-COST", "AGE"]
    assert row.split()[:3] == ["cols", "Succeeded", "2/2"]
    assert row.split()[4] in ("0", "1")
