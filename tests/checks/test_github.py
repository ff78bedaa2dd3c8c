"""GitHub writers against GitHub's documented request and response shapes (respx)."""

from __future__ import annotations

import logging

import httpx
import pytest
import respx
from nodus_gitops.checks.github import GitHubChecksWriter, GitHubStatusWriter
from nodus_gitops.checks.model import Annotation
from nodus_gitops.floor.errors import PermanentError, TransientError
from nodus_gitops.hosts.client import RetryPolicy
from nodus_gitops.hosts.github import github_auth, github_headers

from tests.checks.support import SHA, TOKEN, FakeTime, body, client, recorded, run

API = "https://api.github.com"
REPO = "/repos/octo-org/gpu-jobs"


def _api(time: FakeTime, **kwargs):
    return client(API, github_auth, time, headers=github_headers(), **kwargs)


def _assert_github_headers(request: httpx.Request) -> None:
    assert request.headers["Authorization"] == f"Bearer {TOKEN}"
    assert request.headers["Accept"] == "application/vnd.github+json"
    assert request.headers["X-GitHub-Api-Version"] == "2022-11-28"


def _problems(n: int) -> tuple[Annotation, ...]:
    return tuple(Annotation(f"jobs/j{i}.yaml", i + 1, f"problem {i}") for i in range(n))


def test_pending_creates_an_in_progress_run_and_completion_patches_it():
    time = FakeTime()
    writer = GitHubChecksWriter(_api(time), "octo-org/gpu-jobs")
    with respx.mock(assert_all_called=True) as router:
        lookup = router.get(f"{API}{REPO}/commits/{SHA}/check-runs").mock(
            return_value=recorded("github", "check_runs_for_ref_empty"))
        create = router.post(f"{API}{REPO}/check-runs").mock(
            return_value=recorded("github", "check_run_created"))
        update = router.patch(f"{API}{REPO}/check-runs/4").mock(
            return_value=recorded("github", "check_run_updated"))
        writer.post(run("pending", title="Sync started", summary="applying a1b2c3d"))
        writer.post(run("success"))

    assert lookup.call_count == 1  # the id is kept in memory after the create
    get = lookup.calls[0].request
    assert get.url.params["check_name"] == "nodus/prod/sync"
    _assert_github_headers(get)
    created = create.calls[0].request
    _assert_github_headers(created)
    assert body(created) == {
        "name": "nodus/prod/sync", "head_sha": SHA, "status": "in_progress",
        "details_url": "https://nodus.example/repos/team-a",
        "output": {"title": "Sync started", "summary": "applying a1b2c3d"}}
    patched = update.calls[0].request
    _assert_github_headers(patched)
    assert body(patched) == {
        "status": "completed", "conclusion": "success",
        "details_url": "https://nodus.example/repos/team-a",
        "output": {"title": "Synced", "summary": "3 created, 1 configured"}}


@pytest.mark.parametrize("state", ["failure", "error"])
def test_failure_and_error_conclude_failure(state):
    time = FakeTime()
    writer = GitHubChecksWriter(_api(time), "octo-org/gpu-jobs")
    with respx.mock() as router:
        router.get(f"{API}{REPO}/commits/{SHA}/check-runs").mock(
            return_value=recorded("github", "check_runs_for_ref_empty"))
        create = router.post(f"{API}{REPO}/check-runs").mock(
            return_value=recorded("github", "check_run_created_7"))
        writer.post(run(state, title="Sync failed", summary="remote unreachable",
                        details_url=None))
    sent = body(create.calls[0].request)
    assert (sent["status"], sent["conclusion"]) == ("completed", "failure")
    assert "details_url" not in sent


def test_annotations_go_fifty_per_request():
    time = FakeTime()
    writer = GitHubChecksWriter(_api(time), "octo-org/gpu-jobs")
    problems = _problems(120)
    with respx.mock() as router:
        router.get(f"{API}{REPO}/commits/{SHA}/check-runs").mock(
            return_value=recorded("github", "check_runs_for_ref_empty"))
        create = router.post(f"{API}{REPO}/check-runs").mock(
            return_value=recorded("github", "check_run_created_7"))
        update = router.patch(f"{API}{REPO}/check-runs/7").mock(
            return_value=recorded("github", "check_run_updated"))
        writer.post(run("failure", title="120 problems", summary="see annotations",
                        annotations=problems))

    first = body(create.calls[0].request)["output"]["annotations"]
    rest = [body(c.request) for c in update.calls]
    assert [len(first)] + [len(r["output"]["annotations"]) for r in rest] == [50, 50, 20]
    assert first[0] == {"path": "jobs/j0.yaml", "start_line": 1, "end_line": 1,
                        "annotation_level": "failure", "message": "problem 0"}
    sent = first + [a for r in rest for a in r["output"]["annotations"]]
    assert [a["message"] for a in sent] == [p.message for p in problems]
    for r in rest:  # a PATCH of annotations only keeps the title and summary
        assert set(r) == {"output"}
        assert r["output"]["title"] == "120 problems"


def test_a_pull_request_with_thousands_of_problems_costs_a_bounded_number_of_requests():
    """Every request is paced and counts against GitHub's limits, and a preview holds its
    binding while it posts: 50,000 invalid files must not mean 1,000 requests."""
    time = FakeTime()
    writer = GitHubChecksWriter(_api(time), "octo-org/gpu-jobs")
    with respx.mock() as router:
        router.get(f"{API}{REPO}/commits/{SHA}/check-runs").mock(
            return_value=recorded("github", "check_runs_for_ref_empty"))
        create = router.post(f"{API}{REPO}/check-runs").mock(
            return_value=recorded("github", "check_run_created_7"))
        update = router.patch(f"{API}{REPO}/check-runs/7").mock(
            return_value=recorded("github", "check_run_updated"))
        writer.post(run("failure", title="50000 problems", summary="see the summary",
                        annotations=_problems(50_000)))
    assert create.call_count + update.call_count == 20  # 1,000 annotations, 50 a request
    sent = [a for c in [*create.calls, *update.calls]
            for a in body(c.request)["output"]["annotations"]]
    assert [a["message"] for a in sent] == [f"problem {i}" for i in range(1000)]


def test_a_restarted_writer_finds_the_run_in_progress_and_patches_it():
    time = FakeTime()
    writer = GitHubChecksWriter(_api(time), "octo-org/gpu-jobs")
    with respx.mock(assert_all_called=False) as router:
        router.get(f"{API}{REPO}/commits/{SHA}/check-runs").mock(
            return_value=recorded("github", "check_runs_for_ref_in_progress"))
        create = router.post(f"{API}{REPO}/check-runs")
        update = router.patch(f"{API}{REPO}/check-runs/9").mock(
            return_value=recorded("github", "check_run_updated"))
        writer.post(run("success"))
    assert create.call_count == 0
    assert body(update.calls[0].request)["conclusion"] == "success"


def test_a_completed_run_is_final_so_a_new_post_creates_a_new_run():
    time = FakeTime()
    writer = GitHubChecksWriter(_api(time), "octo-org/gpu-jobs")
    with respx.mock(assert_all_called=False) as router:
        router.get(f"{API}{REPO}/commits/{SHA}/check-runs").mock(
            return_value=recorded("github", "check_runs_for_ref_completed"))
        create = router.post(f"{API}{REPO}/check-runs").mock(
            return_value=recorded("github", "check_run_created_7"))
        update = router.patch(url__regex=rf"{API}{REPO}/check-runs/\d+")
        writer.post(run("pending", title="Sync started", summary=""))
    assert create.call_count == 1 and update.call_count == 0
    assert body(create.calls[0].request)["output"]["summary"] == "Sync started"


def test_statuses_mode_posts_the_state_and_a_140_character_description():
    time = FakeTime()
    writer = GitHubStatusWriter(_api(time), "octo-org/gpu-jobs")
    long_title = "x" * 200
    with respx.mock() as router:
        route = router.post(f"{API}{REPO}/statuses/{SHA}").mock(
            return_value=recorded("github", "status_created"))
        for state in ("pending", "success", "failure", "error"):
            writer.post(run(state, title=long_title if state == "error" else "Synced"))
    sent = [body(c.request) for c in route.calls]
    for call in route.calls:
        _assert_github_headers(call.request)
    assert [s["state"] for s in sent] == ["pending", "success", "failure", "error"]
    assert sent[1] == {"state": "success", "context": "nodus/prod/sync",
                       "description": "Synced: 3 created, 1 configured",
                       "target_url": "https://nodus.example/repos/team-a"}
    assert len(sent[3]["description"]) == 140 and sent[3]["description"].endswith("…")


@pytest.mark.parametrize(("fixture", "expected_sleep"), [
    ("server_error", None), ("bad_gateway", None),
    ("too_many_requests", 2.0), ("secondary_rate_limit", 30.0),
    ("secondary_rate_limit_no_headers", 60.0),
])
def test_retryable_answers_are_retried_after_the_right_wait(fixture, expected_sleep):
    time = FakeTime()
    writer = GitHubStatusWriter(_api(time), "octo-org/gpu-jobs")
    with respx.mock() as router:
        route = router.post(f"{API}{REPO}/statuses/{SHA}").mock(side_effect=[
            recorded("github", fixture), recorded("github", "status_created")])
        writer.post(run())
    assert route.call_count == 2
    assert body(route.calls[0].request) == body(route.calls[1].request)
    assert len(time.sleeps) == 1
    if expected_sleep is None:  # equal-jitter backoff after the first failure: [0.5, 1]
        assert 0.5 <= time.sleeps[0] <= 1.0
    else:
        assert time.sleeps[0] == expected_sleep


def test_an_exhausted_rate_limit_waits_for_the_reset_and_holds_the_host_back():
    time = FakeTime()
    reset = str(int(time.wall()) + 20)
    writer = GitHubStatusWriter(_api(time), "octo-org/gpu-jobs")
    with respx.mock() as router:
        route = router.post(f"{API}{REPO}/statuses/{SHA}").mock(side_effect=[
            recorded("github", "rate_limit_exhausted", RESET=reset),
            recorded("github", "status_created")])
        writer.post(run())
    assert route.call_count == 2
    assert time.sleeps == [21.0]  # until the reset, plus a second of margin


def test_a_reset_too_far_away_is_left_to_the_next_post_without_sending_more():
    time = FakeTime()
    reset = str(int(time.wall()) + 3600)
    writer = GitHubStatusWriter(_api(time), "octo-org/gpu-jobs")
    with respx.mock() as router:
        route = router.post(f"{API}{REPO}/statuses/{SHA}").mock(
            return_value=recorded("github", "rate_limit_exhausted", RESET=reset))
        with pytest.raises(TransientError) as first:
            writer.post(run())
        assert first.value.delay == pytest.approx(3601)
        with pytest.raises(TransientError, match="held back"):
            writer.post(run("failure"))
    assert route.call_count == 1  # the second post never reached GitHub
    assert time.sleeps == []


def test_retries_stop_after_the_configured_attempts():
    time = FakeTime()
    writer = GitHubStatusWriter(_api(time, retry=RetryPolicy(attempts=3)), "octo-org/gpu-jobs")
    with respx.mock() as router:
        route = router.post(f"{API}{REPO}/statuses/{SHA}").mock(
            return_value=recorded("github", "server_error"))
        with pytest.raises(TransientError, match="answered 500: Server Error"):
            writer.post(run())
    assert route.call_count == 3 and len(time.sleeps) == 2


def test_network_errors_are_retried_then_transient():
    time = FakeTime()
    writer = GitHubStatusWriter(_api(time, retry=RetryPolicy(attempts=2)), "octo-org/gpu-jobs")
    with respx.mock() as router:
        route = router.post(f"{API}{REPO}/statuses/{SHA}").mock(
            side_effect=httpx.ConnectError("connection refused"))
        with pytest.raises(TransientError, match="ConnectError"):
            writer.post(run())
    assert route.call_count == 2


@pytest.mark.parametrize(("fixture", "words"), [
    ("bad_credentials", ["401", "Bad credentials", "token was rejected",
                         "checks.test.tokenEnv (TEST_TOKEN)"]),
    ("forbidden", ["403", "Resource not accessible by integration", "lack permission"]),
    ("validation_failed", ["422", "Validation Failed", "head_sha invalid"]),
])
def test_permanent_answers_are_not_retried_and_name_the_setting(fixture, words, caplog):
    time = FakeTime()
    writer = GitHubChecksWriter(_api(time), "octo-org/gpu-jobs")
    caplog.set_level(logging.DEBUG)
    with respx.mock() as router:
        router.get(f"{API}{REPO}/commits/{SHA}/check-runs").mock(
            return_value=recorded("github", "check_runs_for_ref_empty"))
        route = router.post(f"{API}{REPO}/check-runs").mock(
            return_value=recorded("github", fixture))
        with pytest.raises(PermanentError) as raised:
            writer.post(run())
    assert route.call_count == 1 and time.sleeps == []
    for word in words:
        assert word in str(raised.value)
    assert TOKEN not in str(raised.value) and TOKEN not in caplog.text


def test_writes_to_one_host_are_spaced_by_the_minimum_interval():
    time = FakeTime()
    writer = GitHubStatusWriter(_api(time, min_interval=2.0), "octo-org/gpu-jobs")
    with respx.mock() as router:
        router.post(f"{API}{REPO}/statuses/{SHA}").mock(
            return_value=recorded("github", "status_created"))
        for _ in range(3):
            writer.post(run())
    assert time.sleeps == [2.0, 2.0]


def test_enterprise_api_base_url_is_used_as_configured():
    time = FakeTime()
    api = client("https://ghe.example/api/v3", github_auth, time, headers=github_headers())
    writer = GitHubStatusWriter(api, "team/gpu-jobs")
    with respx.mock() as router:
        route = router.post(f"https://ghe.example/api/v3/repos/team/gpu-jobs/statuses/{SHA}")
        route.mock(return_value=recorded("github", "status_created"))
        writer.post(run())
    assert route.call_count == 1
