"""Webhooks as a Git host delivers them, to the real service over a real Git remote:
a redelivered (or replayed) delivery triggers nothing, a hook naming the repository the
checks post to matches a binding that reads a mirror, and a pull request from a fork is
planned at the head the host published under `refs/pull/<n>/head`."""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import respx
from nodus_gitops.config import load_settings
from nodus_gitops.providers.base import FakeProvider
from nodus_gitops.service import Service
from nodus_gitops.state.store import Store
from nodus_gitops.web.hooks import handle, sign
from nodus_gitops.wiring import build_service

from tests.fixtures_git import ManifestRepo, git, serve_git_http
from tests.state.support import execute
from tests.web.conftest import serve

SECRET = "whsec-8f2b41"
JOB = ("apiVersion: nodus.dev/v1\nkind: Job\nmetadata:\n  name: {name}\nspec:\n"
       "  command: [python3, -c, pass]\n")


def build(tmp_path: Path, url: str, checks: str = "", *,
          state: str | None = None) -> Service:
    """The service of one binding `ml` of `url`, with the GitHub webhook secret set."""
    config = tmp_path / "config.yaml"
    config.write_text(f"instance: ci\nrepos:\n  - id: ml\n    url: {url}\n"
                      f"checks:\n  webhooks: {{github: {SECRET}}}\n{checks}")
    settings = load_settings(str(config), environ={},
                             overrides={"state_dir": str(tmp_path / "state")})
    store = Store.open(state, tmp_path / "state")
    return build_service(settings, store, provider_factory=lambda _n: FakeProvider(),
                         follow_up=False)


def github(event: str, payload: dict[str, Any],
           delivery: str | None = None) -> tuple[dict[str, str], bytes]:
    """Headers and body of one signed GitHub delivery."""
    body = json.dumps(payload).encode()
    return {"X-GitHub-Event": event, "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
            "X-Hub-Signature-256": f"sha256={sign(body, SECRET)}",
            "Content-Type": "application/json"}, body


def push(full_name: str, sha: str) -> dict[str, Any]:
    return {"ref": "refs/heads/main", "after": sha, "repository": {"full_name": full_name}}


def wait_for_background(prefix: str) -> None:
    """Join the threads a hook started (triggers and previews run on their own)."""
    for thread in threading.enumerate():
        if thread.name.startswith(prefix):
            thread.join(timeout=120)


def applied(service: Service) -> list[str]:
    return [s.commit for s in service.store.list_syncs("ml")]


def test_the_same_signed_delivery_sent_twice_triggers_one_sync(tmp_path: Path) -> None:
    with serve_git_http(tmp_path / "srv") as remote:
        repo = ManifestRepo(remote.root / "acme", "ml", tmp_path / "work")
        repo.write("a.yaml", JOB.format(name="a"))
        first = repo.commit("a")
        repo.push()
        service = build(tmp_path, remote.url_for("acme/ml"))
        url, stop = serve(SimpleNamespace(service=service))  # type: ignore[arg-type]
        try:
            with httpx.Client(base_url=url, timeout=30) as client:
                headers, body = github("push", push("acme/ml", first), "d-1")
                answer = client.post("/hooks/github", content=body, headers=headers)
                assert (answer.status_code, answer.json()["triggered"]) == (202, ["ml"])
                wait_for_background("trigger-ml")
                assert applied(service) == [first]
                # GitHub's "Redeliver" (or anyone replaying it) sends the same id again;
                # a new commit is on the remote by then, so a sync would show.
                repo.write("b.yaml", JOB.format(name="b"))
                second = repo.commit("b")
                repo.push()
                again = client.post("/hooks/github", content=body, headers=headers)
                wait_for_background("trigger-ml")
                assert again.status_code == 200
                assert again.json()["triggered"] == [] and again.json()["duplicate"] is True
                assert "d-1" in again.json()["note"]
                assert applied(service) == [first]
                # A new delivery of the same event is no duplicate.
                headers, body = github("push", push("acme/ml", second), "d-2")
                fresh = client.post("/hooks/github", content=body, headers=headers)
                wait_for_background("trigger-ml")
                assert (fresh.status_code, fresh.json()["triggered"]) == (202, ["ml"])
                assert applied(service) == [second, first]
        finally:
            stop()  # type: ignore[operator]
            service.store.close()


def test_an_unsigned_flood_records_no_delivery(tmp_path: Path) -> None:
    """Only a delivery whose signature verifies is recorded: a forged one with a real
    delivery id cannot make the genuine delivery of that id look like a duplicate."""
    with serve_git_http(tmp_path / "srv") as remote:
        repo = ManifestRepo(remote.root / "acme", "ml", tmp_path / "work")
        repo.write("a.yaml", JOB.format(name="a"))
        head = repo.commit("a")
        repo.push()
        service = build(tmp_path, remote.url_for("acme/ml"))
        headers, body = github("push", push("acme/ml", head), "d-7")
        forged = {**headers, "X-Hub-Signature-256": "sha256=" + "0" * 64}
        for n in range(100):
            forged["X-GitHub-Delivery"] = "d-7" if n == 0 else f"flood-{n}"
            assert handle(service, "github", forged, body, {"github": SECRET})[0] == 401
        database = f"sqlite:///{tmp_path / 'state' / 'state.db'}"
        assert execute(database, "SELECT count(*) FROM webhook_delivery") == [[(0,)]]
        status, answer = handle(service, "github", headers, body, {"github": SECRET})
        wait_for_background("trigger-ml")
        assert (status, answer["triggered"]) == (202, ["ml"])
        assert applied(service) == [head]
        service.store.close()


def test_a_hook_for_the_checks_repository_matches_a_binding_that_reads_a_mirror(
        tmp_path: Path, monkeypatch) -> None:
    """The binding reads a mirror on this machine; its checks go to GitHub's acme/ml
    (`checks.github.repository`): a push hook of acme/ml syncs it."""
    monkeypatch.setenv("GH_TOKEN", "ghp_static")
    repo = ManifestRepo(tmp_path / "mirrors", "ml-mirror", tmp_path / "work")
    repo.write("a.yaml", JOB.format(name="a"))
    head = repo.commit("a")
    repo.push()
    api = "http://127.0.0.1:9/api/v3"
    service = build(tmp_path, str(repo.bare), "  github: {tokenEnv: GH_TOKEN, repository: "
                    f"acme/ml, apiUrl: \"{api}\"}}\n")
    with respx.mock(assert_all_called=False) as router:
        statuses = router.post(url__regex=rf"{api}/repos/acme/ml/statuses/\w+").mock(
            return_value=httpx.Response(201, json={"id": 1, "state": "success"}))
        headers, body = github("push", push("acme/ml", head))
        status, answer = handle(service, "github", headers, body, {"github": SECRET})
        wait_for_background("trigger-ml")
    assert (status, answer["triggered"]) == (202, ["ml"])
    assert applied(service) == [head]
    assert statuses.called  # the checks went where the hook came from
    # Another repository of the same host still matches nothing.
    headers, body = github("push", push("acme/other", head))
    assert handle(service, "github", headers, body, {"github": SECRET})[1]["triggered"] == []
    service.store.close()


def _fork_pull_request(number: int, head: str, base: str = "acme/ml") -> dict[str, Any]:
    return {"action": "synchronize", "number": number, "pull_request": {
        "number": number,
        "head": {"ref": "patch-1", "sha": head, "repo": {"full_name": "someone/ml"}},
        "base": {"ref": "main", "repo": {"full_name": base}}},
        "repository": {"full_name": base}}


def _publish_fork_head(repo: ManifestRepo, base: str, ref: str, name: str) -> str:
    """A fork's commit as the host keeps it: under `ref` of the base repository only."""
    repo.write(f"{name}.yaml", JOB.format(name=name))
    head = repo.commit(f"a fork's {name}")
    git("push", "--quiet", "--force", "origin", f"{head}:{ref}", cwd=repo.work)
    git("reset", "--quiet", "--hard", base, cwd=repo.work)
    return head


def _plan_checks(service: Service, commit: str) -> list[str]:
    return [c.context for c in service.store.list_checks(commit) if "plan" in c.context]


def test_a_fork_pull_request_is_planned_at_the_head_its_number_names(tmp_path: Path) -> None:
    with serve_git_http(tmp_path / "srv") as remote:
        repo = ManifestRepo(remote.root / "acme", "ml", tmp_path / "work")
        repo.write("a.yaml", JOB.format(name="a"))
        base = repo.commit("a")
        repo.push()
        service = build(tmp_path, remote.url_for("acme/ml"))
        service.reconcile("ml")
        head = _publish_fork_head(repo, base, "refs/pull/7/head", "from-fork")
        assert "patch-1" not in git("ls-remote", str(repo.bare), cwd=repo.work)
        headers, body = github("pull_request", _fork_pull_request(7, head))
        status, answer = handle(service, "github", headers, body, {"github": SECRET})
        wait_for_background("preview-ml")
        assert (status, answer["triggered"]) == (202, ["ml"])
        assert _plan_checks(service, head) == ["nodus/ci/plan"]
        assert applied(service) == [base]  # a preview applies nothing
        service.store.close()


def test_a_pull_request_head_that_moved_on_is_not_planned_for_the_older_delivery(
        tmp_path: Path) -> None:
    """The hook said head X; `refs/pull/7/head` is at Y by the time it is read (a newer
    push, whose own delivery plans Y). The delivery of X plans nothing rather than post
    a plan it was not asked for."""
    with serve_git_http(tmp_path / "srv") as remote:
        repo = ManifestRepo(remote.root / "acme", "ml", tmp_path / "work")
        repo.write("a.yaml", JOB.format(name="a"))
        base = repo.commit("a")
        repo.push()
        service = build(tmp_path, remote.url_for("acme/ml"))
        service.reconcile("ml")
        older = _publish_fork_head(repo, base, "refs/pull/7/head", "first-try")
        newer = _publish_fork_head(repo, base, "refs/pull/7/head", "second-try")
        sync = service.syncs["ml"]
        assert sync.preview("patch-1", older, 7) == (None, [])
        assert _plan_checks(service, newer) == _plan_checks(service, older) == []
        plan, problems = sync.preview("patch-1", newer, 7)
        assert not problems and "second-try" in {a.key.name for a in plan.actions}
        service.store.close()


def test_a_merge_request_head_is_fetched_in_one_listing(tmp_path: Path) -> None:
    """GitLab keeps it under refs/merge-requests/<iid>/head: one look at the remote's
    refs finds it, whichever host's name it has."""
    with serve_git_http(tmp_path / "srv") as remote:
        repo = ManifestRepo(remote.root / "group", "jobs", tmp_path / "work")
        repo.write("a.yaml", JOB.format(name="a"))
        base = repo.commit("a")
        repo.push()
        service = build(tmp_path, remote.url_for("group/jobs"))
        service.reconcile("ml")
        head = _publish_fork_head(repo, base, "refs/merge-requests/3/head", "from-mr")
        before = remote.requests
        plan, problems = service.syncs["ml"].preview("feature", head, 3)
        assert not problems and "from-mr" in {a.key.name for a in plan.actions}
        # One ref listing (info/refs) and one fetch (its negotiation), nothing more.
        assert remote.requests - before == 2
        service.store.close()


DELIVERY = {  # each host's push, with its signature and the header of its delivery id
    "gitea": lambda body, d: {"X-Gitea-Event": "push", "X-Gitea-Delivery": d,
                              "X-Gitea-Signature": sign(body, SECRET)},
    "gitlab": lambda body, d: {"X-Gitlab-Event": "Push Hook", "X-Gitlab-Event-UUID": d,
                               "X-Gitlab-Token": SECRET},
    "generic": lambda body, d: {"X-Nodus-Delivery": d,
                                "X-Nodus-Signature-256": f"sha256={sign(body, SECRET)}"},
}
PUSHES = {
    "gitea": lambda url: {"ref": "refs/heads/main", "repository": {"clone_url": url}},
    "gitlab": lambda url: {"ref": "refs/heads/main", "project": {"git_http_url": url}},
    "generic": lambda url: {"event": "push", "repository": url, "ref": "refs/heads/main"},
}


def test_every_host_s_delivery_id_is_answered_once(tmp_path: Path) -> None:
    repo = ManifestRepo(tmp_path / "srv", "ml", tmp_path / "work")
    repo.write("a.yaml", JOB.format(name="a"))
    repo.commit("a")
    repo.push()
    service = build(tmp_path, str(repo.bare))
    for host, headers_of in DELIVERY.items():
        body = json.dumps(PUSHES[host](str(repo.bare))).encode()
        headers = headers_of(body, "5f0c1e2a-0d4b-4a9e-9c55-1b7e0f0e7a11")
        first = handle(service, host, headers, body, {host: SECRET})
        again = handle(service, host, headers, body, {host: SECRET})
        wait_for_background("trigger-ml")
        assert (first[0], first[1]["triggered"]) == (202, ["ml"]), host
        assert (again[0], again[1]["triggered"], again[1]["duplicate"]) == (200, [], True)
        # A delivery without an id cannot be told from another: each one is acted on.
        bare = {k: v for k, v in headers.items() if "Delivery" not in k and "UUID" not in k}
        for _ in range(2):
            assert handle(service, host, bare, body, {host: SECRET})[1]["triggered"] == ["ml"]
            wait_for_background("trigger-ml")
    service.store.close()


def test_a_delivery_id_no_host_sends_is_400_and_not_recorded(tmp_path: Path) -> None:
    repo = ManifestRepo(tmp_path / "srv", "ml", tmp_path / "work")
    service = build(tmp_path, str(repo.bare))
    for odd in ("x" * 201, "id\x00with-a-nul"):
        headers, body = github("push", push("acme/ml", "0" * 40), odd)
        status, answer = handle(service, "github", headers, body, {"github": SECRET})
        assert status == 400 and "delivery id" in answer["error"]
    service.store.close()
    database = f"sqlite:///{tmp_path / 'state' / 'state.db'}"
    assert execute(database, "SELECT count(*) FROM webhook_delivery") == [[(0,)]]
