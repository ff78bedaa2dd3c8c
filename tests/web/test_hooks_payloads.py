"""Signed bodies that are not the payload a host sends: JSON nested without end, JSON that
is not an object, objects whose fields have other shapes. Each is a 400 that says what is
wrong, never a 500, and triggers nothing."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nodus_gitops.web.hooks import handle, sign

from tests.web.conftest import serve

SECRET = "hook-secret"  # the seeded service's GitHub webhook secret


class Recording:
    """The service's webhook side, recording what a delivery asked of it."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, ...]] = []
        self.seen: set[tuple[str, str]] = set()

    def bindings_for_repo(self, names: tuple[str, ...], host: str) -> list[str]:
        return ["ml-team"]

    def branch_of(self, binding_id: str) -> str | None:
        return "main"

    def trigger(self, binding_id: str) -> bool:
        self.asked.append(("sync", binding_id))
        return True

    def trigger_preview(self, binding_id: str, ref: str | None, head_sha: str | None,
                        pr_number: int | None) -> bool:
        self.asked.append(("preview", binding_id, str(ref), str(head_sha), str(pr_number)))
        return True

    def first_delivery(self, host: str, delivery_id: str) -> bool:
        new = (host, delivery_id) not in self.seen
        self.seen.add((host, delivery_id))
        return new


def _signed(event: str, body: bytes) -> dict[str, str]:
    return {"X-GitHub-Event": event, "X-Hub-Signature-256": f"sha256={sign(body, SECRET)}"}


def test_a_signed_body_of_100000_brackets_is_400_over_http(seeded) -> None:
    url, stop = serve(seeded)
    try:
        body = b"[" * 100_000
        with httpx.Client(base_url=url, timeout=30) as client:
            answer = client.post("/hooks/github", content=body, headers=_signed("push", body))
            assert answer.status_code == 400
            assert "nested too deep" in answer.json()["error"]
            # and the server goes on answering
            assert client.get("/healthz").status_code == 200
    finally:
        stop()  # type: ignore[operator]


@pytest.mark.parametrize(("body", "says"), [
    (b"[]", "not a JSON object"), (b'"push"', "not a JSON object"), (b"7", "not a JSON object"),
    (b"null", "not a JSON object"), (b"{", "not JSON"), (b"\xff\xfe{}", "not JSON"),
    (b'{"ref": "refs/heads/main", "repository": "acme/ml"}', "repository"),
    (b'{"ref": ["main"], "repository": {"full_name": "acme/ml"}}', "ref"),
    (b'{"repository": {"full_name": ["acme/ml"]}}', "full_name"),
    (b'{"1": ' * 5000 + b"1" + b"}" * 5000, "nested too deep"),
])
def test_a_body_that_is_not_a_push_payload_is_400_saying_why(body: bytes, says: str) -> None:
    service = Recording()
    status, answer = handle(service, "github", _signed("push", body), body, {"github": SECRET})
    assert status == 400 and says in answer["error"]
    assert service.asked == []


@pytest.mark.parametrize("pull_request", [
    [], "7", {"head": "feature"}, {"head": {"sha": 7}}, {"base": ["main"]},
])
def test_a_pull_request_of_another_shape_is_400(pull_request: Any) -> None:
    body = json.dumps({"action": "opened", "number": 7, "pull_request": pull_request,
                       "repository": {"full_name": "acme/ml"}}).encode()
    service = Recording()
    status, answer = handle(service, "github", _signed("pull_request", body), body,
                            {"github": SECRET})
    assert status == 400 and "pull_request" in answer["error"]
    assert service.asked == []


@pytest.mark.parametrize("number", [[7], {"n": 7}, "seven", 7.5, True])
def test_a_pull_request_number_that_is_not_a_number_is_400(number: Any) -> None:
    body = json.dumps({"action": "opened", "number": number, "pull_request": {
        "head": {"ref": "f", "sha": "a" * 40}, "base": {"ref": "main"}},
        "repository": {"full_name": "acme/ml"}}).encode()
    status, answer = handle(Recording(), "github", _signed("pull_request", body), body,
                            {"github": SECRET})
    assert status == 400 and "number" in answer["error"]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["ref", "after", "repository", "full_name", "pull_request", "head",
                         "base", "sha", "number", "action", "project", "object_attributes",
                         "iid", "last_commit", "id", "target_branch", "event"]),
        inner, max_size=5),
    max_leaves=20)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payload=JSON, host=st.sampled_from(["github", "gitea", "gitlab", "generic"]),
       event=st.sampled_from(["push", "pull_request"]))
def test_any_signed_json_is_answered_202_or_400_never_an_error(payload, host, event) -> None:
    body = json.dumps(payload).encode()
    headers = {"github": _signed(event, body),
               "gitea": {"X-Gitea-Event": event, "X-Gitea-Signature": sign(body, SECRET)},
               "gitlab": {"X-Gitlab-Event": "Push Hook" if event == "push" else
                          "Merge Request Hook", "X-Gitlab-Token": SECRET},
               "generic": {"X-Nodus-Signature-256": f"sha256={sign(body, SECRET)}"}}[host]
    status, answer = handle(Recording(), host, headers, body, {host: SECRET})
    assert status in (202, 400), answer
    if status == 400:
        assert answer["error"]

