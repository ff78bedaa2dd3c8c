"""build_writers: the `checks:` settings into writers, with errors that name the setting."""

from __future__ import annotations

from pathlib import Path

import pytest
import respx
from nodus_gitops.checks.gitea import GiteaStatusWriter
from nodus_gitops.checks.github import GitHubChecksWriter, GitHubStatusWriter
from nodus_gitops.checks.gitlab import GitLabStatusWriter
from nodus_gitops.checks.gitnotes import GitNotesWriter
from nodus_gitops.checks.poster import build_writers
from nodus_gitops.config import Binding
from nodus_gitops.floor.errors import ConfigError
from nodus_gitops.hosts.client import HostLimiter
from nodus_gitops.hosts.urls import split_repo_url

from tests.checks.support import SHA, TOKEN, recorded, run

GH = Binding(id="team-a", url="https://github.com/octo-org/gpu-jobs.git")
ENV = {"GITHUB_TOKEN": TOKEN, "GITLAB_TOKEN": TOKEN, "GITEA_TOKEN": TOKEN}


def test_github_modes_and_default_api():
    writers = build_writers({"github": {"mode": "checks"}}, GH, environ=ENV)
    assert isinstance(writers["github"], GitHubChecksWriter)
    writers = build_writers({"github": {}}, GH, environ=ENV)
    assert isinstance(writers["github"], GitHubStatusWriter)
    with respx.mock() as router:
        route = router.post(f"https://api.github.com/repos/octo-org/gpu-jobs/statuses/{SHA}")
        route.mock(return_value=recorded("github", "status_created"))
        writers["github"].post(run())
    assert route.calls[0].request.headers["X-GitHub-Api-Version"] == "2022-11-28"


def test_enterprise_gitlab_and_gitea_apis_follow_the_repository_host(tmp_path: Path):
    ghe = Binding(id="b", url="git@ghe.corp.example:team/gpu-jobs.git")
    gl = Binding(id="c", url="https://gitlab.corp.example/platform/ml/gpu-jobs.git")
    gt = Binding(id="d", url="https://forgejo.example/team/gpu-jobs")
    cases = [(ghe, "github", f"https://ghe.corp.example/api/v3/repos/team/gpu-jobs/statuses/{SHA}"),
             (gl, "gitlab", "https://gitlab.corp.example/api/v4/projects/"
                            f"platform%2Fml%2Fgpu-jobs/statuses/{SHA}"),
             (gt, "gitea", f"https://forgejo.example/api/v1/repos/team/gpu-jobs/statuses/{SHA}")]
    for binding, name, url in cases:
        writer = build_writers({name: True}, binding, environ=ENV)[name]
        with respx.mock() as router:
            route = router.post(url).mock(return_value=recorded(name, "status_created"))
            writer.post(run())
        assert route.call_count == 1, name
    assert isinstance(build_writers({"gitlab": {}}, gl, environ=ENV)["gitlab"],
                      GitLabStatusWriter)
    assert isinstance(build_writers({"gitea": {}}, gt, environ=ENV)["gitea"], GiteaStatusWriter)


def test_configured_api_url_and_repository_win():
    writer = build_writers({"gitea": {"apiUrl": "https://git.example/api/v1",
                                      "repository": "other/repo", "tokenEnv": "MY_TOKEN"}},
                           GH, environ={"MY_TOKEN": TOKEN})["gitea"]
    with respx.mock() as router:
        route = router.post(f"https://git.example/api/v1/repos/other/repo/statuses/{SHA}")
        route.mock(return_value=recorded("gitea", "status_created"))
        writer.post(run())
    assert route.calls[0].request.headers["Authorization"] == f"token {TOKEN}"


def test_a_token_file_is_read_at_each_write(tmp_path: Path):
    token_file = tmp_path / "token"
    token_file.write_text("first-token\n")
    writer = build_writers({"github": {"tokenFile": str(token_file)}}, GH, environ={})["github"]
    with respx.mock() as router:
        route = router.post(f"https://api.github.com/repos/octo-org/gpu-jobs/statuses/{SHA}")
        route.mock(return_value=recorded("github", "status_created"))
        writer.post(run())
        token_file.write_text("rotated-token\n")
        writer.post(run())
    assert [c.request.headers["Authorization"] for c in route.calls] == [
        "Bearer first-token", "Bearer rotated-token"]


@pytest.mark.parametrize(("settings", "environ", "words"), [
    ({"github": {}}, {}, ["checks.github.tokenEnv", "GITHUB_TOKEN"]),
    ({"gitlab": {"tokenEnv": "GL"}}, {}, ["checks.gitlab.tokenEnv", "GL"]),
    ({"gitea": {"tokenFile": "/nonexistent/token"}}, {}, ["checks.gitea.tokenFile"]),
    ({"github": {"mode": "app"}}, ENV, ["checks.github.mode"]),
    ({"github": {"token": "x"}}, ENV, ["checks.github", "'token'"]),
    ({"bitbucket": {}}, ENV, ["unknown check writer 'bitbucket'"]),
    ({"github": {"minInterval": "fast"}}, ENV, ["checks.github.minInterval"]),
    ({"gitnotes": {"push": "yes"}}, ENV, ["checks.gitnotes.push"]),
])
def test_bad_settings_are_config_errors_naming_the_setting(settings, environ, words):
    with pytest.raises(ConfigError) as raised:
        build_writers(settings, GH, environ=environ, mirror_dir=Path("/nonexistent"))
    for word in words:
        assert word in str(raised.value)


def test_a_local_path_binding_needs_the_repository_setting():
    local = Binding(id="e", url="/srv/git/gpu-jobs.git")
    with pytest.raises(ConfigError, match="checks.github.apiUrl"):
        build_writers({"github": {}}, local, environ=ENV)
    with pytest.raises(ConfigError, match="checks.github.repository"):
        build_writers({"github": {"apiUrl": "https://api.github.com"}}, local, environ=ENV)


def test_gitnotes_is_the_default_and_false_turns_a_writer_off(tmp_path: Path):
    local = Binding(id="e", url=str(tmp_path / "remote.git"))
    writers = build_writers({}, local, mirror_dir=tmp_path / "mirrors")
    assert list(writers) == ["gitnotes"] and isinstance(writers["gitnotes"], GitNotesWriter)
    assert build_writers({"gitnotes": False}, local, mirror_dir=tmp_path / "mirrors") == {}
    assert build_writers({}, local) == {}  # no mirror, no default


def test_webhook_secrets_in_the_checks_settings_are_not_a_writer(tmp_path: Path):
    local = Binding(id="e", url=str(tmp_path / "remote.git"))
    writers = build_writers({"webhooks": {"github": "s"}}, local, mirror_dir=tmp_path / "m")
    assert list(writers) == ["gitnotes"]
    writers = build_writers({"webhooks": {"github": "s"}, "github": {}}, GH, environ=ENV)
    assert list(writers) == ["github"]


@pytest.mark.parametrize(("url", "expected"), [
    ("https://github.com/o/r.git", ("https://github.com", "o/r")),
    ("https://user:tok@gitlab.com/g/sub/p.git", ("https://gitlab.com", "g/sub/p")),
    ("git@github.com:o/r.git", ("https://github.com", "o/r")),
    ("ssh://git@ghe.example:2222/o/r", ("https://ghe.example", "o/r")),
    ("http://127.0.0.1:3000/o/r", ("http://127.0.0.1:3000", "o/r")),
])
def test_split_repo_url(url, expected):
    assert split_repo_url(url) == expected


def test_split_repo_url_refuses_paths_without_leaking_credentials():
    with pytest.raises(ValueError):
        split_repo_url("/srv/git/repo.git")
    with pytest.raises(ValueError) as raised:
        split_repo_url("https://user:tok@host/")
    assert "tok" not in str(raised.value)


def _app_binding(**fields) -> Binding:
    from nodus_gitops.hosts.github_app import GitHubApp

    from tests.checks.support import app_key_pem

    app = GitHubApp.from_settings({"appId": 1, "privateKeyEnv": "K", "installationId": 5,
                                   "apiUrl": "https://ghe.corp.example/api/v3"},
                                  {"K": app_key_pem()})
    return Binding(id="a", url="https://ghe.corp.example/team/gpu-jobs.git", github_app=app,
                   **fields)


def test_an_app_binding_writes_check_runs_with_the_apps_token_and_no_token_setting():
    binding = _app_binding()
    writer = build_writers({"github": True}, binding, environ={})["github"]
    assert isinstance(writer, GitHubChecksWriter)
    statuses = build_writers({"github": {"mode": "statuses"}}, binding, environ={})["github"]
    assert isinstance(statuses, GitHubStatusWriter)
    with respx.mock() as router:
        router.post("https://ghe.corp.example/api/v3/app/installations/5/access_tokens").mock(
            return_value=recorded("github", "installation_token", fields={
                "token": "ghs_app", "expires_at": "2099-01-01T00:00:00Z"}))
        route = router.post(f"https://ghe.corp.example/api/v3/repos/team/gpu-jobs/statuses/{SHA}")
        route.mock(return_value=recorded("github", "status_created"))
        statuses.post(run())
    assert route.calls[0].request.headers["Authorization"] == "Bearer ghs_app"


def test_the_apps_tokens_go_only_to_the_apps_api():
    binding = _app_binding()
    with pytest.raises(ConfigError) as raised:
        build_writers({"github": {"apiUrl": "https://evil.example/api/v3"}}, binding,
                      environ={})
    assert "checks.github.apiUrl (https://evil.example/api/v3)" in str(raised.value)
    assert "githubApp.apiUrl (https://ghe.corp.example/api/v3)" in str(raised.value)
    for same in ("https://ghe.corp.example/api/v3", "https://ghe.corp.example/api/v3/"):
        writer = build_writers({"github": {"apiUrl": same}}, binding, environ={})["github"]
        assert str(writer._api.base_url).rstrip("/") == "https://ghe.corp.example/api/v3"


def test_comments_need_a_hosted_writer(tmp_path: Path):
    from nodus_gitops.checks.poster import build_poster

    binding = Binding(id="c", url="https://github.com/octo-org/gpu-jobs.git", comments=True)
    with pytest.raises(ConfigError, match="comments: true needs a host to comment through"):
        build_poster(None, {"gitnotes": {}}, binding, mirror_dir=tmp_path)
    build_poster(None, {"github": {}}, binding, environ=ENV)  # GitHub can comment


@pytest.mark.parametrize("shared", [True, False])
def test_bindings_given_one_limiter_pace_their_writes_to_a_host_together(shared: bool):
    other = Binding(id="team-b", url="https://github.com/octo-org/eval-jobs.git")
    limiter = HostLimiter() if shared else None
    slept: list[float] = []
    settings = {"github": {"minInterval": 30}}
    writers = [build_writers(settings, binding, environ=ENV, limiter=limiter,
                             sleep=slept.append)["github"] for binding in (GH, other)]
    with respx.mock() as router:
        router.post(url__regex=r"/statuses/").mock(return_value=recorded("github",
                                                                         "status_created"))
        for writer in writers:
            writer.post(run())
    if shared:  # the second binding waits for the first one's interval
        assert len(slept) == 1 and 29 < slept[0] <= 30
    else:  # without one, each binding paces only itself: today's default
        assert slept == []
