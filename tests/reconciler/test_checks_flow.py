"""Checks back on Git: a push gets its sync (and run) checks as git notes on the remote,
and a preview branch gets a plan check while nothing of it is applied."""

from __future__ import annotations

import json
from pathlib import Path

from nodus_gitops.config import Binding, Settings
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.providers.base import FakeProvider, Observed
from nodus_gitops.service import Service
from nodus_gitops.state.store import Store
from nodus_gitops.wiring import build_service

from tests.fixtures_git import ManifestRepo, git

JOB = ("apiVersion: nodus.dev/v1\nkind: Job\nmetadata:\n  name: {name}\nspec:\n"
       "  command: [python3, -c, pass]\n{extra}")


def notes(repo: ManifestRepo, sha: str) -> dict:
    text = git("--git-dir", repo.bare, "notes", "--ref=nodus", "show", sha)
    return json.loads(text)


def make_service(repo: ManifestRepo, tmp: Path, **binding) -> tuple[Service, FakeProvider]:
    store = Store.open(None, tmp)
    provider = FakeProvider()
    b = Binding(id="team", url=repo.push_url, branch="main", project="team", **binding)
    settings = Settings(state_dir=tmp / "state", instance="ci", bindings=(b,),
                        checks={"gitnotes": {"push": True}})
    return build_service(settings, store, provider_factory=lambda _n: provider), provider


def main_then_branch(repo: ManifestRepo, tmp: Path, branch: str, a_extra: str = "",
                     **binding) -> tuple[Service, FakeProvider]:
    """A service that applied Job a from main, and the work clone on a new `branch`."""
    service, provider = make_service(repo, tmp, **binding)
    repo.write("a.yaml", JOB.format(name="a", extra=a_extra))
    repo.commit("add a")
    repo.push()
    service.reconcile("team")
    git("checkout", "--quiet", "-b", branch, cwd=repo.work)
    return service, provider


def push_branch(repo: ManifestRepo, branch: str, files: dict[str, str], message: str) -> str:
    for path, text in files.items():
        repo.write(path, text)
    sha = repo.commit(message)
    git("push", "--quiet", "origin", branch, cwd=repo.work)
    return sha


def test_push_gets_sync_and_run_checks(manifest_repo: ManifestRepo, tmp_path: Path) -> None:
    service, provider = make_service(manifest_repo, tmp_path, check_workloads=True)
    manifest_repo.write("a.yaml", JOB.format(name="a", extra=""))
    sha = manifest_repo.commit("add a")
    manifest_repo.push()
    assert service.reconcile("team").result == "applied"
    checks = notes(manifest_repo, sha)
    assert checks["nodus/ci/sync"]["state"] == "success"
    assert "1 created" in checks["nodus/ci/sync"]["title"]
    assert checks["nodus/ci/run"]["state"] == "pending"
    # The Job finishes: the run check follows.
    key = ResourceKey("Job", "team", "a")
    provider.resources[key] = Observed(key, "fake-1", "Failed", reason="OOMKilled",
                                       fix="request more spec.resources.memory")
    service.refresh_all()
    run = notes(manifest_repo, sha)["nodus/ci/run"]
    assert run["state"] == "failure" and "Job/a" in run["title"]
    assert "OOMKilled" in run["summary"]

    # An invalid commit: a failure listing every problem with file and line.
    manifest_repo.write("bad.yaml", JOB.format(name="bad", extra="  timeout: 10x\n"))
    bad = manifest_repo.commit("bad")
    manifest_repo.push()
    assert service.reconcile("team").result == "invalid"
    sync = notes(manifest_repo, bad)["nodus/ci/sync"]
    assert sync["state"] == "failure"
    assert "bad.yaml:7" in sync["summary"] and "not a duration" in sync["summary"]
    assert sync["annotations"][0]["path"] == "bad.yaml"


def test_preview_branch_gets_a_plan_and_nothing_applies(manifest_repo: ManifestRepo,
                                                        tmp_path: Path) -> None:
    service, provider = main_then_branch(manifest_repo, tmp_path, "preview/tune",
                                         '  maxCostUSD: "1.00"\n',
                                         preview_branches=("preview/*",))
    # A branch that lowers a cap and adds a Job.
    preview = push_branch(manifest_repo, "preview/tune", {
        "a.yaml": JOB.format(name="a", extra='  maxCostUSD: "0.50"\n'),
        "b.yaml": JOB.format(name="b", extra="")}, "tune")
    service.reconcile("team")
    check = notes(manifest_repo, preview)["nodus/ci/plan"]
    assert check["state"] == "failure"  # the lowered cap is blocked
    assert "blocked" in check["title"]
    assert "| create | `Job/b` |" in check["summary"] and "cap can only be raised" in \
        check["summary"]
    assert set(k.name for k in provider.resources) == {"a"}  # nothing applied from it
    # The same SHA is not planned twice.
    calls = len(provider.calls)
    service.reconcile("team")
    assert len(provider.calls) == calls


def test_pull_request_preview_through_the_service(manifest_repo: ManifestRepo,
                                                  tmp_path: Path) -> None:
    service, provider = main_then_branch(manifest_repo, tmp_path, "feature")
    head = push_branch(manifest_repo, "feature", {"c.yaml": JOB.format(name="c", extra="")},
                       "add c")
    result, problems = service.syncs["team"].preview("feature", head)
    assert problems == [] and [a.key.name for a in result.actions] == ["c"]
    assert notes(manifest_repo, head)["nodus/ci/plan"]["state"] == "success"
    assert "c" not in {k.name for k in provider.resources}


def test_a_newer_push_to_a_pull_request_supersedes_the_older_plan(
        manifest_repo: ManifestRepo, tmp_path: Path) -> None:
    import threading
    import time

    service, provider = main_then_branch(manifest_repo, tmp_path, "feature")
    old = push_branch(manifest_repo, "feature", {"b.yaml": JOB.format(name="b", extra="")}, "b")
    new = push_branch(manifest_repo, "feature", {"c.yaml": JOB.format(name="c", extra="")}, "c")
    planned: list[str] = []
    real_preview = service.syncs["team"].preview
    service.syncs["team"].preview = lambda ref, sha=None, number=None: (
        planned.append(sha), real_preview(ref, sha, number))[1]
    lock = service.locks["team"]
    lock.acquire()  # a sync is running while both pushes' hooks arrive
    assert service.trigger_preview("team", "feature", old, 7)
    assert service.trigger_preview("team", "feature", new, 7)
    threading.Timer(0.2, lock.release).start()
    deadline = time.monotonic() + 30
    while not planned and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    assert planned == [new]  # the older one never ran
    assert notes(manifest_repo, new)["nodus/ci/plan"]["state"] == "success"
