"""Gitea / Forgejo commit statuses against the documented API v1."""

from __future__ import annotations

import pytest
import respx
from nodus_gitops.checks.gitea import GiteaStatusWriter, gitea_auth
from nodus_gitops.floor.errors import PermanentError

from tests.checks.support import SHA, TOKEN, FakeTime, body, client, recorded, run

API = "https://git.example/api/v1"
STATUSES = f"{API}/repos/team/gpu-jobs/statuses/{SHA}"


def _writer(time: FakeTime) -> GiteaStatusWriter:
    return GiteaStatusWriter(client(API, gitea_auth, time), "team/gpu-jobs")


def test_all_four_states_are_sent_as_they_are():
    time = FakeTime()
    writer = _writer(time)
    with respx.mock() as router:
        route = router.post(STATUSES).mock(return_value=recorded("gitea", "status_created"))
        for state in ("pending", "success", "failure", "error"):
            writer.post(run(state, title=state.title(), summary=""))
    for call in route.calls:
        assert call.request.method == "POST"
        assert call.request.url.path == f"/api/v1/repos/team/gpu-jobs/statuses/{SHA}"
        assert call.request.headers["Authorization"] == f"token {TOKEN}"
    assert [body(c.request) for c in route.calls] == [
        {"state": s, "context": "nodus/prod/sync", "description": s.title(),
         "target_url": "https://nodus.example/repos/team-a"}
        for s in ("pending", "success", "failure", "error")]


def test_description_is_one_line_of_at_most_140_characters():
    time = FakeTime()
    with respx.mock() as router:
        route = router.post(STATUSES).mock(return_value=recorded("gitea", "status_created"))
        _writer(time).post(run("failure", title="Invalid", summary="\n" + "y" * 300 + "\nz"))
    description = body(route.calls[0].request)["description"]
    assert len(description) == 140 and description.startswith("Invalid: yyy")


@pytest.mark.parametrize(("fixture", "words"), [
    ("validation_error", ["422", "[State]: Required"]),
    ("unauthorized", ["401", "token is required", "token was rejected"]),
    ("forbidden", ["403", "permission"]),
])
def test_refusals_are_permanent(fixture, words):
    time = FakeTime()
    with respx.mock() as router:
        route = router.post(STATUSES).mock(return_value=recorded("gitea", fixture))
        with pytest.raises(PermanentError) as raised:
            _writer(time).post(run())
    assert route.call_count == 1
    for word in words:
        assert word in str(raised.value)
    assert TOKEN not in str(raised.value)


@pytest.mark.parametrize("fixture", ["too_many_requests", "server_error"])
def test_busy_answers_are_retried(fixture):
    time = FakeTime()
    with respx.mock() as router:
        route = router.post(STATUSES).mock(side_effect=[
            recorded("gitea", fixture), recorded("gitea", "status_created")])
        _writer(time).post(run())
    assert route.call_count == 2 and len(time.sleeps) == 1
