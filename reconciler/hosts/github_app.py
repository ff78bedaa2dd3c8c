"""GitHub App authentication: the App's JWT, and installation tokens minted, cached and
renewed before they expire, for the GitHub writers and for Git over HTTPS.

The JWT is signed RS256 with the App's private key: `iat` 60 s in the past (clock drift),
`exp` 9 minutes ahead (GitHub takes at most 10), `iss` the App's id. It serves three
requests only: `GET /repos/{owner}/{repo}/installation` (the installation of a
repository, unless `installationId` is set), `POST /app/installations/{id}/
access_tokens` (a token for that one repository, valid about an hour; the answer says
until when in `expires_at`) and `GET /app` (the App's slug: its comments are written as
`<slug>[bot]`). A token is cached per repository and minted again
REFRESH_EARLY seconds before its `expires_at`, or at once after a 401. One lock guards
the cache and is held while minting, so threads asking at the same moment share a mint.
An installation looked up is kept until a mint there answers 404 (the App was installed
again, with a new id); it is then looked up once more.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import jwt
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from nodus_gitops.floor.errors import (
    ConfigError,
    NodusGitopsError,
    NotFoundError,
    PermanentError,
    SourceError,
    refuse_unknown_settings,
)
from nodus_gitops.hosts.client import ApiClient, HostLimiter, ValidationFailed
from nodus_gitops.hosts.credentials import Credentials
from nodus_gitops.hosts.github import github_auth, github_headers

DEFAULT_API_URL = "https://api.github.com"
JWT_BACKDATE = 60  # seconds: GitHub's advice against clock drift
JWT_LIFETIME = 540  # seconds after now; GitHub refuses more than 600
REFRESH_EARLY = 300  # seconds before `expires_at` a token is replaced
MINTED_KEPT = 8  # tokens per repository remembered, to be scrubbed from messages
GIT_USERNAME = "x-access-token"  # what GitHub expects with an installation token
SETTING = "githubApp"
KEYS = ("appId", "installationId", "privateKeyFile", "privateKeyEnv", "apiUrl")
PERMISSIONS = ("Checks: write (check runs), Commit statuses: write (mode: statuses), "
               "Pull requests: write (plan comments), Contents: read (fetches; write to "
               "push git notes), Metadata: read")


@dataclass(frozen=True)
class _Access:
    token: str
    expires_at: float  # epoch seconds


class _AppJwt:
    """The token source of the App's own requests: a fresh JWT each time."""

    def __init__(self, app: GitHubApp) -> None:
        self._app = app
        self.setting = (f"{SETTING}.appId ({app.app_id}) and {app.key_setting}, and this "
                        "machine's clock (GitHub takes a JWT from 60 s before to 9 minutes "
                        "after it)")

    def get(self) -> str:
        return self._app.jwt()

    def renew(self, rejected: str) -> bool:
        return False  # a new JWT from the same key and id is refused the same way


class GitHubApp:
    """One GitHub App, shared by every binding that authenticates as it. Thread-safe."""

    def __init__(self, app_id: str, private_key: rsa.RSAPrivateKey, *, key_setting: str,
                 installation_id: int | None = None, api_url: str = DEFAULT_API_URL,
                 clock: Callable[[], float] = time.time, limiter: HostLimiter | None = None,
                 sleep: Callable[[float], None] = time.sleep,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.app_id = app_id
        self.key_setting = key_setting
        self.installation_id = installation_id
        self.api_url = api_url.rstrip("/")
        self._key = private_key
        self._clock = clock
        self._limiter = limiter or HostLimiter()
        self._sleep = sleep
        self._transport = transport
        self._api: ApiClient | None = None
        self._lock = threading.Lock()
        self._installations: dict[str, int] = {}
        self._tokens: dict[str, _Access] = {}
        self._minted: dict[str, tuple[str, ...]] = {}  # per repository, newest last
        self._login: str | None = None

    def __repr__(self) -> str:
        return f"GitHubApp({self.app_id}, {self.api_url})"

    @classmethod
    def from_settings(cls, raw: Any, environ: Mapping[str, str], *,
                      clock: Callable[[], float] = time.time) -> GitHubApp:
        """The `githubApp:` section; every error names the setting to change."""
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{SETTING}: a mapping with appId, privateKeyFile or "
                              "privateKeyEnv, and optionally installationId and apiUrl")
        refuse_unknown_settings(raw, KEYS, SETTING)
        app_id = raw.get("appId")
        if isinstance(app_id, bool) or not (
                isinstance(app_id, int) and app_id > 0
                or isinstance(app_id, str) and app_id.strip() and " " not in app_id.strip()):
            raise ConfigError(f"{SETTING}.appId: {app_id!r} is not an App ID (the number, or "
                              "the Client ID, on the App's settings page)")
        installation = raw.get("installationId")
        if installation is not None:
            installation = _positive_int(installation, f"{SETTING}.installationId")
        key_text, key_setting = _key_text(raw, environ)
        api_url = str(raw.get("apiUrl") or DEFAULT_API_URL)
        if urlsplit(api_url).scheme not in ("http", "https") or not urlsplit(api_url).netloc:
            raise ConfigError(f"{SETTING}.apiUrl: {api_url!r} is not an http(s) URL "
                              "(GitHub Enterprise Server: https://HOST/api/v3)")
        return cls(str(app_id).strip(), load_private_key(key_text, key_setting),
                   key_setting=key_setting, installation_id=installation, api_url=api_url,
                   clock=clock)

    @property
    def web_host(self) -> str:
        """The host the App's repositories are on: github.com for api.github.com, the
        server itself for GitHub Enterprise Server (`https://HOST/api/v3`)."""
        return urlsplit(self.api_url).netloc.removeprefix("api.")

    def jwt(self) -> str:
        now = int(self._clock())
        claims = {"iat": now - JWT_BACKDATE, "exp": now + JWT_LIFETIME, "iss": self.app_id}
        return jwt.encode(claims, self._key, algorithm="RS256")

    def bot_login(self) -> str:
        """The login the App's installation tokens write as: `<slug>[bot]`."""
        with self._lock:
            if self._login is None:
                slug = (self._client().request("GET", "/app") or {}).get("slug")
                if not isinstance(slug, str) or not slug:
                    raise PermanentError(f"GET {urlsplit(self.api_url).netloc}/app answered "
                                         "without the App's slug")
                self._login = f"{slug}[bot]"
            return self._login

    def token(self, repository: str) -> InstallationToken:
        """The token source for `owner/name`, for an ApiClient or Git credentials."""
        return InstallationToken(self, repository)

    def access(self, repository: str) -> str:
        """A token valid for at least REFRESH_EARLY more seconds, minted when needed."""
        with self._lock:
            cached = self._tokens.get(repository)
            if cached is not None and self._clock() < cached.expires_at - REFRESH_EARLY:
                return cached.token
            fresh = self._mint(repository)
            self._tokens[repository] = fresh
            minted = (*self._minted.get(repository, ()), fresh.token)
            self._minted[repository] = minted[-MINTED_KEPT:]
            return fresh.token

    def minted(self, repository: str) -> tuple[str, ...]:
        """The last tokens minted for `repository`: what messages must never show. Never
        waits for a mint in progress (one tuple, replaced whole)."""
        return self._minted.get(repository, ())

    def forget(self, repository: str, rejected: str) -> bool:
        """Drop the cached token when it is the one a host just refused; True: the next
        `access` gives a token other than `rejected`."""
        with self._lock:
            cached = self._tokens.get(repository)
            if cached is not None and cached.token == rejected:
                del self._tokens[repository]
            return True

    def close(self) -> None:
        if self._api is not None:
            self._api.close()

    # -- requests as the App ------------------------------------------------------------

    def _client(self) -> ApiClient:
        if self._api is None:
            self._api = ApiClient(base_url=self.api_url, token=_AppJwt(self), auth=github_auth,
                                  headers=github_headers(), min_interval=0.0,
                                  limiter=self._limiter, sleep=self._sleep, wall=self._clock,
                                  transport=self._transport)
        return self._api

    def _installation(self, repository: str) -> int:
        if self.installation_id is not None:
            return self.installation_id
        if repository not in self._installations:
            try:
                found = self._client().request("GET", f"/repos/{repository}/installation")
            except NotFoundError as exc:
                raise PermanentError(
                    f"{exc}; the GitHub App {self.app_id} is not installed on {repository}: "
                    "install it on that repository (or its owner) from the App's page, or "
                    f"set {SETTING}.installationId") from None
            self._installations[repository] = _positive_int(
                (found or {}).get("id"), f"the installation of {repository} (its id)",
                error=PermanentError)
        return self._installations[repository]

    def _mint(self, repository: str) -> _Access:
        installation = self._installation(repository)
        try:
            body = self._access_token(installation, repository)
        except NotFoundError:
            if self.installation_id is not None:
                raise
            del self._installations[repository]  # installed again since: look it up anew
            installation = self._installation(repository)
            body = self._access_token(installation, repository)
        token = (body or {}).get("token")
        expires = _epoch((body or {}).get("expires_at"))
        if not isinstance(token, str) or not token or expires is None:
            raise PermanentError(f"POST /app/installations/{installation}/access_tokens "
                                 "answered without a token and its expires_at")
        return _Access(token, expires)

    def _access_token(self, installation: int, repository: str) -> Any:
        where = (f"{SETTING}.installationId ({installation})" if self.installation_id
                 else f"the installation of {repository} ({installation})")
        # Scoped to the one repository: a token that leaks reaches nothing else.
        try:
            return self._client().request(
                "POST", f"/app/installations/{installation}/access_tokens",
                json={"repositories": [repository.rsplit("/", 1)[-1]]})
        except NotFoundError as exc:
            raise NotFoundError(f"{exc}; {where} is not an installation of the GitHub App "
                                f"{self.app_id}") from None
        except ValidationFailed as exc:
            raise PermanentError(
                f"{exc}; {where} does not include {repository}: add the repository to the "
                "App's installation (Repository access on its settings page), or set "
                f"{SETTING}.installationId to the installation that has it") from None


@dataclass(frozen=True)
class InstallationToken:
    """A `TokenSource`: the App's token for one repository, renewed as it expires."""

    app: GitHubApp
    repository: str

    @property
    def setting(self) -> str:
        return (f"{SETTING} (App {self.app.app_id}): its permissions ({PERMISSIONS}) and its "
                f"installation on {self.repository}")

    def get(self) -> str:
        return self.app.access(self.repository)

    def renew(self, rejected: str) -> bool:
        return self.app.forget(self.repository, rejected)


@dataclass(frozen=True, repr=False)
class GitHubAppCredentials(Credentials):
    """Git credentials whose password is the App's installation token, fetched on each
    use; `fresh` (the remote refused the last one) asks for a new one."""

    tokens: InstallationToken | None = field(default=None, compare=False)

    def secret(self, fresh: bool = False) -> str | None:
        assert self.tokens is not None
        try:
            token = self.tokens.get()
            if fresh and self.tokens.renew(token):
                token = self.tokens.get()
            return token
        except NodusGitopsError as exc:  # the fetch fails with the reason, not a crash
            raise SourceError(str(exc)) from None

    def redacted(self) -> tuple[str, ...]:
        return self.tokens.app.minted(self.tokens.repository) if self.tokens else ()

    def __repr__(self) -> str:
        return f"GitHubAppCredentials({self.tokens.repository if self.tokens else ''})"


def git_credentials(app: GitHubApp, repository: str) -> GitHubAppCredentials:
    return GitHubAppCredentials(
        username=GIT_USERNAME, tokens=app.token(repository),
        hint=f"the GitHub App {app.app_id} must be installed on {repository} with Contents: "
             f"read (write to push git notes); check {SETTING}")


def load_private_key(text: str, setting: str) -> rsa.RSAPrivateKey:
    """The App's RSA key from PEM text (newlines may be written `\\n`, as in a variable);
    a wrong key is a ConfigError naming `setting`, never showing the key."""
    data = text.strip()
    if "\\n" in data and "\n" not in data:
        data = data.replace("\\n", "\n")
    try:
        key = serialization.load_pem_private_key(data.encode(), password=None)
    except TypeError:
        raise ConfigError(f"{setting}: the key is encrypted; use the unencrypted .pem file "
                          "GitHub gives when you generate a private key") from None
    except (ValueError, UnsupportedAlgorithm):
        raise ConfigError(f"{setting}: not an RSA private key in PEM form (the .pem file "
                          "GitHub gives when you generate a private key, starting "
                          "'-----BEGIN RSA PRIVATE KEY-----')") from None
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ConfigError(f"{setting}: a private key, but not RSA; a GitHub App's key is "
                          "RSA (the .pem file GitHub gives)")
    return key


def _key_text(raw: Mapping[str, Any], environ: Mapping[str, str]) -> tuple[str, str]:
    file, variable = raw.get("privateKeyFile"), raw.get("privateKeyEnv")
    if file and variable:
        raise ConfigError(f"{SETTING}: set privateKeyFile or privateKeyEnv, not both")
    if file:
        path = Path(str(file)).expanduser()
        setting = f"{SETTING}.privateKeyFile ({path})"
        try:
            return path.read_text(), setting
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "not a text file"
            raise ConfigError(f"{setting}: cannot read it: {reason}") from None
    if variable:
        setting = f"{SETTING}.privateKeyEnv ({variable})"
        value = environ.get(str(variable))
        if not value:
            raise ConfigError(f"{setting}: the environment variable is not set")
        return value, setting
    raise ConfigError(f"{SETTING}.privateKeyFile: required (or privateKeyEnv): the App's "
                      "private key")


def _positive_int(value: Any, setting: str, error: type[Exception] = ConfigError) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and value.strip().isdigit():
        number = int(value)
    else:
        number = 0  # 1.5, true, "7a": not an id
    if number <= 0:
        raise error(f"{setting}: {value!r} is not a positive whole number")
    return number


def _epoch(value: Any) -> float | None:
    """`2016-07-11T22:14:10Z` as epoch seconds."""
    try:
        when = datetime.fromisoformat(str(value)) if value else None
    except ValueError:
        return None
    if when is None:
        return None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
