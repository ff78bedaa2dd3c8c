"""End to end: a binding configured with a GitHub App (a key pair made here) fetches over
HTTP from a real Git server with the installation token it minted, posts check runs, and
writes one plan comment per pull request, edited on the next push, with the cost of what
merging would start and the project's budget left. GitHub's API is a respx fixture that
verifies every JWT with the App's public key."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx
import jwt
import respx
from nodus_gitops.checks.comments import marker
from nodus_gitops.config import load_settings
from nodus_gitops.providers.base import FakeProvider, Observed
from nodus_gitops.service import Service
from nodus_gitops.state.store import Store
from nodus_gitops.web.hooks import handle, sign
from nodus_gitops.wiring import build_service

from tests.checks.support import app_key_pem, app_public_key, iso, recorded
from tests.fixtures_git import ManifestRepo, git, serve_git_http

JOB = ("apiVersion: nodus.dev/v1\nkind: Job\nmetadata:\n  name: {name}\nspec:\n"
       "  command: [python3, -c, pass]\n  maxCostUSD: \"{cap}\"\n")
SECRET = "hook-secret"


class PricedProvider(FakeProvider):
    """A backend that prices every run at $2.50 and reports $40 spent on each one."""

    def __init__(self) -> None:
        super().__init__(lambda op, key, arg: Observed(key, f"fake-{key.name}", "Running",
                                                       cost_usd="40") if op == "create"
                         else None)

    def estimate(self, manifest: dict) -> str:
        return "2.50"


class FakeGitHub:
    """The App's and the repository's endpoints, checking who signs each request."""

    def __init__(self, router: respx.Router, api: str, server) -> None:
        self.server = server
        self.minted: list[str] = []
        self.jwt_claims: list[dict] = []
        self.token_uses: list[str] = []
        repo = f"{api}/repos/octo-org/gpu-jobs"
        router.get(f"{repo}/installation").mock(side_effect=self._as_app(
            lambda r: recorded("github", "app_installation")))
        router.post(f"{api}/app/installations/77/access_tokens").mock(
            side_effect=self._as_app(self._mint))
        router.get(url__regex=rf"{repo}/commits/\w+/check-runs").mock(
            side_effect=self._as_installation(
                lambda r: recorded("github", "check_runs_for_ref_empty")))
        self.check_runs = router.post(f"{repo}/check-runs").mock(
            side_effect=self._as_installation(lambda r: recorded("github", "check_run_created")))
        self.check_updates = router.patch(f"{repo}/check-runs/4").mock(
            side_effect=self._as_installation(lambda r: recorded("github", "check_run_updated")))
        self.comment_lists = router.get(f"{repo}/issues/7/comments").mock(
            side_effect=self._as_installation(lambda r: httpx.Response(200, json=[])))
        self.comments = router.post(f"{repo}/issues/7/comments").mock(
            side_effect=self._as_installation(lambda r: recorded("github", "issue_comment")))
        self.comment_edits = router.patch(f"{repo}/issues/comments/1").mock(
            side_effect=self._as_installation(
                lambda r: recorded("github", "issue_comment_updated")))

    def _as_app(self, answer):
        def checked(request: httpx.Request) -> httpx.Response:
            scheme, _, token = request.headers["Authorization"].partition(" ")
            assert scheme == "Bearer" and jwt.get_unverified_header(token)["alg"] == "RS256"
            claims = jwt.decode(token, app_public_key(), algorithms=["RS256"],
                                options={"require": ["iat", "exp", "iss"]})
            now = time.time()
            assert claims["iss"] == "12345"
            assert claims["iat"] <= now - 55 and claims["exp"] - claims["iat"] <= 600
            assert request.headers["X-GitHub-Api-Version"] == "2022-11-28"
            self.jwt_claims.append(claims)
            return answer(request)
        return checked

    def _as_installation(self, answer):
        def checked(request: httpx.Request) -> httpx.Response:
            assert request.headers["Authorization"] == f"Bearer {self.minted[-1]}"
            assert request.headers["Accept"] == "application/vnd.github+json"
            self.token_uses.append(self.minted[-1])
            return answer(request)
        return checked

    def _mint(self, request: httpx.Request) -> httpx.Response:
        assert json.loads(request.content) == {"repositories": ["gpu-jobs"]}
        self.minted.append(f"ghs_{len(self.minted) + 1:036d}")
        self.server._server.auth = ("x-access-token", self.minted[-1])  # Git takes it too
        return recorded("github", "installation_token",
                        fields={"token": self.minted[-1], "expires_at": iso(time.time() + 3600)})


def _pull_request_hook(service: Service, url: str, sha: str) -> None:
    payload = json.dumps({"action": "synchronize", "number": 7, "pull_request": {
        "number": 7, "head": {"ref": "feature", "sha": sha}, "base": {"ref": "main"}},
        "repository": {"full_name": "octo-org/gpu-jobs", "clone_url": url}}).encode()
    status, answer = handle(service, "github", {
        "X-GitHub-Event": "pull_request",
        "X-Hub-Signature-256": f"sha256={sign(payload, SECRET)}"}, payload,
        {"github": SECRET})
    assert (status, answer["triggered"]) == (202, ["team"])
    for thread in threading.enumerate():  # the preview runs on a thread of its own
        if thread.name == "preview-team":
            thread.join(timeout=60)


def test_a_github_app_binding_posts_checks_and_plan_comments_with_its_own_tokens(
        tmp_path: Path) -> None:
    key = tmp_path / "app.pem"
    key.write_text(app_key_pem())
    with serve_git_http(tmp_path / "srv", auth=("x-access-token", "none-minted-yet")) as server, \
            respx.mock(assert_all_called=False) as router:
        api = f"http://127.0.0.1:{server.port}/api/v3"  # GitHub Enterprise Server's shape
        url = server.url_for("octo-org/gpu-jobs")
        config = tmp_path / "config.yaml"
        config.write_text(f"""instance: ci
githubApp: {{appId: 12345, privateKeyFile: {key}, apiUrl: "{api}"}}
budgets:
  training: {{limitUSD: "100", period: month}}
repos:
  - id: team
    url: {url}
    project: training
    credentials: {{githubApp: true}}
    comments: true
checks:
  github: true
""")
        github = FakeGitHub(router, api, server)
        settings = load_settings(str(config), environ={},
                                 overrides={"state_dir": str(tmp_path / "state")})
        store = Store.open(None, tmp_path)
        service = build_service(settings, store, provider_factory=lambda _n: PricedProvider())
        repo = ManifestRepo(server.root / "octo-org", "gpu-jobs", tmp_path / "work")
        repo.write("a.yaml", JOB.format(name="a", cap="5.00"))
        main = repo.commit("a")
        repo.push()

        # A push to main: fetched with the App's token, the sync posted as a check run.
        assert service.reconcile("team").result == "applied"
        sync = [json.loads(c.request.content) for c in github.check_runs.calls]
        assert [(s["name"], s["head_sha"]) for s in sync] == [("nodus/ci/sync", main)]
        assert json.loads(github.check_updates.calls[-1].request.content)["conclusion"] == \
            "success"

        # A pull request: its plan as a check run and as one comment.
        git("checkout", "--quiet", "-b", "feature", cwd=repo.work)
        repo.write("b.yaml", JOB.format(name="b", cap="9.00"))
        first = repo.commit("add b")
        git("push", "--quiet", "origin", "feature", cwd=repo.work)
        _pull_request_hook(service, url, first)
        plan_run = json.loads(github.check_runs.calls[-1].request.content)
        assert (plan_run["name"], plan_run["head_sha"], plan_run["conclusion"]) == (
            "nodus/ci/plan", first, "success")
        assert "| create | `Job/b` |" in plan_run["output"]["summary"]
        assert github.comments.call_count == 1
        comment = json.loads(github.comments.calls[0].request.content)["body"]
        assert comment.startswith(marker("ci", "team") + "\n")
        assert "**Estimated cost of what merging would start: $2.50** (1 run)" in comment
        assert "**Budget of project `training`: $60.00 left** of $100.00 this month" in comment
        assert "$57.50 left after this merge's estimate" in comment
        assert f"(http://127.0.0.1:{server.port}/octo-org/gpu-jobs/blob/{first}/b.yaml#L1)" \
            in comment

        # The next push edits that comment, and a blocked plan fails the check.
        repo.write("a.yaml", JOB.format(name="a", cap="1.00"))
        second = repo.commit("lower a's cap")
        git("push", "--quiet", "origin", "feature", cwd=repo.work)
        _pull_request_hook(service, url, second)
        plan_run = json.loads(github.check_runs.calls[-1].request.content)
        assert (plan_run["head_sha"], plan_run["conclusion"]) == (second, "failure")
        assert github.comments.call_count == 1 and github.comment_edits.call_count == 1
        edited = json.loads(github.comment_edits.calls[0].request.content)["body"]
        assert "**1 blocked**" in edited and "the cap can only be raised" in edited
        assert github.comment_lists.call_count == 1

        # One token served every request of the hour: minted once, by the App itself.
        assert github.minted == ["ghs_" + "1".zfill(36)]
        assert set(github.token_uses) == set(github.minted)
        assert len(github.jwt_claims) == 2  # the installation lookup and the mint
        store.close()


def test_a_preview_branch_comments_on_its_open_pull_request(tmp_path: Path,
                                                           monkeypatch) -> None:
    monkeypatch.setenv("GH_TOKEN", "ghp_static")
    with serve_git_http(tmp_path / "srv") as server, respx.mock() as router:
        api = f"http://127.0.0.1:{server.port}/api/v3"
        repo_api = f"{api}/repos/octo-org/gpu-jobs"
        url = server.url_for("octo-org/gpu-jobs")
        router.post(url__regex=rf"{repo_api}/statuses/\w+").mock(
            return_value=recorded("github", "status_created"))
        pulls = router.get(f"{repo_api}/pulls").mock(return_value=httpx.Response(
            200, json=[recorded("github", "pull_open").json()]))
        router.get(f"{repo_api}/issues/7/comments").mock(
            return_value=httpx.Response(200, json=[]))
        created = router.post(f"{repo_api}/issues/7/comments").mock(
            return_value=recorded("github", "issue_comment"))
        config = tmp_path / "config.yaml"
        config.write_text(f"""instance: ci
repos:
  - id: team
    url: {url}
    previewBranches: ["preview/*"]
    comments: true
checks:
  github: {{tokenEnv: GH_TOKEN}}
""")
        settings = load_settings(str(config), environ={},
                                 overrides={"state_dir": str(tmp_path / "state")})
        service = build_service(settings, Store.open(None, tmp_path),
                          provider_factory=lambda _n: FakeProvider())
        repo = ManifestRepo(server.root / "octo-org", "gpu-jobs", tmp_path / "work")
        repo.write("a.yaml", JOB.format(name="a", cap="5.00"))
        repo.commit("a")
        repo.push()
        service.reconcile("team")  # main applied: the preview plans against it
        git("checkout", "--quiet", "-b", "preview/tune", cwd=repo.work)
        repo.write("b.yaml", JOB.format(name="b", cap="1.00"))
        repo.commit("b")
        git("push", "--quiet", "origin", "preview/tune", cwd=repo.work)
        service.reconcile("team")
    assert pulls.calls[0].request.url.params["head"] == "octo-org:preview/tune"
    text = json.loads(created.calls[0].request.content)["body"]
    assert text.startswith(marker("ci", "team")) and "| create | `Job/b` |" in text
    assert "Merging would start 1 run; the backend gives no estimate." in text
