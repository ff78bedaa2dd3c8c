"""`Client`: where the SDK writes (a branch and folder of the manifests repository) and
where it reads (the reconciler's JSON API), from arguments or the environment.

Writes are commits to Git; reads are `GET /api/v1/...` on `nodus-gitops serve`, never
the state database. A module-level default client is built from the environment on
first use; `configure(...)` replaces it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import pygit2
from nodus_gitops.floor.redaction import url_without_userinfo
from nodus_gitops.hosts.credentials import Credentials
from nodus_gitops.sdk import errors

DEFAULT_API_URL = "http://127.0.0.1:8080"
DEFAULT_NOT_FOUND_GRACE = 90.0  # 3x the default 30 s poll interval
FALLBACK_AUTHOR = ("nodus SDK", "nodus-sdk@localhost")


def _env(environ: Mapping[str, str], name: str) -> str | None:
    return environ.get(name) or None


def _credentials(value: Any, environ: Mapping[str, str]) -> Credentials | None:
    if value is None:
        found = Credentials.from_env("NODUS_SDK_GIT", environ)
        has_any = found.username or found.password or found.ssh_key
        return found if has_any else None
    if isinstance(value, Credentials):
        return value
    if isinstance(value, str):
        return Credentials(password=value, hint="check the token given to the SDK")
    if isinstance(value, Mapping):
        fields = dict(value)
        if "token" in fields:
            fields["password"] = fields.pop("token")
        try:
            return Credentials(**fields, hint="check the credentials given to the SDK")
        except TypeError as exc:
            raise errors.ConfigError(f"credentials: {exc}") from None
    raise errors.ConfigError("credentials: a token, a mapping (username, token, ssh_key ...) "
                             "or reconciler.source.Credentials")


def _author(value: Any, environ: Mapping[str, str]) -> pygit2.Signature:
    if isinstance(value, pygit2.Signature):
        return value
    if isinstance(value, tuple) and len(value) == 2:
        return pygit2.Signature(*value)
    if isinstance(value, str) and value.strip():
        name, _, email = value.partition("<")
        return pygit2.Signature(name.strip() or value.strip(),
                                email.rstrip("> ").strip() or FALLBACK_AUTHOR[1])
    if value is not None:
        raise errors.ConfigError("author: 'Name <email>', a (name, email) tuple or a "
                                 "pygit2.Signature")
    name, email = _env(environ, "GIT_AUTHOR_NAME"), _env(environ, "GIT_AUTHOR_EMAIL")
    if not (name and email):
        try:
            config = pygit2.Config.get_global_config()
            name = name or config["user.name"]
            email = email or config["user.email"]
        except (KeyError, OSError, pygit2.GitError):
            pass
    return pygit2.Signature(name or FALLBACK_AUTHOR[0], email or FALLBACK_AUTHOR[1])


class Client:
    """Where Sweeps are written and read. Every argument left out comes from the
    environment, then the default:

    repo_url (NODUS_SDK_REPO, required to write), branch (NODUS_SDK_BRANCH, main),
    path (NODUS_SDK_PATH, sweeps), api_url (NODUS_API_URL, http://127.0.0.1:8080),
    token (NODUS_API_TOKEN), project (NODUS_PROJECT, default), author (GIT_AUTHOR_NAME and
    GIT_AUTHOR_EMAIL, then git's user.name and user.email), credentials for Git
    (NODUS_SDK_GIT_TOKEN, _USERNAME, _SSH_KEY ..., or user info in the URL), cache_dir
    (NODUS_SDK_CACHE, ~/.cache/nodus-gitops/sdk), not_found_grace (seconds `wait()` keeps
    polling while the API does not know the Sweep yet; NODUS_SDK_NOT_FOUND_GRACE, 90).
    """

    def __init__(self, repo_url: str | None = None, branch: str | None = None,
                 path: str | None = None, api_url: str | None = None,
                 token: str | None = None, project: str | None = None, author: Any = None,
                 credentials: Any = None, *, cache_dir: str | Path | None = None,
                 not_found_grace: float | None = None, http_timeout: float = 10.0,
                 environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self.repo_url = repo_url or _env(env, "NODUS_SDK_REPO")
        self.branch = branch or _env(env, "NODUS_SDK_BRANCH") or "main"
        self.path = (path if path is not None else _env(env, "NODUS_SDK_PATH") or "sweeps")
        self.path = "/".join(p for p in self.path.replace("\\", "/").split("/")
                             if p not in ("", "."))
        self.api_url = (api_url or _env(env, "NODUS_API_URL") or DEFAULT_API_URL).rstrip("/")
        self._token = token or _env(env, "NODUS_API_TOKEN")
        self.project = project or _env(env, "NODUS_PROJECT") or "default"
        self.author = _author(author, env)
        self._credentials = _credentials(credentials, env)
        xdg = _env(env, "XDG_CACHE_HOME")
        default_cache = (Path(xdg) if xdg else Path.home() / ".cache") / "nodus-gitops" / "sdk"
        self.cache_dir = Path(cache_dir or _env(env, "NODUS_SDK_CACHE") or default_cache)
        grace = not_found_grace
        if grace is None:
            text = _env(env, "NODUS_SDK_NOT_FOUND_GRACE")
            try:
                grace = float(text) if text else DEFAULT_NOT_FOUND_GRACE
            except ValueError:
                raise errors.ConfigError(f"NODUS_SDK_NOT_FOUND_GRACE: {text!r} is not a "
                                         "number of seconds") from None
        self.not_found_grace = float(grace)
        self.http_timeout = http_timeout
        self._http: httpx.Client | None = None
        self._repo: Any = None
        self.lock = threading.RLock()  # one Git operation at a time per client

    def __repr__(self) -> str:
        repo = url_without_userinfo(self.repo_url) if self.repo_url else None
        return (f"Client(repo_url={repo!r}, branch={self.branch!r}, path={self.path!r}, "
                f"api_url={self.api_url!r}, project={self.project!r}, "
                f"token={'<set>' if self._token else None})")

    # -- Git -------------------------------------------------------------------------

    def repository(self) -> Any:
        """The writer for the bound branch (`reconciler.sdk.gitrepo.Repository`)."""
        from nodus_gitops.sdk.gitrepo import Repository

        if not self.repo_url:
            raise errors.ConfigError("no manifests repository to write to: set NODUS_SDK_REPO "
                                     "or call nodus.configure(repo_url=...)")
        with self.lock:
            if self._repo is None:
                self._repo = Repository(self.repo_url, self.branch, self.cache_dir,
                                        self._credentials)
            return self._repo

    # -- the JSON API ----------------------------------------------------------------

    def _client(self) -> httpx.Client:
        if self._http is None:
            headers = {"Accept": "application/json", "User-Agent": "nodus-gitops-sdk"}
            if self._token:
                headers["Authorization"] = f"Bearer {self._token}"
            self._http = httpx.Client(base_url=self.api_url, headers=headers,
                                      timeout=self.http_timeout)
        return self._http

    def get(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        """GET `path` on the API and return its JSON; NotFound on 404, AuthError on 401
        and 403, ApiError when unreachable or on any other failure."""
        try:
            reply = self._client().get(path, params=params)
        except httpx.HTTPError as exc:
            raise errors.ApiError(f"cannot reach the nodus-gitops API at {self.api_url}: "
                                  f"{exc}") from None
        if reply.status_code in (401, 403):
            hint = ("set NODUS_API_TOKEN (or token=...) to the dashboard token"
                    if not self._token else "the token was refused; check NODUS_API_TOKEN")
            raise errors.AuthError(f"the API at {self.api_url} answered {reply.status_code} "
                                   f"for {path}: {hint}")
        try:
            body = reply.json()
        except ValueError:
            body = None
        if reply.status_code == 404:
            message = body.get("error") if isinstance(body, dict) else None
            raise errors.NotFound(message or f"{path}: not found")
        if reply.status_code != 200 or body is None:
            detail = body.get("error") if isinstance(body, dict) else reply.text[:200]
            raise errors.ApiError(f"GET {path} on {self.api_url} answered "
                                  f"{reply.status_code}: {detail}")
        return body

    def resource(self, kind: str, project: str, name: str) -> dict[str, Any]:
        """`/api/v1/resources/{kind}/{project}/{name}`: the resource object, manifest and
        events."""
        from urllib.parse import quote

        path = "/api/v1/resources/" + "/".join(quote(p, safe="") for p in (kind, project, name))
        return self.get(path)

    def resources(self, **filters: Any) -> list[dict[str, Any]]:
        """`/api/v1/resources` with filters (kind, project, name, repo, phase), all pages."""
        found: list[dict[str, Any]] = []
        page = 1
        while True:
            params = {k: v for k, v in filters.items() if v is not None}
            body = self.get("/api/v1/resources", {**params, "page": page, "pageSize": 500})
            found.extend(body)
            if len(body) < 500:
                return found
            page += 1

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_default: Client | None = None
_default_lock = threading.Lock()


def default_client() -> Client:
    """The module-level client, built from the environment on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Client()
        return _default


def configure(client: Client | None = None, **settings: Any) -> Client:
    """Replace the default client: `configure(repo_url=..., api_url=...)` builds one from
    these settings (the rest from the environment); `configure(client)` installs it."""
    global _default
    if client is not None and settings:
        raise TypeError("configure() takes a Client or settings, not both")
    new = client if client is not None else Client(**settings)
    with _default_lock:
        old, _default = _default, new
    if old is not None and old is not new:
        old.close()
    return new
