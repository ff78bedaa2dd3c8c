"""Posting a check to every configured writer, once, without ever failing a reconcile.

A check goes to a writer unless that writer already showed the same (state, summary) for
the commit and context. The store's `record_check` answers that but marks a check as posted
the moment it is called, so it is called only AFTER a write succeeded; before writing, the
poster looks in its own memory and then in the store's records (`list_checks`). A write that
fails is logged and left unrecorded, so the next identical post tries again.

`build_poster` turns the `checks:` settings into the writers of one repo binding: check
writers, and with the binding's `comments: true` the plan comment writer of each hosted
one (same API, same token). The bindings of one process share one `HostLimiter`, passed
in, so writes to a host are paced across all of them. A binding with `credentials:
{githubApp: true}` writes to GitHub with the App's installation token, as check runs
unless `mode` says otherwise.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import httpx
from nodus_gitops.checks import comments, gitea, github, gitlab
from nodus_gitops.checks.base import CheckWriter
from nodus_gitops.checks.gitnotes import GitNotesWriter
from nodus_gitops.checks.model import CheckRun
from nodus_gitops.checks.review import PlanReview
from nodus_gitops.config import Binding
from nodus_gitops.floor.errors import (
    ConfigError,
    NodusGitopsError,
    TransientError,
    refuse_unknown_settings,
)
from nodus_gitops.hosts import github as github_api
from nodus_gitops.hosts.client import ApiClient, HostLimiter, Token, TokenSource
from nodus_gitops.hosts.github_app import GitHubApp
from nodus_gitops.hosts.urls import split_repo_url
from nodus_gitops.source import GitSource

MEMORY = 4096  # (commit, context, target) keys remembered; the store covers the rest


class CheckStore(Protocol):
    def record_check(self, binding_id: str, commit: str, context: str, state: str,
                     summary: str, target: str) -> bool: ...

    def list_checks(self, commit: str | None = None,
                    binding_id: str | None = None) -> list[Any]: ...


class CheckPoster:
    def __init__(self, store: CheckStore, writers: Mapping[str, CheckWriter],
                 log: logging.Logger | None = None,
                 commenter: comments.PlanCommenter | None = None) -> None:
        self._store = store
        self._writers = dict(writers)
        self._commenter = commenter
        self._log = log or logging.getLogger("nodus_gitops.checks")
        self._posted: OrderedDict[tuple[str, str, str, str], tuple[str, str]] = OrderedDict()
        self._lock = threading.Lock()

    def post(self, run: CheckRun) -> None:
        """Show `run` through every writer; never raises."""
        for writer in self._writers.values():
            try:
                self._post_one(writer, run)
            except Exception:  # a bug in one writer must not stop the others or the sync
                self._log.exception("check writer crashed", extra=_fields(writer, run))

    def comment(self, review: PlanReview, ref: str, number: int | None) -> None:
        """Show `review` as the plan comment of its pull request, when the binding has
        comments on; never raises."""
        if self._commenter is not None:
            self._commenter.post(review, ref, number)

    def _post_one(self, writer: CheckWriter, run: CheckRun) -> None:
        if self._already_posted(writer.name, run):
            return
        try:
            writer.post(run)
        except TransientError as exc:
            self._log.warning("check not posted, will retry with the next post: %s", exc,
                              extra={**_fields(writer, run), "retry_after": exc.delay})
            return
        except NodusGitopsError as exc:
            self._log.error("check not posted: %s", exc, extra=_fields(writer, run))
            return
        self._remember(writer.name, run)
        try:
            self._store.record_check(run.binding_id, run.commit, run.context,
                                     run.state.value, run.summary, target=writer.name)
        except Exception as exc:  # posted, but a restart may post it once more: harmless
            self._log.warning("check posted but not recorded: %s", exc,
                              extra=_fields(writer, run))

    def _already_posted(self, target: str, run: CheckRun) -> bool:
        key = (run.binding_id, run.commit, run.context, target)
        wanted = (run.state.value, run.summary)
        with self._lock:
            if self._posted.get(key) == wanted:
                return True
        try:
            records = self._store.list_checks(commit=run.commit, binding_id=run.binding_id)
        except Exception as exc:  # the store is down: posting twice beats not posting
            self._log.warning("check records unreadable: %s", exc)
            return False
        for record in records:
            if record.context == run.context and record.target == target:
                if (record.state, record.summary) == wanted:
                    self._remember(target, run)
                    return True
                return False
        return False

    def _remember(self, target: str, run: CheckRun) -> None:
        with self._lock:
            key = (run.binding_id, run.commit, run.context, target)
            self._posted[key] = (run.state.value, run.summary)
            self._posted.move_to_end(key)
            while len(self._posted) > MEMORY:
                self._posted.popitem(last=False)


def _fields(writer: CheckWriter, run: CheckRun) -> dict[str, str]:
    return {"writer": writer.name, "binding": run.binding_id, "commit": run.commit,
            "context": run.context, "state": run.state.value}


# -- configuration ----------------------------------------------------------------------

_KEYS = {
    "gitnotes": {"push"},
    "github": {"tokenEnv", "tokenFile", "mode", "apiUrl", "repository", "minInterval"},
    "gitlab": {"tokenEnv", "tokenFile", "apiUrl", "project", "minInterval"},
    "gitea": {"tokenEnv", "tokenFile", "apiUrl", "repository", "minInterval"},
}
_DEFAULT_TOKEN_ENV = {"github": "GITHUB_TOKEN", "gitlab": "GITLAB_TOKEN", "gitea": "GITEA_TOKEN"}


def build_poster(store: CheckStore, checks_settings: Mapping[str, Any] | None,
                 binding: Binding, *, limiter: HostLimiter | None = None,
                 **options: Any) -> CheckPoster:
    """The poster of `binding`: its check writers, and its comment writers when the
    binding has `comments: true` (options as for `build_writers`). A process that posts
    for several bindings passes them all one `limiter`."""
    writers, commenters = _build(checks_settings, binding, limiter=limiter, **options)
    if binding.comments and not commenters:
        raise ConfigError(f"repo binding {binding.id!r}: comments: true needs a host to "
                          "comment through: set checks.github, checks.gitlab or checks.gitea")
    return CheckPoster(store, writers,
                       commenter=comments.PlanCommenter(commenters) if commenters else None)


def build_writers(checks_settings: Mapping[str, Any] | None, binding: Binding, *,
                  limiter: HostLimiter | None = None, **options: Any) -> dict[str, CheckWriter]:
    """Writers for `binding` from settings like `{"gitnotes": {"push": true}, "github":
    {"tokenEnv": "GITHUB_TOKEN", "mode": "checks"}}`; `false` turns a writer off. With no
    settings, local git notes in the binding's mirror (`source`, or one under
    `mirror_dir`). `limiter` paces the writes to each host: share one between all the
    bindings of a process (None: one of their own, for these writers only)."""
    return _build(checks_settings, binding, limiter=limiter, **options)[0]


def _build(
    checks_settings: Mapping[str, Any] | None,
    binding: Binding,
    *,
    source: GitSource | None = None,
    mirror_dir: Path | None = None,
    environ: Mapping[str, str] | None = None,
    limiter: HostLimiter | None = None,
    sleep: Callable[[float], None] = time.sleep,
    transport: httpx.BaseTransport | None = None,
) -> tuple[dict[str, CheckWriter], dict[str, comments.CommentWriter]]:
    env = os.environ if environ is None else environ
    settings = dict(checks_settings or {})
    if not set(settings) - {"webhooks"} and (source is not None or mirror_dir is not None):
        settings = {**settings, "gitnotes": {}}
    if limiter is None:
        limiter = HostLimiter()
    writers: dict[str, CheckWriter] = {}
    commenters: dict[str, comments.CommentWriter] = {}
    for name, raw in settings.items():
        if name == "webhooks":  # incoming webhook secrets, read by reconciler.web.hooks
            continue
        if name not in _KEYS:
            raise ConfigError(f"checks: unknown check writer {name!r} "
                              f"(known: {', '.join(_KEYS)})")
        if raw is False or raw is None:
            continue
        cfg = {} if raw is True else raw
        if not isinstance(cfg, Mapping):
            raise ConfigError(f"checks.{name}: expected a mapping of settings or true/false")
        refuse_unknown_settings(cfg, sorted(_KEYS[name]), f"checks.{name}")
        if name == "gitnotes":
            writers[name] = _gitnotes(cfg, binding, source, mirror_dir)
            continue
        app = binding.github_app if name == "github" else None
        base_url = _api_url(name, cfg, binding, app.api_url if app else None)
        path = _repository(name, cfg, binding)
        api = ApiClient(
            base_url=base_url, token=app.token(path) if app else _token(name, cfg, env),
            auth={"github": github_api.github_auth, "gitlab": gitlab.gitlab_auth,
                  "gitea": gitea.gitea_auth}[name],
            headers=github_api.github_headers() if name == "github" else {},
            min_interval=_interval(name, cfg), limiter=limiter, sleep=sleep,
            transport=transport)
        writers[name] = _hosted(name, cfg, path, api, app_default=app is not None)
        if binding.comments:
            commenters[name] = _commenter(name, api, path, binding, app)
    return writers, commenters


def _gitnotes(cfg: Mapping[str, Any], binding: Binding, source: GitSource | None,
              mirror_dir: Path | None) -> GitNotesWriter:
    push = cfg.get("push", False)
    if not isinstance(push, bool):
        raise ConfigError(f"checks.gitnotes.push: {push!r} is not true or false")
    credentials = binding.credentials()
    if source is None:
        if mirror_dir is None:
            raise ConfigError("checks.gitnotes: needs the binding's Git mirror (stateDir)")
        source = GitSource(binding.url, binding.branch, mirror_dir, credentials)
    # Its own handle on the mirror: libgit2 handles must not cross threads.
    return GitNotesWriter(source.path, binding.url, credentials, push=push)


def _repository(name: str, cfg: Mapping[str, Any], binding: Binding) -> str:
    key = "project" if name == "gitlab" else "repository"
    path = str(cfg.get(key) or _repo_path(name, key, binding))
    if name != "gitlab" and path.count("/") != 1:
        raise ConfigError(f"checks.{name}.{key}: {path!r} is not owner/name")
    return path


def _hosted(name: str, cfg: Mapping[str, Any], path: str, api: ApiClient, *,
            app_default: bool) -> CheckWriter:
    if name == "gitlab":
        return gitlab.GitLabStatusWriter(api, path)
    if name == "gitea":
        return gitea.GiteaStatusWriter(api, path)
    mode = cfg.get("mode", "checks" if app_default else "statuses")
    if mode == "checks":
        return github.GitHubChecksWriter(api, path)
    if mode == "statuses":
        return github.GitHubStatusWriter(api, path)
    raise ConfigError(f"checks.github.mode: {mode!r} is not 'checks' (a GitHub App "
                      "installation token) or 'statuses' (any token)")


def _commenter(name: str, api: ApiClient, path: str, binding: Binding,
               app: GitHubApp | None) -> comments.CommentWriter:
    try:
        web_base = split_repo_url(binding.url)[0]
    except ValueError:
        web_base = ""  # a repository on this machine: links lead nowhere useful anyway
    if name == "gitlab":
        return comments.GitLabNotes(api, path, web_base)
    if name == "gitea":
        return comments.GiteaComments(api, path, web_base)
    # An installation token cannot ask GET /user: the App says its own name.
    return comments.GitHubComments(api, path, web_base,
                                   login=app.bot_login if app is not None else None)


def _repo_path(name: str, key: str, binding: Binding) -> str:
    try:
        return split_repo_url(binding.url)[1]
    except ValueError:
        raise ConfigError(f"checks.{name}.{key}: cannot tell it from the repository URL of "
                          f"binding {binding.id!r}; set it") from None


def _api_url(name: str, cfg: Mapping[str, Any], binding: Binding, app_api: str | None) -> str:
    if app_api:  # the App's tokens go to the App's API, and nowhere else
        if cfg.get("apiUrl") and str(cfg["apiUrl"]).rstrip("/") != app_api.rstrip("/"):
            raise ConfigError(f"checks.{name}.apiUrl ({cfg['apiUrl']}) is not the API of the "
                              f"GitHub App of binding {binding.id!r}, githubApp.apiUrl "
                              f"({app_api}): remove checks.{name}.apiUrl, or set "
                              "githubApp.apiUrl")
        return app_api
    if cfg.get("apiUrl"):
        return str(cfg["apiUrl"])
    try:
        web_base = split_repo_url(binding.url)[0]
    except ValueError:
        raise ConfigError(f"checks.{name}.apiUrl: cannot tell the API from the repository "
                          f"URL of binding {binding.id!r}; set it") from None
    module = {"github": github, "gitlab": gitlab, "gitea": gitea}[name]
    return module.default_api_url(web_base)


def _token(name: str, cfg: Mapping[str, Any], environ: Mapping[str, str]) -> TokenSource:
    if cfg.get("tokenFile"):
        path = Path(str(cfg["tokenFile"])).expanduser()
        if not path.is_file():
            raise ConfigError(f"checks.{name}.tokenFile: {path} does not exist")
        return Token(setting=f"checks.{name}.tokenFile ({path})", file=path)
    variable = str(cfg.get("tokenEnv") or _DEFAULT_TOKEN_ENV[name])
    value = environ.get(variable)
    if not value:
        raise ConfigError(f"checks.{name}.tokenEnv: the environment variable {variable} is "
                          "not set (or set tokenFile)")
    return Token(setting=f"checks.{name}.tokenEnv ({variable})", value=value)


def _interval(name: str, cfg: Mapping[str, Any]) -> float:
    value = cfg.get("minInterval", 1.0)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigError(f"checks.{name}.minInterval: {value!r} is not a number of seconds")
    return float(value)


