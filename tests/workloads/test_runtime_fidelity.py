"""The seeds' run-time rules for Pipelines and Sweeps on the local backend, each with
real runs: spec.state reaches every unfinished stage and cell (those never started
included), a child's own TTL never changes its parent's view of it, a composite's TTL
removes it with its Jobs, the shared cost cap holds while things run, and a Sweep
template's metadata reaches its cell Jobs."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from nodus_gitops.floor.identity import (
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    LABEL_SWEEP,
    MANAGED_BY_VALUE,
    ResourceKey,
)
from nodus_gitops.floor.phases import is_terminal
from nodus_gitops.providers.base import Observed, Workload
from nodus_gitops.providers.local.config import LocalConfig, RateCard
from nodus_gitops.providers.local.provider import LocalProvider
from nodus_gitops.workloads import CONTROLLERS, CompositeProvider

from tests.fixtures_git import ManifestRepo
from tests.workloads.test_workloads_local import PY, Cluster, pipeline, stage, sweep

SLEEP = "import time; time.sleep(30)"


@pytest.fixture
def cluster(manifest_repo: ManifestRepo, tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(manifest_repo, tmp_path)
    yield c
    composite = c.service.syncs["w"].applier.provider.inner  # under the metrics wrapper
    for kind in CONTROLLERS:  # stops what still runs and unmounts the Jobs' files
        for key in composite.records.keys("p", kind):
            composite.delete(key)


def with_state(body: str, state: str) -> str:
    return body.replace("spec:\n", f"spec:\n  state: {state}\n", 1)


def runs(tmp_path: Path, prefix: str) -> list[str]:
    """The Jobs the local backend was asked to run, by name."""
    return sorted(p.name for p in (tmp_path / "state" / "local" / "p").glob(f"{prefix}-*"))


def cell_phases(record) -> list[str]:
    return [c["phase"] for c in record.status["cells"]]


def stage_phases(record) -> dict[str, str]:
    return {s["name"]: s["phase"] for s in record.status["stages"]}


# -- 1. spec.state applies to every unfinished cell and stage --------------------------

def test_cancel_reaches_cells_never_started(cluster: Cluster, tmp_path: Path) -> None:
    body = sweep("six", SLEEP, "  maxParallel: 2\n", '["1", "2", "3", "4", "5", "6"]')
    cluster.push({"s.yaml": body})
    cluster.wait("Sweep", "six", lambda r: cell_phases(r).count("Running") == 2)
    cluster.push({"s.yaml": with_state(body, "Cancelled")})
    done = cluster.wait("Sweep", "six", timeout=30)
    assert done.phase == "Cancelled", done.status
    assert cell_phases(done) == ["Cancelled"] * 6
    assert done.status["progress"] == "6/6"
    assert runs(tmp_path, "six") == ["six-0", "six-1"]  # the cancel started nothing


def test_suspend_holds_every_unfinished_cell_and_resume_finishes_them(
        cluster: Cluster, tmp_path: Path) -> None:
    body = sweep("pause", "import time; time.sleep(2)", "  maxParallel: 2\n",
                 '["1", "2", "3"]')
    cluster.push({"s.yaml": body})
    cluster.wait("Sweep", "pause", lambda r: cell_phases(r).count("Running") == 2)
    cluster.push({"s.yaml": with_state(body, "Suspended")})
    held = cluster.wait("Sweep", "pause", lambda r: r.phase == "Suspended"
                        and cell_phases(r)[:2] == ["Suspended"] * 2, timeout=20)
    assert held.reason is None  # the user's suspend, not the cap
    time.sleep(3)  # longer than a cell runs: nothing may finish or start meanwhile
    cluster.service.refresh_all()
    held = cluster.get("Sweep", "pause")
    assert (held.phase, cell_phases(held)) == ("Suspended", ["Suspended", "Suspended",
                                                             "Pending"])
    assert runs(tmp_path, "pause") == ["pause-0", "pause-1"]
    cluster.push({"s.yaml": body})
    done = cluster.wait("Sweep", "pause", timeout=60)
    assert done.phase == "Succeeded", done.status
    assert cell_phases(done) == ["Succeeded"] * 3


CHAIN = [stage("a", SLEEP), stage("b", "pass", ("a",)), stage("c", "pass", ("b",)),
         stage("d", "pass")]


@pytest.mark.parametrize("policy", ["RunIndependent", "FailFast"])
def test_cancel_reaches_every_stage_that_has_not_finished(cluster: Cluster, tmp_path: Path,
                                                          policy: str) -> None:
    body = pipeline("chain", CHAIN, f"  failurePolicy: {policy}\n")
    cluster.push({"p.yaml": body})
    cluster.wait("Pipeline", "chain", lambda r: stage_phases(r)["d"] == "Succeeded"
                 and stage_phases(r)["a"] == "Running")
    cluster.push({"p.yaml": with_state(body, "Cancelled")})
    done = cluster.wait("Pipeline", "chain", timeout=30)
    assert (done.phase, done.reason) == ("Cancelled", None), done.status
    # A user's cancel is no stage failure: what never started is Cancelled, not Skipped.
    assert stage_phases(done) == {"a": "Cancelled", "b": "Cancelled", "c": "Cancelled",
                                  "d": "Succeeded"}
    assert runs(tmp_path, "chain") == ["chain-a", "chain-d"]


def test_cancel_reaches_independent_stages_waiting_for_max_parallel(
        cluster: Cluster, tmp_path: Path) -> None:
    stages = [stage("x", SLEEP), stage("y", SLEEP), stage("z", SLEEP)]
    body = pipeline("wide", stages, "  failurePolicy: RunIndependent\n  maxParallel: 1\n")
    cluster.push({"p.yaml": body})
    cluster.wait("Pipeline", "wide", lambda r: stage_phases(r)["x"] == "Running")
    cluster.push({"p.yaml": with_state(body, "Cancelled")})
    done = cluster.wait("Pipeline", "wide", timeout=30)
    assert done.phase == "Cancelled", done.status
    assert stage_phases(done) == {"x": "Cancelled", "y": "Cancelled", "z": "Cancelled"}
    assert done.status["progress"] == "0/3"
    assert runs(tmp_path, "wide") == ["wide-x"]


def test_suspend_and_resume_a_pipeline(cluster: Cluster) -> None:
    stages = [stage("a", "import time; time.sleep(2)"), stage("b", "pass", ("a",))]
    body = pipeline("held", stages)
    cluster.push({"p.yaml": body})
    cluster.wait("Pipeline", "held", lambda r: stage_phases(r)["a"] == "Running")
    cluster.push({"p.yaml": with_state(body, "Suspended")})
    held = cluster.wait("Pipeline", "held", lambda r: r.phase == "Suspended"
                        and stage_phases(r)["a"] == "Suspended", timeout=20)
    time.sleep(3)
    cluster.service.refresh_all()
    held = cluster.get("Pipeline", "held")
    assert held.phase == "Suspended"
    assert stage_phases(held) == {"a": "Suspended", "b": "Pending"}
    cluster.push({"p.yaml": body})
    done = cluster.wait("Pipeline", "held", timeout=60)
    assert done.phase == "Succeeded", done.status


# -- 3. a stage's own TTL never changes the Pipeline's view of it ---------------------

def test_a_stage_expired_by_its_own_ttl_still_counts_as_succeeded(
        cluster: Cluster, tmp_path: Path) -> None:
    stages = [stage("first", "pass", (), "        ttlSecondsAfterFinished: 1\n"),
              stage("second", "import time; time.sleep(4)", ("first",))]
    cluster.push({"p.yaml": pipeline("ttl", stages)})
    done = cluster.wait("Pipeline", "ttl", timeout=60)
    assert done.phase == "Succeeded", done.status
    assert done.status["progress"] == "2/2"
    assert stage_phases(done) == {"first": "Succeeded", "second": "Succeeded"}
    first = next(s for s in done.status["stages"] if s["name"] == "first")
    assert first["completionTime"] and first["startTime"]
    assert runs(tmp_path, "ttl") == ["ttl-second"]  # its own TTL removed the first Job


def test_a_stage_whose_outputs_a_later_stage_reads_outlives_its_ttl(
        cluster: Cluster, tmp_path: Path) -> None:
    write = ("import os; d=os.environ['NODUS_OUTPUTS_DIR']+'/data'; os.makedirs(d); "
             "open(d+'/x.txt','w').write('42')")
    read = "import os; assert open(os.environ['NODUS_INPUT_DATA']+'/x.txt').read()=='42'"
    make = stage("make", write, (), "        outputs: [{name: data, path: /nodus/outputs/data}]\n"
                 "        ttlSecondsAfterFinished: 1\n")
    pause = stage("pause", "import time; time.sleep(3)", ("make",))
    use = stage("use", read, ("make", "pause"), "        backoffLimit: 0\n").replace(
        "      template:", "      inputs: [{name: data, fromStage: make, output: data}]\n"
        "      template:")
    cluster.push({"p.yaml": pipeline("reads", [make, pause, use])})
    done = cluster.wait("Pipeline", "reads", timeout=60)
    # use started two seconds after make's TTL and still found make's outputs
    assert done.phase == "Succeeded", done.status
    composite = cluster.service.syncs["w"].applier.provider.inner
    composite.expire_finished()  # the finished Pipeline's children: make's TTL has passed
    assert runs(tmp_path, "reads") == ["reads-pause", "reads-use"]


# -- 5. a Sweep template's metadata reaches its cell Jobs -------------------------------

TEMPLATE_METADATA = f"""apiVersion: nodus.dev/v1
kind: Sweep
metadata:
  name: meta
spec:
  matrix:
    params:
      N: ["1", "2"]
  template:
    kind: Job
    metadata:
      labels:
        team: vision
        {LABEL_SWEEP}: someone-else
      annotations:
        example.com/owner: ada
    spec:
      command: [{PY}, -c, pass]
"""


def test_template_metadata_reaches_the_cell_jobs(cluster: Cluster, tmp_path: Path) -> None:
    cluster.push({"s.yaml": TEMPLATE_METADATA})
    done = cluster.wait("Sweep", "meta")
    assert done.phase == "Succeeded", done.status
    for name in ("meta-0", "meta-1"):
        doc = json.loads((tmp_path / "state" / "local" / "p" / name / "manifest.json")
                         .read_text())
        meta = doc["manifest"]["metadata"]
        assert meta["labels"]["team"] == "vision"
        assert meta["labels"][LABEL_SWEEP] == "meta"  # the controller's own labels win
        assert meta["labels"][LABEL_MANAGED_BY] == MANAGED_BY_VALUE
        assert meta["annotations"]["example.com/owner"] == "ada"


# -- The controllers over a local backend directly (the clock and steps are the test's) --

PROJECT = "p"
LABELS = {LABEL_MANAGED_BY: MANAGED_BY_VALUE, LABEL_INSTANCE: "test"}


class Backend:
    """A CompositeProvider over a LocalProvider; `step()` is one read, as the service's
    status refresh makes."""

    def __init__(self, root: Path, rates: RateCard | None = None) -> None:
        config = LocalConfig(suspend_grace_seconds=2.0, detect_gpus=False, poll_seconds=0.05,
                             prestart_supervisor=False, rates=rates or RateCard())
        self.local = LocalProvider(root / "local", config)
        self.composite = CompositeProvider(self.local, root / "workloads")

    def create(self, kind: str, name: str, spec: dict[str, Any]) -> ResourceKey:
        key = ResourceKey(kind, PROJECT, name)
        manifest = {"apiVersion": "nodus.dev/v1", "kind": kind,
                    "metadata": {"name": name, "labels": LABELS}, "spec": spec}
        self.composite.create(Workload(key, manifest, "h"), f"{name}-1")
        return key

    def wait(self, key: ResourceKey, until: Callable[[Observed], bool] | None = None,
             timeout: float = 60.0, every: float = 0.2) -> Observed:
        until = until or (lambda o: is_terminal(o.phase))
        deadline = time.monotonic() + timeout
        while True:
            o = self.composite.get(key)
            if o is not None and until(o):
                return o
            if time.monotonic() > deadline:
                raise AssertionError(f"{key} stuck: {o}")
            time.sleep(every)

    def job(self, name: str) -> Observed | None:
        return self.local.get(ResourceKey("Job", PROJECT, name))

    def close(self) -> None:
        for kind in CONTROLLERS:
            for key in self.composite.records.keys(PROJECT, kind):
                self.composite.delete(key)


@pytest.fixture
def backend_factory(tmp_path: Path) -> Iterator[Callable[..., Backend]]:
    made: list[Backend] = []

    def make(rates: RateCard | None = None) -> Backend:
        b = Backend(tmp_path / f"b{len(made)}", rates)
        made.append(b)
        return b

    yield make
    for b in made:
        b.close()


def cells_spec(code: str, n: int, **extra: Any) -> dict[str, Any]:
    template = extra.pop("template", {})
    return {"matrix": {"params": {"N": [str(i) for i in range(n)]}},
            "template": {"kind": "Job", "spec": {"command": [sys.executable, "-c", code],
                                                 **template}}, **extra}


# -- 2. ttlSecondsAfterFinished deletes a finished Pipeline or Sweep ---------------------

def test_a_finished_sweep_is_deleted_with_its_cells_when_its_ttl_passed(
        backend_factory) -> None:
    b = backend_factory()
    key = b.create("Sweep", "brief", cells_spec("pass", 2, ttlSecondsAfterFinished=2))
    done = b.wait(key)
    assert done.phase == "Succeeded"
    assert b.composite.expire_finished() == []  # not yet: kept for two seconds
    assert b.job("brief-0") is not None
    time.sleep(2.5)  # nobody reads the Sweep meanwhile
    assert b.composite.expire_finished() == [key]
    assert b.composite.get(key) is None
    assert b.job("brief-0") is None and b.job("brief-1") is None
    assert b.composite.list_owned(PROJECT, "test") == []
    # The same create again (a journal resolving its intent) is the finished Sweep, not a
    # second run.
    manifest = {"apiVersion": "nodus.dev/v1", "kind": "Sweep",
                "metadata": {"name": "brief", "labels": LABELS},
                "spec": cells_spec("pass", 2, ttlSecondsAfterFinished=2)}
    again = b.composite.create(Workload(key, manifest, "h"), "brief-1")
    assert again.phase == "Succeeded"
    assert b.job("brief-0") is None


def test_a_pipeline_ttl_counts_from_its_last_stage(backend_factory) -> None:
    b = backend_factory()
    spec = {"ttlSecondsAfterFinished": 1,
            "stages": [{"name": "only", "template": {"command": [sys.executable, "-c",
                                                                 "pass"]}}]}
    key = b.create("Pipeline", "gone", spec)
    assert b.wait(key).phase == "Succeeded"
    deadline = time.monotonic() + 10
    while b.composite.expire_finished() != [key]:
        assert time.monotonic() < deadline, "the Pipeline's TTL never fired"
        time.sleep(0.2)
    assert b.composite.get(key) is None and b.job("gone-only") is None


# -- 4. the shared cost cap holds while the stages and cells run ------------------------

DIME = RateCard(cpu_core_hour=360.0, memory_gib_hour=0.0)  # $0.10 a second a core


def test_running_cells_suspend_at_the_sweeps_cap(backend_factory) -> None:
    b = backend_factory(DIME)
    key = b.create("Sweep", "spend", cells_spec("import time; time.sleep(5)", 4,
                                                maxCostUSD="0.30", maxParallel=2))
    # Read as rarely as the service does: the cap must hold between reads.
    held = b.wait(key, lambda o: o.phase == "Suspended", timeout=30, every=2.0)
    assert held.reason == "MaxCostReached"
    time.sleep(1.0)
    held = b.composite.get(key)
    assert Decimal(held.cost_usd) <= Decimal("0.33"), held.cost_usd  # a Job's own precision
    assert [c["phase"] for c in held.status["cells"]][2:] == ["Pending", "Pending"]


def test_no_cell_starts_whose_estimate_passes_what_is_left(backend_factory) -> None:
    b = backend_factory(RateCard(cpu_core_hour=3600.0, memory_gib_hour=0.0))  # $1 a second
    # Each cell is expected to cost $0.60 (expectedDuration) and costs about $0.50.
    spec = cells_spec("import time; time.sleep(0.5)", 2, maxCostUSD="1.00", maxParallel=1,
                      template={"expectedDuration": "0.6s"})
    key = b.create("Sweep", "fits", spec)
    held = b.wait(key, lambda o: o.phase == "Suspended"
                  or o.status["cells"][0]["phase"] == "Succeeded" and o.status["cells"][1][
                      "phase"] != "Pending", timeout=30)
    assert (held.phase, held.reason) == ("Suspended", "MaxCostReached"), held.status
    assert [c["phase"] for c in held.status["cells"]] == ["Succeeded", "Pending"]
    assert b.job("fits-1") is None


def test_running_stages_suspend_at_the_pipelines_cap_and_spend_stays_near_it(
        backend_factory) -> None:
    b = backend_factory(DIME)
    sleeper = {"command": [sys.executable, "-c", "import time; time.sleep(5)"]}
    spec = {"maxCostUSD": "0.30", "failurePolicy": "RunIndependent", "maxParallel": 2,
            "stages": [{"name": n, "template": dict(sleeper)} for n in ("a", "b", "c", "d")]}
    key = b.create("Pipeline", "spend", spec)
    # Read as rarely as the service does: the cap must hold between reads.
    held = b.wait(key, lambda o: o.phase == "Suspended", timeout=30, every=2.0)
    assert held.reason == "MaxCostReached"
    time.sleep(1.0)
    held = b.composite.get(key)
    assert Decimal(held.cost_usd) <= Decimal("0.33"), held.cost_usd  # a Job's own precision
    assert b.job("spend-c") is None and b.job("spend-d") is None  # never started


def test_no_stage_starts_whose_estimate_passes_what_is_left(backend_factory) -> None:
    b = backend_factory(RateCard(cpu_core_hour=3600.0, memory_gib_hour=0.0))  # $1 a second
    # Each stage is expected to cost $0.60 (expectedDuration) and costs about $0.50.
    template = {"command": [sys.executable, "-c", "import time; time.sleep(0.5)"],
                "expectedDuration": "0.6s"}
    spec = {"maxCostUSD": "1.00", "stages": [
        {"name": "one", "template": dict(template)},
        {"name": "two", "dependsOn": ["one"], "template": dict(template)}]}
    key = b.create("Pipeline", "fits", spec)
    held = b.wait(key, lambda o: o.phase in ("Suspended", "Succeeded", "Failed"), timeout=30)
    assert (held.phase, held.reason) == ("Suspended", "MaxCostReached"), held.status
    assert b.job("fits-two") is None


def test_a_pipeline_and_a_sweep_held_by_the_projects_budget_say_so(backend_factory) -> None:
    """The backend suspends a budget-held project's stage and cell Jobs (BudgetExceeded);
    their Pipeline and Sweep show the hold too, not a bare Queued; lifting it resumes."""
    b = backend_factory()
    sleepy = {"command": [sys.executable, "-c", "import time; time.sleep(3)"]}
    pipe = b.create("Pipeline", "held-pipe", {"stages": [{"name": "only", "template": sleepy}]})
    swp = b.create("Sweep", "held-sweep", cells_spec("import time; time.sleep(3)", 1))
    for key in (pipe, swp):
        b.wait(key, lambda o: o.phase == "Running")
    b.local.hold_budget(PROJECT, True, "project p spent $5.00 of its $5.00 budget")
    for key, what in ((pipe, "stage only"), (swp, "cell 0")):
        held = b.wait(key, lambda o: o.phase == "Suspended", timeout=30)
        assert (held.phase, held.reason) == ("Suspended", "BudgetExceeded"), held.status
        assert what in held.message
    b.local.hold_budget(PROJECT, False, "")
    for key in (pipe, swp):
        assert b.wait(key, timeout=60).phase == "Succeeded"
