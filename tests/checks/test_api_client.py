"""ApiClient behaviour every hosted writer shares: a refused token renewed once, pages
followed on the same API only, and a 403 that names the missing permission."""

from __future__ import annotations

import random

import httpx
import pytest
import respx
from nodus_gitops.floor.errors import PermanentError
from nodus_gitops.hosts.client import ApiClient, HostLimiter, RetryPolicy, Token
from nodus_gitops.hosts.github import github_auth, github_headers

from tests.checks.support import FakeTime, recorded

API = "https://api.github.com"


class Rotating:
    """A token source handing out `tok-1`, then `tok-2` once `tok-1` is refused."""

    setting = "githubApp.appId"

    def __init__(self, renewable: bool = True) -> None:
        self.current = 1
        self.renewable = renewable
        self.renewed: list[str] = []

    def get(self) -> str:
        return f"tok-{self.current}"

    def renew(self, rejected: str) -> bool:
        self.renewed.append(rejected)
        if self.renewable and rejected == self.get():
            self.current += 1
            return True
        return False


def _client(token, time: FakeTime) -> ApiClient:
    return ApiClient(base_url=API, token=token, auth=github_auth, headers=github_headers(),
                     min_interval=0.0, limiter=HostLimiter(clock=time.monotonic),
                     retry=RetryPolicy(attempts=1), sleep=time.sleep, wall=time.wall,
                     rng=random.Random(1))


def test_a_401_is_retried_once_with_a_fresh_token():
    time, source = FakeTime(), Rotating()
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["Authorization"])
        if request.headers["Authorization"] == "Bearer tok-1":
            return recorded("github", "bad_credentials")
        return recorded("github", "status_created")

    with respx.mock() as router:
        router.post(f"{API}/repos/o/r/statuses/abc").mock(side_effect=answer)
        body = _client(source, time).request("POST", "/repos/o/r/statuses/abc",
                                             json={"state": "success"})
    assert seen == ["Bearer tok-1", "Bearer tok-2"]
    assert body["state"] == "success"
    assert time.sleeps == []  # no backoff: a renewed token is tried at once


def test_a_second_401_is_not_retried_again():
    time, source = FakeTime(), Rotating()
    with respx.mock() as router:
        route = router.get(f"{API}/repos/o/r/pulls").mock(
            return_value=recorded("github", "bad_credentials"))
        with pytest.raises(PermanentError, match="token was rejected: check githubApp.appId"):
            _client(source, time).request("GET", "/repos/o/r/pulls")
    assert route.call_count == 2  # the first token, one fresh one, and no third try
    assert source.renewed == ["tok-1"]


def test_a_static_token_is_not_retried_on_401():
    time = FakeTime()
    with respx.mock() as router:
        route = router.get(f"{API}/repos/o/r/pulls").mock(
            return_value=recorded("github", "bad_credentials"))
        with pytest.raises(PermanentError):
            _client(Token(setting="checks.github.tokenEnv (X)", value="static-token"),
                    time).request("GET", "/repos/o/r/pulls")
    assert route.call_count == 1


def test_a_token_file_rewritten_after_a_401_is_used_once(tmp_path):
    path = tmp_path / "token"
    path.write_text("old-token\n")
    time = FakeTime()
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["Authorization"])
        if request.headers["Authorization"] == "Bearer old-token":
            path.write_text("new-token\n")  # rotated meanwhile by whoever mints it
            return recorded("github", "bad_credentials")
        return recorded("github", "status_created")

    with respx.mock() as router:
        router.post(f"{API}/repos/o/r/statuses/abc").mock(side_effect=answer)
        _client(Token(setting="checks.github.tokenFile", file=path), time).request(
            "POST", "/repos/o/r/statuses/abc", json={"state": "success"})
    assert seen == ["Bearer old-token", "Bearer new-token"]


def test_pages_follow_the_link_header_on_the_same_api():
    time = FakeTime()
    first = httpx.Response(200, json=[{"id": 1}], headers={
        "link": f'<{API}/repositories/9/issues/3/comments?per_page=100&page=2>; rel="next", '
                f'<{API}/repositories/9/issues/3/comments?per_page=100&page=2>; rel="last"'})
    second = httpx.Response(200, json=[{"id": 2}], headers={
        "link": f'<{API}/repositories/9/issues/3/comments?per_page=100&page=1>; rel="prev"'})
    with respx.mock() as router:
        router.get(f"{API}/repos/o/r/issues/3/comments").mock(return_value=first)
        router.get(f"{API}/repositories/9/issues/3/comments", params={"page": "2"}).mock(
            return_value=second)
        pages = list(_client(Rotating(), time).pages("/repos/o/r/issues/3/comments",
                                                     params={"per_page": "100"}))
    assert pages == [[{"id": 1}], [{"id": 2}]]


def test_a_next_page_on_another_host_is_refused():
    time = FakeTime()
    elsewhere = httpx.Response(200, json=[], headers={
        "link": '<https://evil.example/steal?page=2>; rel="next"'})
    with respx.mock() as router:
        router.get(f"{API}/repos/o/r/issues/3/comments").mock(return_value=elsewhere)
        with pytest.raises(PermanentError, match="another address"):
            list(_client(Rotating(), time).pages("/repos/o/r/issues/3/comments"))


def test_a_403_names_the_permission_github_asks_for():
    time = FakeTime()
    forbidden = recorded("github", "forbidden")
    forbidden.headers["x-accepted-github-permissions"] = "checks=write"
    with respx.mock() as router:
        router.post(f"{API}/repos/o/r/check-runs").mock(return_value=forbidden)
        with pytest.raises(PermanentError) as raised:
            _client(Rotating(), time).request("POST", "/repos/o/r/check-runs",
                                              json={"name": "nodus/ci/plan", "head_sha": "abc"})
    assert "Resource not accessible by integration" in str(raised.value)
    assert "(checks=write)" in str(raised.value)


def test_a_403_without_the_header_names_what_the_request_needs():
    time = FakeTime()
    with respx.mock() as router:
        router.post(f"{API}/repos/o/r/issues/3/comments").mock(
            return_value=recorded("github", "forbidden"))
        with pytest.raises(PermanentError, match=r"\(pull requests: write\)"):
            _client(Rotating(), time).request("POST", "/repos/o/r/issues/3/comments",
                                              json={"body": "plan"},
                                              needs="pull requests: write")
