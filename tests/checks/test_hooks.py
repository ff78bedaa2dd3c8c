"""Webhook verification and parsing for GitHub, Gitea, GitLab and generic senders."""

from __future__ import annotations

import hashlib
import hmac
import json
from email.message import Message
from types import SimpleNamespace

import pytest
from nodus_gitops.repos import match_bindings
from nodus_gitops.web.hooks import (
    MAX_BODY_BYTES,
    HookEvent,
    handle,
    parse_event,
    resolve_secret,
    verify,
)

SECRET = "whsec-5c1d9e"
SHA = "ce587453ced02b1526dfb4cb910479d431683101"


class FakeService:
    def __init__(self, bindings: dict[str, list[str]],
                 branches: dict[str, str] | None = None) -> None:
        self.bindings = bindings
        ids = {b for found in bindings.values() for b in found}
        # As on a Service: each binding's sync, with the branch its binding tracks.
        self.syncs = {b: SimpleNamespace(binding=SimpleNamespace(
            branch=(branches or {}).get(b, "main"))) for b in ids}
        self.triggered: list[str] = []
        self.previews: list[tuple] = []
        self.deliveries: set[tuple[str, str]] = set()

    def bindings_for_repo(self, names: tuple[str, ...], host: str) -> list[str]:
        return sorted({b for name in names for b in self.bindings.get(name, [])})

    def first_delivery(self, host: str, delivery_id: str) -> bool:
        new = (host, delivery_id) not in self.deliveries
        self.deliveries.add((host, delivery_id))
        return new

    def branch_of(self, binding_id: str) -> str | None:
        return self.syncs[binding_id].binding.branch

    def trigger(self, binding_id: str) -> bool:
        self.triggered.append(binding_id)
        return True

    def trigger_preview(self, binding_id, ref, head_sha, pr_number) -> bool:
        self.previews.append((binding_id, ref, head_sha, pr_number))
        return True


def _hex(body: bytes, secret: str = SECRET) -> str:
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def push_body(host: str) -> bytes:
    if host == "gitlab":
        payload = {"object_kind": "push", "ref": "refs/heads/main", "checkout_sha": SHA,
                   "after": SHA, "project": {"path_with_namespace": "platform/gpu-jobs",
                                             "git_http_url": "https://gitlab.example/platform/"
                                                             "gpu-jobs.git"}}
    elif host == "generic":
        payload = {"event": "push", "repository": "https://git.example/team/gpu-jobs.git",
                   "ref": "refs/heads/main", "sha": SHA}
    else:
        payload = {"ref": "refs/heads/main", "before": "0" * 40, "after": SHA,
                   "repository": {"full_name": "team/gpu-jobs",
                                  "clone_url": "https://git.example/team/gpu-jobs.git",
                                  "html_url": "https://git.example/team/gpu-jobs"}}
    return json.dumps(payload).encode()


def signed(host: str, body: bytes, secret: str = SECRET) -> dict[str, str]:
    """The headers each host sends with a delivery of `body`."""
    if host == "github":
        return {"X-GitHub-Event": "push", "X-Hub-Signature-256": f"sha256={_hex(body, secret)}",
                "Content-Type": "application/json"}
    if host == "gitea":
        return {"X-Gitea-Event": "push", "X-GitHub-Event": "push",
                "X-Gitea-Signature": _hex(body, secret)}
    if host == "gitlab":
        return {"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": secret}
    return {"X-Nodus-Signature-256": f"sha256={_hex(body, secret)}"}


SIGNATURE_HEADER = {"github": "X-Hub-Signature-256", "gitea": "X-Gitea-Signature",
                    "gitlab": "X-Gitlab-Token", "generic": "X-Nodus-Signature-256"}
HOSTS = list(SIGNATURE_HEADER)
REPO_NAME = {"github": "team/gpu-jobs", "gitea": "team/gpu-jobs",
             "gitlab": "platform/gpu-jobs", "generic": "https://git.example/team/gpu-jobs.git"}


def _service(host: str) -> FakeService:
    return FakeService({REPO_NAME[host]: ["team-a"]})


@pytest.mark.parametrize("host", HOSTS)
def test_a_valid_push_triggers_a_sync(host):
    service, body = _service(host), push_body(host)
    status, answer = handle(service, host, signed(host, body), body, {host: SECRET})
    assert (status, answer["triggered"]) == (202, ["team-a"])
    assert service.triggered == ["team-a"] and service.previews == []


@pytest.mark.parametrize("host", HOSTS)
def test_a_missing_signature_is_refused(host):
    service, body = _service(host), push_body(host)
    headers = {k: v for k, v in signed(host, body).items() if k != SIGNATURE_HEADER[host]}
    assert handle(service, host, headers, body, {host: SECRET})[0] == 401
    assert not verify(host, headers, body, SECRET)
    assert service.triggered == []


@pytest.mark.parametrize("host", HOSTS)
def test_a_wrong_signature_is_refused(host):
    service, body = _service(host), push_body(host)
    headers = signed(host, body, secret="another-secret")
    status, answer = handle(service, host, headers, body, {host: SECRET})
    assert status == 401 and "signature" in answer["error"]
    assert service.triggered == []


@pytest.mark.parametrize("host", [h for h in HOSTS if h != "gitlab"])
def test_a_replay_with_a_changed_body_fails_verification(host):
    service, body = _service(host), push_body(host)
    headers = signed(host, body)
    assert verify(host, headers, body, SECRET)
    changed = body.replace(b"refs/heads/main", b"refs/heads/evil")
    assert not verify(host, headers, changed, SECRET)
    assert handle(service, host, headers, changed, {host: SECRET})[0] == 401
    assert service.triggered == []


def test_gitlab_tokens_sign_nothing_so_a_changed_body_still_only_triggers_a_fetch():
    # GitLab sends its secret verbatim; the body is not covered. What a forged body can do
    # is name a repository to fetch from Git: the fetch, not the body, decides what runs.
    body = push_body("gitlab")
    changed = body.replace(b"refs/heads/main", b"refs/heads/other")
    service = _service("gitlab")
    status, answer = handle(service, "gitlab", signed("gitlab", body), changed,
                            {"gitlab": SECRET})
    assert (status, answer["triggered"]) == (202, ["team-a"])
    assert service.triggered == ["team-a"]  # a trigger carries no content from the body


@pytest.mark.parametrize("host", HOSTS)
def test_an_oversized_body_is_refused_before_anything_else(host):
    service = _service(host)
    body = b"{" + b" " * MAX_BODY_BYTES + b"}"
    status, _ = handle(service, host, signed(host, body), body, {host: SECRET})
    assert status == 413 and service.triggered == []


@pytest.mark.parametrize("host", HOSTS)
def test_no_secret_configured_is_401_naming_the_setting(host):
    body = push_body(host)
    status, answer = handle(_service(host), host, signed(host, body), body, {}, environ={})
    assert status == 401
    assert f"checks.webhooks.{host}" in answer["error"]
    assert f"NODUS_GITOPS_WEBHOOK_SECRET_{host.upper()}" in answer["error"]


@pytest.mark.parametrize("host", HOSTS)
def test_an_unparsable_body_is_400(host):
    body = b"not json"
    status, _ = handle(_service(host), host, signed(host, body), body, {host: SECRET})
    assert status == 400


@pytest.mark.parametrize("host", HOSTS)
def test_an_unknown_repository_is_202_with_nothing_triggered(host):
    body = push_body(host)
    status, answer = handle(FakeService({}), host, signed(host, body), body, {host: SECRET})
    assert status == 202 and answer["triggered"] == [] and "no repo binding" in answer["note"]


def _pr(host: str, base: str = "main") -> tuple[bytes, dict[str, str]]:
    """A pull (merge) request of `bigger-batch` into `base`, as each host sends it."""
    if host == "gitlab":
        payload = {"object_kind": "merge_request",
                   "project": {"path_with_namespace": "platform/gpu-jobs"},
                   "object_attributes": {"iid": 7, "action": "update",
                                         "source_branch": "bigger-batch",
                                         "target_branch": base,
                                         "last_commit": {"id": SHA}}}
        body = json.dumps(payload).encode()
        return body, {"X-Gitlab-Event": "Merge Request Hook", "X-Gitlab-Token": SECRET}
    if host == "generic":
        payload = {"event": "pull_request", "repository": [REPO_NAME["generic"]],
                   "ref": "bigger-batch", "sha": SHA, "number": 7, "base": base}
        body = json.dumps(payload).encode()
        return body, signed("generic", body)
    payload = {"action": "synchronize" if host == "github" else "synchronized", "number": 7,
               "pull_request": {"number": 7, "head": {"ref": "bigger-batch", "sha": SHA},
                                "base": {"ref": base, "sha": "0" * 40}},
               "repository": {"full_name": "team/gpu-jobs"}}
    body = json.dumps(payload).encode()
    headers = signed(host, body)
    event = {"github": "X-GitHub-Event", "gitea": "X-Gitea-Event"}[host]
    headers[event] = "pull_request"
    return body, headers


@pytest.mark.parametrize("host", HOSTS)
def test_a_pull_request_triggers_a_preview_of_its_head(host):
    service = _service(host)
    body, headers = _pr(host)
    status, answer = handle(service, host, headers, body, {host: SECRET})
    assert (status, answer["triggered"]) == (202, ["team-a"])
    assert service.previews == [("team-a", "bigger-batch", SHA, 7)]
    assert service.triggered == []


@pytest.mark.parametrize("host", HOSTS)
def test_only_the_bindings_of_the_base_branch_preview_a_pull_request(host):
    # Two bindings of one repository: `prod` tracks main, `staging` tracks develop. A
    # pull request into develop is planned against develop's state only: a plan of prod
    # would say "Merging applies this plan" of a merge that applies nothing to it.
    service = FakeService({REPO_NAME[host]: ["prod", "staging"]},
                          branches={"prod": "main", "staging": "develop"})
    body, headers = _pr(host, base="develop")
    status, answer = handle(service, host, headers, body, {host: SECRET})
    assert (status, answer["triggered"]) == (202, ["staging"])
    assert service.previews == [("staging", "bigger-batch", SHA, 7)]
    body, headers = _pr(host, base="release/2")
    status, answer = handle(service, host, headers, body, {host: SECRET})
    assert (status, answer["triggered"]) == (202, [])
    assert "tracks the base branch 'release/2'" in answer["note"]
    assert service.previews == [("staging", "bigger-batch", SHA, 7)] and not service.triggered


@pytest.mark.parametrize("host", HOSTS)
def test_a_pull_request_without_its_base_branch_previews_nothing(host):
    service = _service(host)
    body, headers = _pr(host)
    payload = json.loads(body)
    for part in (payload.get("pull_request"), payload.get("object_attributes"), payload):
        if part is not None:
            part.pop("base", None), part.pop("target_branch", None)
    body = json.dumps(payload).encode()
    if host != "gitlab":
        headers = {**headers, SIGNATURE_HEADER[host]: signed(host, body)[SIGNATURE_HEADER[host]]}
    status, answer = handle(service, host, headers, body, {host: SECRET})
    assert (status, answer["triggered"]) == (202, [])
    assert answer["note"] == "the pull request names no base branch"
    assert service.previews == []


def test_a_closed_pull_request_and_a_ping_trigger_nothing():
    service = _service("github")
    body = json.dumps({"action": "closed", "number": 7, "pull_request": {"head": {}},
                       "repository": {"full_name": "team/gpu-jobs"}}).encode()
    headers = {**signed("github", body), "X-GitHub-Event": "pull_request"}
    assert handle(service, "github", headers, body, {"github": SECRET}) == (
        202, {"triggered": [], "note": "this event does not trigger a sync"})
    ping = json.dumps({"zen": "Keep it logically awesome.", "hook_id": 1}).encode()
    headers = {**signed("github", ping), "X-GitHub-Event": "ping"}
    assert handle(service, "github", headers, ping, {"github": SECRET})[0] == 202
    assert service.triggered == [] and service.previews == []


def test_parse_event_names_the_repository_every_way_it_is_written():
    event = parse_event("github", {"x-github-event": "push"}, push_body("github"))
    assert event == HookEvent("push", ("team/gpu-jobs", "https://git.example/team/gpu-jobs.git",
                                       "https://git.example/team/gpu-jobs"),
                              "refs/heads/main", SHA, None)
    gitlab = parse_event("gitlab", {"X-Gitlab-Event": "Push Hook"}, push_body("gitlab"))
    assert gitlab.repo_names == ("platform/gpu-jobs",
                                 "https://gitlab.example/platform/gpu-jobs.git")


def test_forgejo_signature_header_is_accepted_and_wins():
    body = push_body("gitea")
    assert verify("gitea", {"X-Forgejo-Signature": _hex(body)}, body, SECRET)
    assert not verify("gitea", {"X-Forgejo-Signature": "0" * 64,
                                "X-Gitea-Signature": _hex(body)}, body, SECRET)


def test_headers_are_matched_case_insensitively():
    body = push_body("github")
    headers = {k.lower(): v for k, v in signed("github", body).items()}
    assert verify("github", headers, body, SECRET)


def test_secrets_come_as_text_from_the_environment_or_from_a_file(tmp_path):
    secret_file = tmp_path / "hook-secret"
    secret_file.write_text(SECRET + "\n")
    env = {"HOOK_SECRET": SECRET, "NODUS_GITOPS_WEBHOOK_SECRET_GITEA": SECRET}
    assert resolve_secret("github", {"github": SECRET}, {}) == SECRET
    assert resolve_secret("github", {"github": {"secretEnv": "HOOK_SECRET"}}, env) == SECRET
    assert resolve_secret("github", {"github": {"secretFile": str(secret_file)}}, {}) == SECRET
    assert resolve_secret("gitea", {}, env) == SECRET
    assert resolve_secret("gitlab", {"gitlab": {"secretEnv": "UNSET"}}, env) is None
    body = push_body("github")
    status, _ = handle(_service("github"), "github", signed("github", body), body,
                       {"github": {"secretFile": str(secret_file)}})
    assert status == 202


def test_headers_as_the_http_server_gives_them():
    body = push_body("github")
    message = Message()
    for name, value in signed("github", body).items():
        message[name] = value
    service = _service("github")
    assert handle(service, "github", message, body, {"github": SECRET})[0] == 202
    assert service.triggered == ["team-a"]


def test_bindings_are_matched_by_repository_path_whatever_the_url_form():
    bindings = [("a", "https://user:tok@github.com/Team/GPU-jobs.git"),
                ("b", "git@github.com:team/other.git"), ("c", "/srv/git/team/gpu-jobs")]
    assert match_bindings(["team/gpu-jobs"], bindings) == ["a"]  # a local path is not it
    assert match_bindings(["https://github.com/team/other"], bindings) == ["b"]
    assert match_bindings(["someone/else"], bindings) == []
