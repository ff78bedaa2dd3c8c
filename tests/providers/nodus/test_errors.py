"""Failures a live endpoint cannot be made to produce on demand (403, 409 Conflict, 429,
5xx, timeouts), each mapped to the reconciler's errors, on the recorded API."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import httpx
import pytest
from nodus_gitops.floor.errors import NotFoundError, PermanentError, TransientError
from nodus_gitops.floor.retry import retry_after
from nodus_gitops.providers.nodus.errors import Conflict

from tests.providers.nodus.conftest import API_KEY, Backend, fixture, status

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
SELECTOR = "nodus.dev/managed-by=nodus-gitops,nodus.dev/instance=test"


def test_forbidden_names_the_key_setting_and_the_fix(recorded: Backend) -> None:
    wl = recorded.workload("Pipeline")
    recorded.reply("POST", recorded.path("Pipeline"), status=403,
                   json=status("forbidden", "Pipeline", wl.key.name))
    with pytest.raises(PermanentError) as caught:
        recorded.provider.create(wl, "idem")
    message = str(caught.value)
    assert "403 Forbidden" in message and "NODUS_API_KEY" in message
    assert "grant it access to the project" in message
    assert not isinstance(caught.value, TransientError)


def test_conflict_on_patch_rereads_and_retries(recorded: Backend) -> None:
    wl = recorded.workload("Job")
    path = recorded.path("Job", wl.key.name)
    recorded.reply("PATCH", path, status=409, json=status("conflict", "Job", wl.key.name))
    recorded.reply("GET", path, json=recorded.served(wl))
    recorded.reply("PATCH", path, json=recorded.served(wl, spec={"timeout": "20m"}))
    observed = recorded.provider.patch(wl, {"spec": {"timeout": "20m"}})
    assert observed.key == wl.key
    patch1, get, patch2 = recorded.take()
    recorded.assert_request(get, "GET", path)
    assert patch1.content == patch2.content  # the same merge patch, sent again


def test_conflict_on_patch_gives_up_after_three_retries(recorded: Backend) -> None:
    wl = recorded.workload("Sweep")
    path = recorded.path("Sweep", wl.key.name)
    for attempt in range(4):
        recorded.reply("PATCH", path, status=409,
                       json=status("conflict", "Sweep", wl.key.name))
        if attempt < 3:
            recorded.reply("GET", path, json=recorded.served(wl))
    with pytest.raises(Conflict, match="after 3 retries") as caught:
        recorded.provider.patch(wl, {"spec": {"maxParallel": 3}})
    assert isinstance(caught.value, TransientError)  # the journal retries it later
    assert [r.method for r in recorded.take()] == ["PATCH", "GET"] * 3 + ["PATCH"]


@pytest.mark.parametrize("reread, error, message", [
    ("gone", NotFoundError, "no longer exists"),
    ("replaced", PermanentError, "does not manage"),
])
def test_conflict_then_the_resource_is_not_ours_anymore(recorded: Backend, reread: str,
                                                        error: type, message: str) -> None:
    wl = recorded.workload("Job")
    path = recorded.path("Job", wl.key.name)
    recorded.reply("PATCH", path, status=409, json=status("conflict", "Job", wl.key.name))
    if reread == "gone":
        recorded.reply("GET", path, status=404, json=status("not-found", "Job", wl.key.name))
    else:
        replaced = recorded.served(recorded.workload("Job", managed=False))
        recorded.reply("GET", path, json=replaced)
    with pytest.raises(error, match=message):
        recorded.provider.patch(wl, {"spec": {"timeout": "20m"}})


def test_already_exists_then_gone_is_transient(recorded: Backend) -> None:
    wl = recorded.workload("Job")
    recorded.reply("POST", recorded.path("Job"), status=409,
                   json=status("already-exists", "Job", wl.key.name))
    recorded.reply("GET", recorded.path("Job", wl.key.name), status=404,
                   json=status("not-found", "Job", wl.key.name))
    with pytest.raises(TransientError, match="gone"):
        recorded.provider.create(wl, "idem")


@pytest.mark.parametrize("code, answer, headers, delay", [
    (429, "status-too-many-requests.json", {"Retry-After": "7"}, 7.0),
    (503, "status-service-unavailable.json",
     {"Retry-After": "Mon, 30 Nov 2026 12:00:42 GMT"}, 42.0),
    (500, "status-internal-error.json", {}, None),
])
def test_throttling_and_server_errors_are_transient_with_retry_after(
        recorded: Backend, code: int, answer: str, headers: dict, delay: float | None) -> None:
    provider = recorded.make_provider(API_KEY, now=lambda: NOW)
    wl = recorded.workload("Job")
    recorded.reply("GET", recorded.path("Job", wl.key.name), status=code,
                   json=fixture(answer), headers=headers)
    with pytest.raises(TransientError) as caught:
        provider.get(wl.key)
    assert caught.value.delay == delay
    assert str(code) in str(caught.value)


def test_a_body_that_is_not_a_status_still_maps(recorded: Backend) -> None:
    wl = recorded.workload("Job")
    recorded.reply("GET", recorded.path("Job", wl.key.name), status=502,
                   headers={"Content-Type": "text/html"},
                   content=b"<html><body>502 Bad Gateway</body></html>")
    with pytest.raises(TransientError, match="502"):
        recorded.provider.get(wl.key)


@pytest.mark.parametrize("failure", [httpx.ReadTimeout("read timed out"),
                                     httpx.ConnectError("connection refused")])
def test_timeouts_are_transient_and_the_retry_reuses_the_idempotency_key(
        recorded: Backend, failure: Exception) -> None:
    wl = recorded.workload("Job")
    recorded.reply("POST", recorded.path("Job"), error=failure)
    with pytest.raises(TransientError, match="Nodus API"):
        recorded.provider.create(wl, "idem-journal-1")
    # The journal retries with the key it recorded: the server returns the first run.
    recorded.reply("POST", recorded.path("Job"), status=201, json=recorded.served(wl))
    recorded.provider.create(wl, "idem-journal-1")
    first, second = recorded.take()
    assert first.headers["Idempotency-Key"] == second.headers["Idempotency-Key"]
    assert first.content == second.content


def test_list_follows_continue_and_drops_items_without_our_labels(recorded: Backend) -> None:
    mine, copied = recorded.workload("Job"), recorded.workload("Job", name="copied",
                                                                instance="prod")
    indexed = recorded.workload("Job", name="indexed-outputs")
    recorded.reply("GET", recorded.path("Job"), params={"labelSelector": SELECTOR},
                   json={"kind": "JobList", "metadata": {"continue": "page-2"},
                         "items": [recorded.served(mine), recorded.served(copied)]})
    recorded.reply("GET", recorded.path("Job"),
                   params={"labelSelector": SELECTOR, "continue": "page-2"},
                   json={"kind": "JobList", "metadata": {},
                         "items": [recorded.served(indexed, "job-indexed-outputs.json")]})
    for kind in ("Pipeline", "Sweep"):
        recorded.reply("GET", recorded.path(kind), params={"labelSelector": SELECTOR},
                       json={"kind": f"{kind}List", "metadata": {}, "items": []})
    owned = recorded.provider.list_owned("team-a", "test")
    assert [o.key.name for o in owned] == ["hello", "indexed-outputs"]
    assert owned[1].status["completedIndexes"] == "0-3"


def test_the_api_key_never_reaches_messages_reprs_or_logs(
        recorded: Backend, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    wl = recorded.workload("Job")
    messages = [repr(recorded.provider), repr(recorded.provider.config),
                str(recorded.provider.config)]
    for code, answer in ((401, "status-unauthorized.json"), (403, "status-forbidden.json"),
                         (500, "status-internal-error.json")):
        recorded.reply("GET", recorded.path("Job", wl.key.name), status=code,
                       json=fixture(answer, plural="jobs", name=wl.key.name))
        with pytest.raises(Exception) as caught:  # noqa: B017 - any error, checked below
            recorded.provider.get(wl.key)
        messages.append(str(caught.value))
    text = "\n".join(messages + [r.getMessage() + repr(r.__dict__) for r in caplog.records])
    assert API_KEY not in text
    assert "NODUS_API_KEY" in text  # the setting is named instead


def test_retry_after_forms() -> None:
    now = NOW.timestamp()
    assert retry_after("120", now) == 120.0
    assert retry_after("Mon, 30 Nov 2026 11:59:00 GMT", now) == 0.0  # in the past
    assert retry_after("soon", now) is None
    assert retry_after(None, now) is None
    assert retry_after(" 5 ", now) == 5.0
