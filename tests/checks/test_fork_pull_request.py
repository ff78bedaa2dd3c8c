"""A pull request from a fork: its head commit is only on the base repository's
`refs/pull/<n>/head`, and its branch may share a name with one of the base repository
(forks often propose from their own `main`). The plan check and the plan comment must be
about that head commit, never about the base branch of the same name."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import respx
from nodus_gitops.config import load_settings
from nodus_gitops.providers.base import FakeProvider
from nodus_gitops.state.store import Store
from nodus_gitops.wiring import build_service

from tests.checks.support import recorded
from tests.fixtures_git import ManifestRepo, git, serve_git_http

JOB = ("apiVersion: nodus.dev/v1\nkind: Job\nmetadata:\n  name: {name}\nspec:\n"
       "  command: [python3, -c, pass]\n")


def test_a_fork_pull_request_from_its_main_is_planned_at_its_own_head(
        tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("GH_TOKEN", "ghp_static")
    with serve_git_http(tmp_path / "srv") as server, respx.mock() as router:
        api = f"http://127.0.0.1:{server.port}/api/v3"
        repo_api = f"{api}/repos/octo-org/gpu-jobs"
        url = server.url_for("octo-org/gpu-jobs")
        statuses = router.post(url__regex=rf"{repo_api}/statuses/\w+").mock(
            return_value=recorded("github", "status_created"))
        router.get(f"{repo_api}/issues/7/comments").mock(
            return_value=httpx.Response(200, json=[]))
        comment = router.post(f"{repo_api}/issues/7/comments").mock(
            return_value=recorded("github", "issue_comment"))
        config = tmp_path / "config.yaml"
        config.write_text(f"instance: ci\nrepos:\n  - id: team\n    url: {url}\n"
                          "    comments: true\nchecks:\n  github: {tokenEnv: GH_TOKEN}\n")
        settings = load_settings(str(config), environ={},
                                 overrides={"state_dir": str(tmp_path / "state")})
        service = build_service(settings, Store.open(None, tmp_path),
                          provider_factory=lambda _n: FakeProvider())
        repo = ManifestRepo(server.root / "octo-org", "gpu-jobs", tmp_path / "work")
        repo.write("a.yaml", JOB.format(name="a"))
        base = repo.commit("a")
        repo.push()
        service.reconcile("team")
        # The fork's commit, as GitHub keeps it: under refs/pull/7/head of the base.
        repo.write("fork.yaml", JOB.format(name="from-fork"))
        head = repo.commit("a fork's change")
        git("push", "--quiet", "origin", f"{head}:refs/pull/7/head", cwd=repo.work)
        git("reset", "--quiet", "--hard", base, cwd=repo.work)
        service.syncs["team"].preview("main", head, 7)  # what the webhook gives
    plan_status = [json.loads(c.request.content) | {"sha": c.request.url.path.rsplit("/")[-1]}
                   for c in statuses.calls if b"nodus/ci/plan" in c.request.content]
    assert [s["sha"] for s in plan_status] == [head]
    assert "Job/from-fork" in json.loads(comment.calls[0].request.content)["body"]


def test_a_merge_request_head_and_a_stale_branch_name(tmp_path: Path) -> None:
    """GitLab keeps a merge request's head under refs/merge-requests/<iid>/head; and a
    branch name that names another commit than the host said is never planned instead."""
    with serve_git_http(tmp_path / "srv") as server:
        url = server.url_for("group/jobs")
        repo = ManifestRepo(server.root / "group", "jobs", tmp_path / "work")
        repo.write("a.yaml", JOB.format(name="a"))
        base = repo.commit("a")
        repo.push()
        repo.write("mr.yaml", JOB.format(name="from-mr"))
        head = repo.commit("a merge request's change")
        git("push", "--quiet", "origin", f"{head}:refs/merge-requests/3/head", cwd=repo.work)
        git("reset", "--quiet", "--hard", base, cwd=repo.work)
        config = tmp_path / "config.yaml"
        config.write_text(f"instance: ci\nrepos:\n  - id: team\n    url: {url}\n")
        settings = load_settings(str(config), environ={},
                                 overrides={"state_dir": str(tmp_path / "state")})
        service = build_service(settings, Store.open(None, tmp_path),
                          provider_factory=lambda _n: FakeProvider())
        sync = service.syncs["team"]
        plan, problems = sync.preview("main", head, 3)
        assert not problems and "from-mr" in {a.key.name for a in plan.actions}
        # The hook names a head nothing on the remote holds: no plan of `main` instead.
        assert sync.preview("main", "f" * 40, None) == (None, [])
