"""GitLab commit statuses against GitLab's documented API and its transition rules."""

from __future__ import annotations

import pytest
import respx
from nodus_gitops.checks.gitlab import GitLabStatusWriter, gitlab_auth, may_send
from nodus_gitops.floor.errors import NotFoundError, PermanentError

from tests.checks.support import SHA, TOKEN, FakeTime, body, client, recorded, run

API = "https://gitlab.example.com/api/v4"
STATUSES = f"{API}/projects/platform%2Fml%2Fgpu-jobs/statuses/{SHA}"


def _writer(time: FakeTime) -> GitLabStatusWriter:
    return GitLabStatusWriter(client(API, gitlab_auth, time), "platform/ml/gpu-jobs")


def test_states_are_mapped_and_every_request_is_as_documented():
    time = FakeTime()
    writer = _writer(time)
    with respx.mock() as router:
        route = router.post(STATUSES).mock(return_value=recorded("gitlab", "status_created"))
        writer.post(run("pending", title="Sync started", summary=""))
        writer.post(run("failure", title="2 invalid manifests", summary="jobs/a.yaml:3: x"))
        writer.post(run("success", context="nodus/prod/plan", title="Plan: 1 to create",
                        summary="", details_url=None))
    requests = [c.request for c in route.calls]
    for request in requests:
        assert request.method == "POST"
        assert request.url.raw_path.decode() == (
            f"/api/v4/projects/platform%2Fml%2Fgpu-jobs/statuses/{SHA}")
        assert request.headers["PRIVATE-TOKEN"] == TOKEN
        assert "Authorization" not in request.headers
    assert [body(r) for r in requests] == [
        {"state": "running", "name": "nodus/prod/sync", "description": "Sync started",
         "target_url": "https://nodus.example/repos/team-a"},
        {"state": "failed", "name": "nodus/prod/sync",
         "description": "2 invalid manifests: jobs/a.yaml:3: x",
         "target_url": "https://nodus.example/repos/team-a"},
        {"state": "success", "name": "nodus/prod/plan", "description": "Plan: 1 to create"},
    ]


def test_error_is_failed_too():
    time = FakeTime()
    with respx.mock() as router:
        route = router.post(STATUSES).mock(return_value=recorded("gitlab", "status_created"))
        _writer(time).post(run("error", title="remote unreachable"))
    assert body(route.calls[0].request)["state"] == "failed"


def test_repeats_and_steps_back_are_skipped_without_an_error():
    time = FakeTime()
    writer = _writer(time)
    with respx.mock() as router:
        route = router.post(STATUSES).mock(return_value=recorded("gitlab", "status_created"))
        writer.post(run("pending"))
        writer.post(run("pending", summary="still applying"))  # running -> running
        writer.post(run("success"))
        writer.post(run("success", summary="now with a new summary"))  # repeat
        writer.post(run("pending"))  # finished -> running: backwards
        writer.post(run("failure"))  # finished -> another finished state: allowed
        writer.post(run("error"))  # failed -> failed: a repeat on GitLab
    assert [body(c.request)["state"] for c in route.calls] == ["running", "success", "failed"]


def test_a_transition_gitlab_refuses_counts_as_already_shown():
    time = FakeTime()
    writer = _writer(time)  # a fresh writer: GitLab already has `running` from before
    with respx.mock() as router:
        route = router.post(STATUSES).mock(
            return_value=recorded("gitlab", "transition_rejected"))
        writer.post(run("pending"))
        writer.post(run("pending"))
    assert route.call_count == 1


@pytest.mark.parametrize(("fixture", "error", "words"), [
    ("validation_error", PermanentError, ["400", "target_url"]),
    ("unauthorized", PermanentError, ["401 Unauthorized", "token was rejected"]),
    ("forbidden", PermanentError, ["403 Forbidden", "lack permission"]),
    ("not_found", NotFoundError, ["404 Project Not Found"]),
])
def test_other_refusals_raise_permanent_errors(fixture, error, words):
    time = FakeTime()
    with respx.mock() as router:
        router.post(STATUSES).mock(return_value=recorded("gitlab", fixture))
        with pytest.raises(error) as raised:
            _writer(time).post(run("success"))
    for word in words:
        assert word in str(raised.value)
    assert TOKEN not in str(raised.value)


def test_a_refused_post_is_not_remembered_so_it_is_sent_again():
    time = FakeTime()
    writer = _writer(time)
    with respx.mock() as router:
        route = router.post(STATUSES).mock(side_effect=[
            recorded("gitlab", "server_error"), recorded("gitlab", "server_error"),
            recorded("gitlab", "server_error"), recorded("gitlab", "server_error"),
            recorded("gitlab", "status_created")])
        with pytest.raises(Exception, match="500"):
            writer.post(run("success"))
        writer.post(run("success"))
    assert route.call_count == 5


def test_429_waits_for_retry_after():
    time = FakeTime()
    with respx.mock() as router:
        route = router.post(STATUSES).mock(side_effect=[
            recorded("gitlab", "too_many_requests"), recorded("gitlab", "status_created")])
        _writer(time).post(run("success"))
    assert route.call_count == 2 and time.sleeps == [3.0]


@pytest.mark.parametrize(("last", "new", "allowed"), [
    (None, "running", True), (None, "success", True), ("running", "running", False),
    ("running", "success", True), ("running", "failed", True), ("success", "running", False),
    ("failed", "running", False), ("success", "failed", True), ("failed", "failed", False),
])
def test_transition_table(last, new, allowed):
    assert may_send(last, new) is allowed
