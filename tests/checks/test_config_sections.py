"""The config's `githubApp` and `budgets` sections and the bindings' `comments` and
`credentials: {githubApp: true}`: what they give, and errors that name the setting."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
from nodus_gitops.config import load_settings
from nodus_gitops.floor.budgets import Period
from nodus_gitops.floor.errors import ConfigError
from nodus_gitops.hosts.github_app import GitHubAppCredentials

from tests.checks.support import app_key_pem

APP = "githubApp:\n  appId: 12345\n  privateKeyFile: KEYFILE\n"


def _config(tmp_path: Path, text: str) -> str:
    key = tmp_path / "app.pem"
    key.write_text(app_key_pem())
    path = tmp_path / "config.yaml"
    path.write_text(text.replace("KEYFILE", str(key)))
    return str(path)


def test_bindings_share_one_app_and_fetch_https_with_its_token(tmp_path):
    config = _config(tmp_path, APP + """repos:
  - id: a
    url: https://github.com/octo-org/gpu-jobs.git
    credentials: {githubApp: true}
    comments: true
  - id: b
    url: git@github.com:octo-org/other.git
    credentials: {githubApp: true}
  - id: c
    url: https://gitlab.com/team/jobs.git
""")
    settings = load_settings(config, environ={})
    a, b, c = settings.bindings
    assert a.github_app is settings.github_app and b.github_app is settings.github_app
    assert c.github_app is None and not c.comments and a.comments
    credentials = a.credentials()
    assert isinstance(credentials, GitHubAppCredentials)
    assert credentials.username == "x-access-token"
    assert credentials.tokens is not None and credentials.tokens.repository == \
        "octo-org/gpu-jobs"
    assert b.credentials() is None  # SSH keeps using SSH keys; the API still uses the App


def test_the_app_host_rule_holds_after_the_environment_overrides(tmp_path):
    config = _config(tmp_path, APP + """repos:
  - id: team
    url: https://github.com/acme/jobs.git
    credentials: {githubApp: true}
""")
    with pytest.raises(ConfigError) as raised:
        load_settings(config, environ={
            "NODUS_GITOPS_REPO_TEAM_URL": "https://evil.example/acme/jobs.git"})
    assert ("NODUS_GITOPS_REPO_TEAM_URL: the repository is on evil.example, not on the "
            "App's host github.com") in str(raised.value)
    moved = load_settings(config, environ={
        "NODUS_GITOPS_REPO_TEAM_URL": "https://github.com/acme/other-jobs.git"})
    assert moved.bindings[0].credentials().tokens.repository == "acme/other-jobs"


def test_a_binding_moved_off_the_apps_host_gets_no_app_token(tmp_path):
    from dataclasses import replace

    config = _config(tmp_path, APP + "repos:\n  - id: team\n    url: https://github.com/"
                                     "acme/jobs.git\n    credentials: {githubApp: true}\n")
    binding = load_settings(config, environ={}).bindings[0]
    with pytest.raises(ConfigError, match="evil.example, not on the App's host github.com"):
        replace(binding, url="https://evil.example/acme/jobs.git").credentials()


def test_comments_can_be_set_from_the_environment(tmp_path):
    config = _config(tmp_path, "repos:\n  - id: team-a\n    url: https://github.com/o/r.git\n")
    settings = load_settings(config, environ={"NODUS_GITOPS_REPO_TEAM_A_COMMENTS": "true"})
    assert settings.bindings[0].comments


def test_budgets_reach_the_bindings_of_their_project(tmp_path):
    config = _config(tmp_path, """budgets:
  training: {limitUSD: "500", period: week}
  research: {limitUSD: 120.5}
repos:
  - {id: a, url: /tmp/a, project: training}
  - {id: b, url: /tmp/b, project: research}
  - {id: c, url: /tmp/c, project: other}
""")
    settings = load_settings(config, environ={})
    a, b, c = settings.bindings
    assert a.budget is not None and (a.budget.limit_usd, a.budget.period) == (
        Decimal("500"), Period.WEEK)
    assert b.budget is not None and (b.budget.limit_usd, b.budget.period) == (
        Decimal("120.5"), Period.MONTH)
    assert c.budget is None
    assert set(settings.budgets) == {"training", "research"}


@pytest.mark.parametrize("text,expected", [
    ("repos:\n  - id: a\n    url: https://github.com/o/r.git\n"
     "    credentials: {githubApp: true}\n",
     "repos[0].credentials.githubApp: there is no githubApp section"),
    (APP + "repos:\n  - id: a\n    url: https://gitlab.com/o/r.git\n"
     "    credentials: {githubApp: true}\n",
     "repos[0].credentials.githubApp: the repository is on gitlab.com, not on the App's "
     "host github.com"),
    (APP + "repos:\n  - id: a\n    url: /srv/git/r.git\n    credentials: {githubApp: true}\n",
     "repos[0].credentials.githubApp: the repository is on this machine"),
    (APP + "repos:\n  - id: a\n    url: https://github.com/o/r.git\n"
     "    credentials: {githubApp: true, env: GIT}\n",
     "repos[0].credentials: githubApp or env/file, not both"),
    ("repos:\n  - id: a\n    url: https://github.com/o/r.git\n"
     "    credentials: {githubapp: true}\n",
     "repos[0].credentials: unknown setting 'githubapp' (known: env, file, githubApp)"),
    ("repos:\n  - id: a\n    url: https://github.com/o/r.git\n    credentials: githubApp\n",
     "repos[0].credentials: 'githubApp' is not a mapping (env, file or githubApp)"),
    ("repos:\n  - id: a\n    url: https://github.com/o/r.git\n    checks: true\n",
     "repos[0].checks: True is not a mapping (workloads)"),
    ("repos:\n  - id: a\n    url: https://github.com/o/r.git\n    comments: maybe\n",
     "repos[0].comments: 'maybe' is not true or false"),
    ("repos:\n  - id: a\n    url: https://github.com/o/r.git\n    coments: true\n",
     "repos[0]: unknown setting 'coments'"),
    ("githubApp:\n  appId: 1\n  privateKeyFile: /nonexistent.pem\n",
     "githubApp.privateKeyFile (/nonexistent.pem): cannot read it"),
    ("githubApp:\n  appId: 1\n  privateKeyFile: KEYFILE\n  installationID: 4\n",
     "githubApp: unknown setting 'installationID'"),
    ("budgets:\n  training: {period: month}\n", "budgets.training.limitUSD: required"),
    ("budgets:\n  training: {limitUSD: lots}\n",
     "budgets.training.limitUSD: 'lots' is not a dollar amount"),
    ("budgets:\n  training: {limitUSD: '-5'}\n", "budgets.training.limitUSD: '-5'"),
    ("budgets:\n  training: {limitUSD: '1e999999999'}\n",
     "budgets.training.limitUSD: '1e999999999' is not a dollar amount of 0 to"),
    ("budgets:\n  training: {limitUSD: '5', period: quarter}\n",
     "budgets.training.period: 'quarter' is not one of day, week, month"),
    ("budgets:\n  training: {limitUSD: '5', currency: EUR}\n",
     "budgets.training: unknown setting 'currency'"),
    ("budgets: [training]\n", "budgets: a mapping of project"),
    ("budget:\n  training: {limitUSD: '5'}\n", "unknown setting 'budget'"),
])
def test_errors_name_the_setting(tmp_path, text, expected):
    with pytest.raises(ConfigError) as raised:
        load_settings(_config(tmp_path, text), environ={})
    assert expected in str(raised.value)
