"""GitHub App authentication against GitHub's documented shapes: the JWT, the repository's
installation, installation tokens cached until shortly before `expires_at`, and errors that
name the setting to change."""

from __future__ import annotations

import threading
import time as real_time

import httpx
import jwt
import pytest
import respx
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from nodus_gitops.checks.github import GitHubChecksWriter
from nodus_gitops.floor.errors import ConfigError, PermanentError, SourceError
from nodus_gitops.hosts.client import ApiClient
from nodus_gitops.hosts.github import github_auth, github_headers
from nodus_gitops.hosts.github_app import (
    JWT_BACKDATE,
    REFRESH_EARLY,
    GitHubApp,
    git_credentials,
)

from tests.checks.support import SHA, app_key_pem, app_public_key, body, iso, recorded, run

API = "https://api.github.com"
NOW = 1_700_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def _app(clock: Clock, **settings) -> GitHubApp:
    raw = {"appId": 12345, "privateKeyEnv": "APP_KEY", **settings}
    return GitHubApp.from_settings(raw, {"APP_KEY": app_key_pem()}, clock=clock)


def _claims(request: httpx.Request) -> dict:
    scheme, _, token = request.headers["Authorization"].partition(" ")
    assert scheme == "Bearer"
    assert jwt.get_unverified_header(token)["alg"] == "RS256"
    return jwt.decode(token, app_public_key(), algorithms=["RS256"],
                      options={"verify_exp": False, "verify_iat": False})


def _github_headers(request: httpx.Request) -> None:
    assert request.headers["Accept"] == "application/vnd.github+json"
    assert request.headers["X-GitHub-Api-Version"] == "2022-11-28"


class Minter:
    """POST /app/installations/{id}/access_tokens: a new token each call, valid 1 h."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.minted: list[str] = []
        self.claims: list[dict] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        _github_headers(request)
        self.claims.append(_claims(request))
        token = f"ghs_{len(self.minted) + 1:036d}"
        self.minted.append(token)
        return recorded("github", "installation_token",
                        fields={"token": token, "expires_at": iso(self.clock() + 3600)})


def test_the_jwt_is_rs256_with_the_documented_claims():
    clock = Clock()
    token = _app(clock).jwt()
    claims = jwt.decode(token, app_public_key(), algorithms=["RS256"],
                        options={"verify_exp": False, "verify_iat": False})
    assert claims["iss"] == "12345"
    assert claims["iat"] == int(NOW) - JWT_BACKDATE
    assert 0 < claims["exp"] - int(NOW) <= 600  # GitHub takes at most 10 minutes
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with pytest.raises(jwt.InvalidSignatureError):  # signed by this key, no other
        jwt.decode(token, other.public_key(), algorithms=["RS256"],
                   options={"verify_exp": False})


def test_installation_found_from_the_repository_then_a_token_scoped_to_it():
    clock = Clock()
    app, minter = _app(clock), Minter(clock)
    with respx.mock(assert_all_called=True) as router:
        lookup = router.get(f"{API}/repos/octo-org/gpu-jobs/installation").mock(
            return_value=recorded("github", "app_installation"))
        mint = router.post(f"{API}/app/installations/77/access_tokens").mock(
            side_effect=minter)
        assert app.token("octo-org/gpu-jobs").get() == minter.minted[0]
        assert app.token("octo-org/gpu-jobs").get() == minter.minted[0]  # cached
    _github_headers(lookup.calls[0].request)
    assert _claims(lookup.calls[0].request)["iss"] == "12345"
    assert body(mint.calls[0].request) == {"repositories": ["gpu-jobs"]}
    assert mint.call_count == 1


def test_a_token_is_renewed_shortly_before_it_expires():
    clock = Clock()
    app, minter = _app(clock, installationId=77), Minter(clock)
    with respx.mock() as router:
        mint = router.post(f"{API}/app/installations/77/access_tokens").mock(
            side_effect=minter)
        source = app.token("octo-org/gpu-jobs")
        first = source.get()
        clock.now += 3600 - REFRESH_EARLY - 1  # still more than REFRESH_EARLY left
        assert source.get() == first
        clock.now += 1  # REFRESH_EARLY before expires_at: replaced
        second = source.get()
        assert second != first and mint.call_count == 2
        # Each JWT was made at its own moment.
        assert [c["iat"] for c in minter.claims] == [int(NOW) - 60,
                                                    int(NOW) + 3600 - REFRESH_EARLY - 60]
        clock.now += 3600 * 5  # long idle: the expired token is never handed out
        assert source.get() not in (first, second)


def test_a_refused_token_is_replaced_once_and_threads_share_one_mint():
    clock = Clock()
    app, minter = _app(clock, installationId=77), Minter(clock)

    def slow(request: httpx.Request) -> httpx.Response:
        real_time.sleep(0.05)  # widen the window in which a race would mint twice
        return minter(request)

    with respx.mock() as router:
        mint = router.post(f"{API}/app/installations/77/access_tokens").mock(side_effect=slow)
        source = app.token("octo-org/gpu-jobs")
        got: list[str] = []
        threads = [threading.Thread(target=lambda: got.append(source.get())) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert mint.call_count == 1 and set(got) == {minter.minted[0]}
        assert source.renew(minter.minted[0])
        assert source.get() == minter.minted[1]
        assert source.renew(minter.minted[0])  # an old refusal drops nothing newer
        assert source.get() == minter.minted[1] and mint.call_count == 2


def test_app_not_installed_on_the_repository_says_what_to_do():
    clock = Clock()
    with respx.mock() as router:
        router.get(f"{API}/repos/octo-org/gpu-jobs/installation").mock(
            return_value=recorded("github", "app_not_installed"))
        with pytest.raises(PermanentError) as raised:
            _app(clock).token("octo-org/gpu-jobs").get()
    message = str(raised.value)
    assert "404" in message and "not installed on octo-org/gpu-jobs" in message
    assert "githubApp.installationId" in message


@pytest.mark.parametrize("name,expected", [
    ("installation_not_found", ["404", "githubApp.installationId (77) is not an installation"]),
    ("installation_suspended", ["403", "This installation has been suspended",
                                "githubApp.appId (12345)"]),
    ("jwt_rejected", ["401", "A JSON web token could not be decoded",
                      "token was rejected: check githubApp.appId (12345) and "
                      "githubApp.privateKeyEnv (APP_KEY)"]),
    ("jwt_exp_too_far", ["401", "too far in the future", "this machine's clock"]),
    ("installation_repository_not_accessible", [
        "422", "githubApp.installationId (77) does not include octo-org/gpu-jobs",
        "add the repository to the App's installation"]),
])
def test_minting_errors_name_the_setting(name, expected):
    clock = Clock()
    with respx.mock() as router:
        route = router.post(f"{API}/app/installations/77/access_tokens").mock(
            return_value=recorded("github", name))
        with pytest.raises(PermanentError) as raised:
            _app(clock, installationId=77).token("octo-org/gpu-jobs").get()
    for text in expected:
        assert text in str(raised.value)
    assert route.call_count == 1  # a JWT refused is not retried with another JWT


def test_git_credentials_mint_per_use_and_report_failures_as_source_errors():
    clock = Clock()
    app, minter = _app(clock, installationId=77), Minter(clock)
    credentials = git_credentials(app, "octo-org/gpu-jobs")
    assert credentials.username == "x-access-token"
    assert "ghs_" not in repr(credentials)
    with respx.mock() as router:
        router.post(f"{API}/app/installations/77/access_tokens").mock(side_effect=minter)
        assert credentials.secret() == minter.minted[0]
        assert credentials.secret(fresh=True) == minter.minted[1]  # the remote said 401
        assert credentials.secret() == minter.minted[1]
    with respx.mock() as router:
        router.post(f"{API}/app/installations/78/access_tokens").mock(
            return_value=recorded("github", "installation_suspended"))
        broken = git_credentials(_app(clock, installationId=78), "octo-org/gpu-jobs")
        with pytest.raises(SourceError, match="suspended"):
            broken.secret()


def test_a_key_with_escaped_newlines_from_the_environment_is_read():
    escaped = app_key_pem().strip().replace("\n", "\\n")
    app = GitHubApp.from_settings({"appId": "Iv1.abc", "privateKeyEnv": "K"}, {"K": escaped})
    assert jwt.decode(app.jwt(), app_public_key(), algorithms=["RS256"],
                      options={"verify_exp": False, "verify_iat": False})["iss"] == "Iv1.abc"


def _ec_pem() -> str:
    return ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()).decode()


@pytest.mark.parametrize("raw,environ,expected", [
    ({"privateKeyEnv": "K"}, {"K": "x"}, "githubApp.appId"),
    ({"appId": True, "privateKeyEnv": "K"}, {"K": "x"}, "githubApp.appId"),
    ({"appId": 1}, {}, "githubApp.privateKeyFile: required"),
    ({"appId": 1, "privateKeyEnv": "K"}, {}, "githubApp.privateKeyEnv (K): the environment"),
    ({"appId": 1, "privateKeyEnv": "K", "privateKeyFile": "/k"}, {}, "not both"),
    ({"appId": 1, "privateKeyFile": "/nonexistent/app.pem"}, {},
     "githubApp.privateKeyFile (/nonexistent/app.pem): cannot read it"),
    ({"appId": 1, "privateKeyEnv": "K"}, {"K": "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n"},
     "githubApp.privateKeyEnv (K): not an RSA private key in PEM form"),
    ({"appId": 1, "privateKeyEnv": "K"}, {"K": "ssh-rsa AAAAB3Nza me@host"},
     "not an RSA private key"),
    ({"appId": 1, "privateKeyEnv": "K", "installationId": "abc"}, {"K": "x"},
     "githubApp.installationId"),
    ({"appId": 1, "privateKeyEnv": "K", "installationId": 1.5}, {"K": "x"},
     "githubApp.installationId: 1.5 is not a positive whole number"),
    ({"appId": 1, "privateKeyEnv": "K", "apiUrl": "ghe.corp/api/v3"}, {"K": "x"},
     "githubApp.apiUrl"),
    ({"appId": 1, "privateKeyEnv": "K", "appSecret": "x"}, {"K": "x"},
     "githubApp: unknown setting 'appSecret'"),
    ("12345", {}, "githubApp: a mapping"),
])
def test_config_errors_name_the_setting(raw, environ, expected):
    if isinstance(raw, dict) and raw.get("privateKeyEnv") and environ.get("K") == "x":
        environ = {"K": app_key_pem()}  # a valid key: the error is elsewhere
    with pytest.raises(ConfigError) as raised:
        GitHubApp.from_settings(raw, environ)
    assert expected in str(raised.value)


def test_a_key_of_another_kind_or_encrypted_is_refused_without_showing_it(tmp_path):
    ec_key = _ec_pem()
    with pytest.raises(ConfigError, match="not RSA; a GitHub App's key is RSA"):
        GitHubApp.from_settings({"appId": 1, "privateKeyEnv": "K"}, {"K": ec_key})
    encrypted = serialization.load_pem_private_key(app_key_pem().encode(), None).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret")).decode()
    path = tmp_path / "app.pem"
    path.write_text(encrypted)
    with pytest.raises(ConfigError) as raised:
        GitHubApp.from_settings({"appId": 1, "privateKeyFile": str(path)}, {})
    assert f"githubApp.privateKeyFile ({path}): the key is encrypted" in str(raised.value)
    assert "ENCRYPTED" not in str(raised.value)


def test_the_app_web_host_follows_the_api_url():
    clock = Clock()
    assert _app(clock).web_host == "github.com"
    assert _app(clock, apiUrl="https://ghe.corp.example/api/v3").web_host == "ghe.corp.example"


def test_a_check_run_refused_with_an_expired_token_is_sent_again_with_a_fresh_one():
    clock = Clock()
    app, minter = _app(clock, installationId=77), Minter(clock)
    api = ApiClient(base_url=API, token=app.token("octo-org/gpu-jobs"), auth=github_auth,
                    headers=github_headers(), min_interval=0.0)
    writer = GitHubChecksWriter(api, "octo-org/gpu-jobs")
    seen: list[str] = []

    def create(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["Authorization"])
        if request.headers["Authorization"] == f"Bearer {minter.minted[0]}":
            return recorded("github", "bad_credentials")  # revoked before its expires_at
        return recorded("github", "check_run_created")

    with respx.mock() as router:
        router.post(f"{API}/app/installations/77/access_tokens").mock(side_effect=minter)
        router.get(f"{API}/repos/octo-org/gpu-jobs/commits/{SHA}/check-runs").mock(
            side_effect=lambda r: (seen.append(r.headers["Authorization"]),
                                   recorded("github", "check_runs_for_ref_empty"))[1])
        router.post(f"{API}/repos/octo-org/gpu-jobs/check-runs").mock(side_effect=create)
        writer.post(run("pending", context="nodus/ci/plan"))
    first, second = (f"Bearer {t}" for t in minter.minted)
    assert seen == [first, first, second]  # the lookup, the refused create, its retry
    assert len(minter.minted) == 2


def test_a_missing_permission_names_it_and_the_app_settings():
    clock = Clock()
    app, minter = _app(clock, installationId=77), Minter(clock)
    api = ApiClient(base_url=API, token=app.token("octo-org/gpu-jobs"), auth=github_auth,
                    headers=github_headers(), min_interval=0.0)
    with respx.mock() as router:
        router.post(f"{API}/app/installations/77/access_tokens").mock(side_effect=minter)
        router.get(f"{API}/repos/octo-org/gpu-jobs/commits/{SHA}/check-runs").mock(
            return_value=recorded("github", "check_runs_for_ref_empty"))
        router.post(f"{API}/repos/octo-org/gpu-jobs/check-runs").mock(
            return_value=recorded("github", "forbidden"))
        with pytest.raises(PermanentError) as raised:
            GitHubChecksWriter(api, "octo-org/gpu-jobs").post(run("success"))
    message = str(raised.value)
    assert "403: Resource not accessible by integration" in message
    assert "(checks: write)" in message and "githubApp (App 12345)" in message
    assert minter.minted[0] not in message


def test_the_apps_plan_comment_is_the_one_its_bot_wrote():
    """After a restart, the App finds its comment by `<slug>[bot]` (GET /app, as the App),
    not a user's comment that copies the marker."""
    from nodus_gitops.checks.comments import marker
    from nodus_gitops.checks.poster import build_poster
    from nodus_gitops.checks.review import PlanReview
    from nodus_gitops.config import Binding
    from nodus_gitops.plan import Plan

    clock = Clock()
    app, minter = _app(clock, installationId=77), Minter(clock)
    binding = Binding(id="team-a", url="https://github.com/octo-org/gpu-jobs.git",
                      github_app=app, comments=True)
    poster = build_poster(None, {"github": True}, binding, environ={})
    mark = marker("ci", "team-a")
    forged = recorded("github", "issue_comment_by_user", fields={
        "id": 3, "body": f"{mark}\nNothing to apply"}).json()
    ours = recorded("github", "issue_comment", fields={"id": 42, "body": f"{mark}\nold"}).json()
    review = PlanReview("team-a", binding.url, "ci", "training", "main", SHA, Plan(()))
    with respx.mock(assert_all_called=True) as router:
        router.post(f"{API}/app/installations/77/access_tokens").mock(side_effect=minter)
        who = router.get(f"{API}/app").mock(return_value=recorded("github", "authenticated_app"))
        router.get(f"{API}/repos/octo-org/gpu-jobs/issues/7/comments").mock(
            return_value=httpx.Response(200, json=[forged, ours]))
        edited = router.patch(f"{API}/repos/octo-org/gpu-jobs/issues/comments/42").mock(
            return_value=recorded("github", "issue_comment_updated", fields={"id": 42}))
        poster.comment(review, "refs/pull/7/head", None)
    assert _claims(who.calls[0].request)["iss"] == "12345"  # asked as the App, by its JWT
    assert body(edited.calls[0].request)["body"].startswith(f"{mark}\n")
    assert edited.calls[0].request.headers["Authorization"] == f"Bearer {minter.minted[0]}"


def test_an_app_installed_again_is_found_at_its_new_installation():
    """Uninstalled and installed again, the App has a new installation id: a mint refused
    at the old one looks the repository's installation up again."""
    clock = Clock()
    app, minter = _app(clock), Minter(clock)
    new = recorded("github", "app_installation", fields={"id": 78})
    with respx.mock(assert_all_called=True) as router:
        lookup = router.get(f"{API}/repos/octo-org/gpu-jobs/installation").mock(
            side_effect=[recorded("github", "app_installation"), new])
        router.post(f"{API}/app/installations/77/access_tokens").mock(side_effect=[
            minter(httpx.Request("POST", API, json={}, headers=_jwt_headers(app))),
            recorded("github", "installation_not_found")])
        router.post(f"{API}/app/installations/78/access_tokens").mock(side_effect=minter)
        source = app.token("octo-org/gpu-jobs")
        assert source.get() == minter.minted[0]
        clock.now += 3600  # expired; meanwhile the App was installed again
        assert source.get() == minter.minted[1]
    assert lookup.call_count == 2


def _jwt_headers(app: GitHubApp) -> dict[str, str]:
    return {**github_headers(), **github_auth(app.jwt())}
