"""Settings: a YAML config file for several repo bindings, or one binding from flags,
with every setting overridable by an environment variable.

Environment: `NODUS_GITOPS_HOME` (state directory), `NODUS_GITOPS_STATE` (state URL),
`NODUS_GITOPS_INSTANCE`, `NODUS_GITOPS_LISTEN`, and per binding
`NODUS_GITOPS_REPO_<ID>_<FIELD>` (ID upper-cased with '-' as '_', FIELD in upper snake
case: `NODUS_GITOPS_REPO_TEAM_A_MAX_DELETIONS=20`).

Two top-level sections are shared by bindings: `githubApp` (the GitHub App a binding
authenticates as with `credentials: {githubApp: true}`: one token cache for all of them)
and `budgets` (each project's spending limit; a binding carries its project's budget).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from nodus_gitops.floor.budgets import Budget, budgets_from_settings
from nodus_gitops.floor.errors import ConfigError, refuse_unknown_settings
from nodus_gitops.floor.quantities import DurationError, duration
from nodus_gitops.hosts.credentials import Credentials, split_userinfo
from nodus_gitops.hosts.urls import split_repo_url

if TYPE_CHECKING:  # the App's client (httpx, PyJWT) loads only for a config that has one
    from nodus_gitops.hosts.github_app import GitHubApp

ENV_PREFIX = "NODUS_GITOPS_"
DEFAULT_STATE_DIR = ".nodus-gitops"
DEFAULT_INTERVAL = 30
MIN_INTERVAL = 1
_ID = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclass(frozen=True)
class Binding:
    """One repository path feeding one Nodus project through one provider.

    `url` never holds a password: a URL given as `https://user:pw@host/repo.git` is kept
    as `https://host/repo.git` (what the store, the source annotation, checks, the
    dashboard and logs see), and its user-info is kept apart in `url_credentials`, for
    `credentials()` alone.
    """

    id: str
    url: str
    branch: str = "main"
    path: str = ""
    project: str = "default"
    provider: str = "local"
    interval: float = DEFAULT_INTERVAL
    allow_empty: bool = False
    max_deletions: int = 10
    self_heal: bool = False
    credentials_env: str | None = None
    credentials_file: str | None = None
    check_workloads: bool = False  # `checks: {workloads: true}`: a run check per commit
    preview_branches: tuple[str, ...] = ()  # branches planned (never applied) as previews
    comments: bool = False  # the plan as one comment on each pull or merge request
    # `credentials: {githubApp: true}`: Git over HTTPS and the GitHub API as the App.
    github_app: GitHubApp | None = field(default=None, compare=False)
    budget: Budget | None = field(default=None, compare=False)  # budgets.<project>
    # (the URL without user-info, the credentials its user-info gave): set from `url`.
    # Paired with the URL so that `replace(binding, url=other)` never sends them elsewhere.
    url_credentials: tuple[str, Credentials] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        url, user, password = split_userinfo(self.url)
        if user or password:
            object.__setattr__(self, "url", url)
            object.__setattr__(self, "url_credentials", (url, Credentials(
                username=user, password=password,
                hint=f"check the user and password in the URL of repo binding {self.id!r}")))

    def credentials(self) -> Credentials | None:
        """The Git credentials its settings name (a file, an environment prefix, or the
        GitHub App's installation token for an HTTPS URL), else those its URL carried.

        A credentials setting wins over user-info in the URL, as it always did in the Git
        source: the setting is what a user changes when authentication fails."""
        if self.github_app is not None and self.url.startswith(("https://", "http://")):
            from nodus_gitops.hosts.github_app import git_credentials

            _check_app_host(self.github_app, self.url, f"repo binding {self.id!r}")
            return git_credentials(self.github_app, split_repo_url(self.url)[1])
        if self.credentials_file:
            return Credentials.from_file(self.credentials_file)
        if self.credentials_env:
            return Credentials.from_env(self.credentials_env)
        if self.url_credentials is not None and self.url_credentials[0] == self.url:
            return self.url_credentials[1]
        return None


@dataclass(frozen=True)
class Settings:
    state_dir: Path = Path(DEFAULT_STATE_DIR)
    state_url: str | None = None
    instance: str = "default"
    listen: str = "127.0.0.1:8080"
    bindings: tuple[Binding, ...] = ()
    providers: dict[str, dict[str, Any]] = field(default_factory=dict)
    checks: dict[str, Any] = field(default_factory=dict)
    dashboard: dict[str, Any] = field(default_factory=dict)  # token / basicAuth
    github_app: GitHubApp | None = None
    budgets: dict[str, Budget] = field(default_factory=dict)  # project -> its budget

    def binding(self, id: str) -> Binding:
        for b in self.bindings:
            if b.id == id:
                return b
        raise ConfigError(f"no repo binding {id!r} (bindings: "
                          f"{', '.join(b.id for b in self.bindings) or 'none'})")

    def provider_settings(self, name: str) -> dict[str, Any]:
        settings = dict(self.providers.get(name, {}))
        settings.setdefault("type", name)
        return settings


_SHARED = ("github_app", "budget")  # set from the top-level sections, not per binding
_DERIVED = ("url_credentials",)  # taken out of `url`, never a setting of its own
_CAMEL = {f.name: re.sub(r"_([a-z])", lambda m: m.group(1).upper(), f.name)
          for f in fields(Binding) if f.name not in _SHARED + _DERIVED}
_CREDENTIALS = ("env", "file", "githubApp")
_SECTIONS = {"credentials": "env, file or githubApp", "checks": "workloads"}  # per binding


def _snake_env(name: str) -> str:
    return name.upper()


def _coerce(binding_field: str, value: Any, where: str) -> Any:
    """Values from YAML or the environment into the field's type, with a clear error."""
    if binding_field == "interval":
        try:
            seconds = duration(value, where)
        except DurationError as exc:
            raise ConfigError(str(exc)) from None
        if seconds < MIN_INTERVAL:
            raise ConfigError(f"{where}: the poll interval must be at least {MIN_INTERVAL}s")
        return float(seconds)
    if binding_field == "preview_branches":
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
            raise ConfigError(f"{where}: a list of branch patterns such as [preview/*]")
        return tuple(i.strip() for i in items if i.strip())
    if binding_field in ("allow_empty", "self_heal", "check_workloads", "comments"):
        return _bool(value, where)
    if binding_field == "max_deletions":
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: {value!r} is not a whole number") from None
        if number < 0:
            raise ConfigError(f"{where}: must be 0 or more")
        return number
    if not isinstance(value, str):
        raise ConfigError(f"{where}: {value!r} must be a string")
    return value


def _bool(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("true", "1", "yes"):
        return True
    if str(value).lower() in ("false", "0", "no"):
        return False
    raise ConfigError(f"{where}: {value!r} is not true or false")


def binding_from_mapping(raw: Mapping[str, Any], where: str, *,
                         github_app: GitHubApp | None = None) -> Binding:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: a repo binding is a mapping with at least id and url")
    known = {camel: name for name, camel in _CAMEL.items()}
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key in _SECTIONS and not isinstance(value, Mapping):
            raise ConfigError(f"{where}.{key}: {value!r} is not a mapping ({_SECTIONS[key]})")
        if key == "credentials" and isinstance(value, Mapping):
            values.update(_credentials(value, f"{where}.credentials", github_app))
            continue
        if key == "checks" and isinstance(value, Mapping):
            refuse_unknown_settings(value, ["workloads"], f"{where}.checks")
            values["check_workloads"] = _coerce("check_workloads", value.get("workloads", False),
                                                f"{where}.checks.workloads")
            continue
        if key not in known:
            raise ConfigError(f"{where}: unknown setting {key!r} (known: "
                              f"{', '.join(sorted(set(known) - {'checkWorkloads'}))}, checks, "
                              "credentials)")
        values[known[key]] = _coerce(known[key], value, f"{where}.{key}")
    for required in ("id", "url"):
        if required not in values:
            raise ConfigError(f"{where}: {required} is required")
    if not _ID.match(values["id"]):
        raise ConfigError(f"{where}.id: {values['id']!r} must be lowercase letters, digits "
                          "and '-'")
    if values.get("github_app") is not None:
        _check_app_host(values["github_app"], values["url"], f"{where}.credentials.githubApp")
    return Binding(**values)


def _credentials(raw: Mapping[str, Any], where: str,
                 github_app: GitHubApp | None) -> dict[str, Any]:
    refuse_unknown_settings(raw, _CREDENTIALS, where)
    values = {"credentials_env": raw.get("env"), "credentials_file": raw.get("file")}
    if _bool(raw.get("githubApp", False), f"{where}.githubApp"):
        if github_app is None:
            raise ConfigError(f"{where}.githubApp: there is no githubApp section (set "
                              "githubApp.appId and githubApp.privateKeyFile)")
        if raw.get("env") or raw.get("file"):
            raise ConfigError(f"{where}: githubApp or env/file, not both")
        values["github_app"] = github_app
    return values


def _check_app_host(app: GitHubApp, url: str, where: str) -> None:
    """The App's token goes only to the App's own host."""
    try:
        host = urlsplit(split_repo_url(url)[0]).netloc
    except ValueError:  # a path on this machine
        host = ""
    if host.lower() != app.web_host.lower():
        raise ConfigError(f"{where}: the repository is on {host or 'this machine'}, not on "
                          f"the App's host {app.web_host} (for GitHub Enterprise Server set "
                          "githubApp.apiUrl)")


def _env_overrides(binding: Binding, environ: Mapping[str, str]) -> Binding:
    prefix = f"{ENV_PREFIX}REPO_{binding.id.upper().replace('-', '_')}_"
    changes = {}
    for name in _CAMEL:
        if name == "id":
            continue
        var = prefix + _snake_env(name)
        if var in environ:
            changes[name] = _coerce(name, environ[var], var)
    if binding.github_app is not None and "url" in changes:  # the rule holds here too
        _check_app_host(binding.github_app, changes["url"], prefix + _snake_env("url"))
    return replace(binding, **changes) if changes else binding


DASHBOARD_SETTINGS = ("token", "tokenEnv", "basicAuth", "hosts")
_HOST_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*\.?$",
                        re.IGNORECASE)


def dashboard_settings(raw: Any, where: str) -> dict[str, Any]:
    """The `dashboard` section: auth (token, tokenEnv, basicAuth; checked by web/auth.py)
    and `hosts`, the names besides localhost and IP addresses the server answers to (the
    names a browser reaches it by, behind a proxy or DNS)."""
    if not raw:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: a mapping ({', '.join(DASHBOARD_SETTINGS)})")
    refuse_unknown_settings(raw, DASHBOARD_SETTINGS, where)
    hosts = raw.get("hosts", [])
    if not isinstance(hosts, list):
        raise ConfigError(f"{where}.hosts: a list of host names, as a browser's address bar "
                          "shows them (dash.example.org)")
    for i, name in enumerate(hosts):
        if not isinstance(name, str) or not _HOST_NAME.match(name):
            raise ConfigError(f"{where}.hosts[{i}]: {name!r} is not a host name (give "
                              "dash.example.org, without scheme, port or path)")
    return dict(raw)


def load_settings(config_file: str | None = None, *, environ: Mapping[str, str] | None = None,
                  overrides: Mapping[str, Any] | None = None,
                  bindings: tuple[Binding, ...] = ()) -> Settings:
    """The config file (if any), then the environment, then command-line overrides."""
    environ = os.environ if environ is None else environ
    raw: dict[str, Any] = {}
    if config_file:
        raw = _read_config(config_file)
    github_app = None
    if raw.get("githubApp") is not None:
        from nodus_gitops.hosts.github_app import GitHubApp

        github_app = GitHubApp.from_settings(raw["githubApp"], environ)
    budgets = budgets_from_settings(raw.get("budgets"))
    state_dir = environ.get(f"{ENV_PREFIX}HOME") or raw.get("stateDir") or DEFAULT_STATE_DIR
    settings = Settings(
        state_dir=Path(state_dir),
        state_url=environ.get(f"{ENV_PREFIX}STATE") or raw.get("state"),
        instance=environ.get(f"{ENV_PREFIX}INSTANCE") or raw.get("instance", "default"),
        listen=environ.get(f"{ENV_PREFIX}LISTEN") or raw.get("listen", "127.0.0.1:8080"),
        providers=dict(raw.get("providers") or {}),
        checks=dict(raw.get("checks") or {}),
        dashboard=dashboard_settings(raw.get("dashboard"), f"{config_file}: dashboard"),
        github_app=github_app,
        budgets=budgets,
    )
    found = list(bindings)
    if not isinstance(raw.get("repos") or [], list):
        raise ConfigError(f"{config_file}: repos must be a list of repo bindings (each with "
                          f"at least url), not {type(raw['repos']).__name__} "
                          f"{str(raw['repos'])[:40]!r}")
    for i, item in enumerate(raw.get("repos") or []):
        found.append(binding_from_mapping(item, f"{config_file}: repos[{i}]",
                                          github_app=github_app))
    ids = [b.id for b in found]
    if len(ids) != len(set(ids)):
        raise ConfigError(f"{config_file}: repo binding ids must be unique ({', '.join(ids)})")
    found = [_env_overrides(b, environ) for b in found]
    settings = replace(settings, bindings=tuple(
        replace(b, budget=budgets.get(b.project)) for b in found))
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    if "state_dir" in overrides:
        overrides["state_dir"] = Path(overrides["state_dir"])
    settings = replace(settings, **overrides)
    where = ("--listen" if "listen" in overrides else f"{ENV_PREFIX}LISTEN"
             if environ.get(f"{ENV_PREFIX}LISTEN") else f"{config_file or 'the defaults'}: listen")
    listen_address(settings.listen, where)
    return settings


def listen_address(listen: str, where: str = "--listen") -> tuple[str, int]:
    """(host, port) of `HOST:PORT` (`[v6]:port` too; no host: 127.0.0.1); a ConfigError
    naming `where` (the flag, the variable or the config's key) when it is not one."""
    host, sep, port = str(listen).rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"{where}: {listen!r} is not HOST:PORT with a port from 0 to "
                          "65535 (for example 127.0.0.1:8080)")
    return host, int(port)


def _read_config(path: str) -> dict[str, Any]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"--config {path}: {e.strerror}") from None
    import yaml  # only with a config file: `get` of a local state alone never loads it

    try:
        raw = yaml.load(text, Loader=yaml.CSafeLoader) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}{line}: invalid YAML: {getattr(e, 'problem', e)}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the config is a mapping (instance, state, repos, ...)")
    known = {"instance", "stateDir", "state", "listen", "repos", "providers", "checks",
             "dashboard", "githubApp", "budgets"}
    refuse_unknown_settings(raw, sorted(known), str(path))
    return raw


def binding_from_flags(repo: str, branch: str | None, path: str | None, project: str | None,
                       provider: str | None, interval: str | None) -> Binding:
    """The single binding `--repo URL|PATH [--branch] [--path]` describes."""
    url = repo
    if _is_local_path(repo):
        url = str(Path(repo).resolve())
    base = re.sub(r"\.git$", "", url.rstrip("/").rsplit("/", 1)[-1]) or "repo"
    slug = re.sub(r"[^a-z0-9]+", "-", f"{base}-{path or ''}".lower()).strip("-")[:63] or "repo"
    values: dict[str, Any] = {"id": slug.strip("-"), "url": url,
                              "branch": branch or _default_branch(url),
                              "path": (path or "").strip("/"),
                              "project": project or "default", "provider": provider or "local"}
    if interval is not None:
        values["interval"] = _coerce("interval", interval, "--interval")
    return Binding(**values)


def _is_local_path(url: str) -> bool:
    return "://" not in url and not re.match(r"^[\w.-]+@[\w.-]+:", url)


def _default_branch(url: str) -> str:
    """For a local repository, the branch checked out there; else `main`."""
    if _is_local_path(url) and Path(url).exists():
        import pygit2  # only for a local repository: reading a config never loads libgit2

        try:
            repo = pygit2.Repository(url)
            if not repo.head_is_detached and not repo.head_is_unborn:
                return repo.head.shorthand
        except (pygit2.GitError, KeyError):
            pass
    return "main"
