"""Per-project budgets on the local backend, with real runs: at the budget a project's
running Jobs save their state and become Suspended with BudgetExceeded (stopped by
status.stopByTime), its new Jobs wait Suspended instead of starting, and all of them
resume on their own when the budget is raised or its period rolls over; a project
without a budget is untouched."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from nodus_gitops.backends import build_backend
from nodus_gitops.config import Binding, Settings
from nodus_gitops.floor.budgets import Budget, Period
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.floor.phases import FIXES
from nodus_gitops.output import describe
from nodus_gitops.providers.base import Workload
from nodus_gitops.service import Service
from nodus_gitops.state.store import Store
from nodus_gitops.wiring import build_service

from tests.fixtures_git import ManifestRepo
from tests.providers.local.conftest import PROJECT, manifest
from tests.providers.local.test_lifecycle import checkpointed, started

HELD = "project team-a spent $1 of its budget of $1 per month (since 2026-12-01)"


def test_a_held_project_suspends_its_running_job_and_its_new_job_waits(local):
    k = local.create("train", checkpointed(60))
    other = ResourceKey("Job", "team-b", "free")
    local.keys.append(other)
    local.provider.create(Workload(other, manifest("free", checkpointed(20)), "h"), "free-1")
    started(local, k)

    local.provider.hold_budget(PROJECT, True, HELD)
    held = local.wait(k, "Suspended")
    assert (held.reason, held.message, held.fix) == ("BudgetExceeded", HELD,
                                                     FIXES["BudgetExceeded"])
    saved = int((local.run(k).state_for(0) / "step").read_text())
    assert 0 < saved < 60
    stop_by = datetime.fromisoformat(held.status["stopByTime"].replace("Z", "+00:00"))
    cond = next(c for c in held.status["conditions"] if c["type"] == "Suspended")
    assert cond["reason"] == "BudgetExceeded"
    assert datetime.fromisoformat(cond["lastTransitionTime"].replace("Z", "+00:00")) <= stop_by

    late = local.create("late", "print('late ran')")
    waiting = local.wait(late, "Suspended")
    assert (waiting.reason, waiting.status["attempts"]) == ("BudgetExceeded", 0)
    assert local.wait(other).phase == "Succeeded"  # team-b has no hold: it ran meanwhile
    time.sleep(0.5)
    assert local.provider.get(k).phase == local.provider.get(late).phase == "Suspended"

    local.provider.hold_budget(PROJECT, False, "")
    done = local.wait(k)
    assert done.phase == "Succeeded" and local.log(k) == f"start {saved}"
    assert "stopByTime" not in done.status
    assert local.wait(late).phase == "Succeeded" and local.log(late) == "late ran"


def test_lifting_a_hold_nobody_placed_writes_nothing(local):
    local.provider.hold_budget("team-c", False, "")
    assert not (local.root / "team-c").exists()


# -- the service holds projects to the config's budgets ------------------------------


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


class Reconciler:
    """A manifests repo with a project per folder (p budgeted, q not), the store and a
    service on the local backend at $1/s a core, whose clock the test moves."""

    def __init__(self, repo: ManifestRepo, tmp: Path, budgets: dict[str, Budget]) -> None:
        self.repo, self.tmp, self.store = repo, tmp, Store.open(None, tmp / "state")
        self.clock = Clock(datetime(2026, 12, 15, 12, 0, tzinfo=UTC))
        self.service = self.start(budgets)

    def start(self, budgets: dict[str, Budget]) -> Service:
        """A service (re)started with `budgets` in its config."""
        settings = {"type": "local", "prestartSupervisor": False, "suspendGraceSeconds": 2,
                    "detectGpus": False, "rates": {"cpuCoreHour": 3600.0}}
        state = self.tmp / "state"
        bindings = (Binding(id="p", url=self.repo.push_url, path="p", project="p",
                            budget=budgets.get("p")),
                    Binding(id="q", url=self.repo.push_url, path="q", project="q"))
        self.service = build_service(
            Settings(state_dir=state, bindings=bindings, budgets=budgets), self.store,
            provider_factory=lambda name: build_backend(name, settings, state),
            clock=self.clock)
        return self.service

    def push(self, files: dict[str, str]) -> None:
        for path, text in files.items():
            self.repo.write(path, text)
        self.repo.commit("change")
        self.repo.push()
        for binding in ("p", "q"):
            report = self.service.reconcile(binding)
            assert report is not None and report.result in ("applied", "noop"), report

    def wait(self, project: str, name: str, until, timeout: float = 60):
        deadline = time.monotonic() + timeout
        while True:
            self.service.refresh_all()
            record = self.store.get_resource(ResourceKey("Job", project, name))
            if record is not None and until(record):
                return record
            if time.monotonic() > deadline:
                raise AssertionError(f"{project}/{name} stuck: {record and record.phase} "
                                     f"{record and json.dumps(record.status)[:600]}")
            time.sleep(0.2)


def job(name: str, code: str) -> str:
    return (f"apiVersion: nodus.dev/v1\nkind: Job\nmetadata:\n  name: {name}\nspec:\n"
            f"  command: [python3, -c, {json.dumps(code)}]\n")


def suspended_for_budget(r) -> bool:
    return r.phase == "Suspended" and r.reason == "BudgetExceeded"


@pytest.fixture
def reconciler(manifest_repo: ManifestRepo, tmp_path: Path) -> Reconciler:
    r = Reconciler(manifest_repo, tmp_path, {"p": Budget("p", Decimal("0.5"), Period.MONTH)})
    yield r
    r.service.close()


def test_at_the_budget_the_project_suspends_and_raising_it_resumes(reconciler):
    reconciler.push({"p/train.yaml": job("train", checkpointed(200)),
                     "q/other.yaml": job("other", checkpointed(60))})
    held = reconciler.wait("p", "train", suspended_for_budget)
    assert held.message.startswith("project p spent $")
    assert "of its budget of $0.5 per month (since 2026-12-01)" in held.message
    assert Decimal(held.cost_usd) >= Decimal("0.5")
    text = describe(held, reconciler.store.list_events(held.key))
    assert "Reason:      BudgetExceeded" in text and f"Message:     {held.message}" in text
    assert "stopByTime:" in text

    reconciler.push({"p/late.yaml": job("late", "print('late ran')")})
    waiting = reconciler.wait("p", "late", suspended_for_budget)
    assert waiting.status["attempts"] == 0
    assert reconciler.wait("q", "other", lambda r: r.phase == "Succeeded").reason is None

    reconciler.start({"p": Budget("p", Decimal("1000"), Period.MONTH)})  # the config raised
    assert reconciler.wait("p", "train", lambda r: r.phase == "Succeeded").reason is None
    assert reconciler.wait("p", "late", lambda r: r.phase == "Succeeded").reason is None


def test_the_next_period_resumes_the_project(reconciler):
    reconciler.push({"p/train.yaml": job("train", checkpointed(200)),
                     "q/other.yaml": job("other", "pass")})
    reconciler.wait("p", "train", suspended_for_budget)
    time.sleep(1)
    assert reconciler.wait("p", "train", lambda r: True).phase == "Suspended"
    reconciler.clock.now = datetime(2027, 1, 1, 0, 0, 5, tzinfo=UTC)  # a new month
    resumed = reconciler.wait("p", "train", lambda r: r.phase in ("Queued", "Running"))
    assert resumed.reason is None
