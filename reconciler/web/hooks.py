"""Webhooks in: verify a delivery, read which repository and ref it is about, and ask the
service to sync (a push) or to preview (a pull or merge request). Pure functions over
(host, headers, body); the HTTP server calls `handle` and sends what it returns.

A webhook never says what to apply: it only makes the reconciler fetch from Git, so a
forged or replayed one can at worst cause an early poll. A pull request is previewed only
by the bindings that track the branch it merges into (its base): the plan is against
that branch's recorded state. Still, every delivery must be
signed with the host's secret: GitHub `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the
body>`, Gitea/Forgejo `X-Gitea-Signature` (`X-Forgejo-Signature`): `<hex HMAC-SHA256>`,
GitLab `X-Gitlab-Token: <secret>`, anything else `X-Nodus-Signature-256: sha256=<hex>`.
The HMACs cover the exact body bytes, so a replay with a changed body fails.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

MAX_BODY_BYTES = 1024 * 1024
HOSTS = ("github", "gitea", "gitlab", "generic")
SECRET_ENV = "NODUS_GITOPS_WEBHOOK_SECRET_{host}"  # e.g. NODUS_GITOPS_WEBHOOK_SECRET_GITHUB
_PR_ACTIONS = {"opened", "reopened", "synchronize", "synchronized", "edited", "ready_for_review"}
_MR_ACTIONS = {"open", "reopen", "update"}  # GitLab merge request object_attributes.action

Kind = Literal["push", "pull_request", "ping", "other"]


@dataclass(frozen=True)
class HookEvent:
    kind: Kind
    repo_names: tuple[str, ...] = ()  # full names ("owner/repo") and clone/web URLs
    ref: str | None = None
    head_sha: str | None = None
    pr_number: int | None = None
    base: str | None = None  # a pull request's base (target) branch


class HookService(Protocol):
    """What a webhook needs of the service (the Service implements it)."""

    def bindings_for_repo(self, names: tuple[str, ...]) -> list[str]: ...

    def branch_of(self, binding_id: str) -> str | None: ...

    def trigger(self, binding_id: str) -> bool: ...

    def trigger_preview(self, binding_id: str, ref: str | None, head_sha: str | None,
                        pr_number: int | None) -> bool: ...


def secret_setting(host: str) -> str:
    return (f"checks.webhooks.{host} (a secret, or {{secretEnv: VAR}} or {{secretFile: "
            f"PATH}}) or {SECRET_ENV.format(host=host.upper())}")


def resolve_secret(host: str, secrets: Mapping[str, Any],
                   environ: Mapping[str, str] | None = None) -> str | None:
    """The secret of `host`: `checks.webhooks.<host>` as a string, as `{secretEnv: VAR}` or
    `{secretFile: PATH}` (re-read each time, so it can rotate), else the environment."""
    env = os.environ if environ is None else environ
    value = secrets.get(host)
    if isinstance(value, str):
        return value or None
    if isinstance(value, Mapping):
        if value.get("secretEnv"):
            return env.get(str(value["secretEnv"])) or None
        if value.get("secretFile"):
            try:
                return Path(str(value["secretFile"])).expanduser().read_text().strip() or None
            except OSError:
                return None
    return env.get(SECRET_ENV.format(host=host.upper())) or None


def sign(body: bytes, secret: str) -> str:
    """The hex HMAC-SHA256 of `body` (what GitHub, Gitea and generic senders compute)."""
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify(host: str, headers: Mapping[str, str], body: bytes, secret: str) -> bool:
    """Whether `headers` carry a valid signature (or token) of `body` for `host`."""
    if not secret:
        return False
    h = _lower(headers)
    if host == "gitlab":  # a plain shared token, not a signature of the body
        return hmac.compare_digest(h.get("x-gitlab-token", "").encode(), secret.encode())
    if host == "gitea":  # Forgejo sends both; its own header wins when present
        given = h.get("x-forgejo-signature") or h.get("x-gitea-signature", "")
    elif host in ("github", "generic"):
        header = "x-hub-signature-256" if host == "github" else "x-nodus-signature-256"
        prefix, _, given = h.get(header, "").partition("=")
        if prefix != "sha256":
            return False
    else:
        return False
    return hmac.compare_digest(given.strip().lower().encode(), sign(body, secret).encode())


def parse_event(host: str, headers: Mapping[str, str], body: bytes) -> HookEvent:
    """What a delivery is about; raises ValueError when the body is not a JSON object."""
    payload = json.loads(body)
    if not isinstance(payload, dict):
        raise ValueError("the body is not a JSON object")
    h = _lower(headers)
    if host == "gitlab":
        return _gitlab(h.get("x-gitlab-event", ""), payload)
    if host == "generic":
        return _generic(payload)
    event = (h.get("x-github-event", "") if host == "github" else
             h.get("x-forgejo-event") or h.get("x-gitea-event") or h.get("x-github-event", ""))
    return _github_like(event, payload)


def handle(service: HookService, host: str, headers: Mapping[str, str], body: bytes,
           secrets: Mapping[str, Any], *,
           environ: Mapping[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    """(HTTP status, JSON body) for one delivery. Returns at once: syncs run elsewhere.
    `secrets` is the `checks.webhooks` setting (see `resolve_secret`)."""
    if host not in HOSTS:
        return 404, {"error": f"no webhook endpoint for {host!r} (use one of "
                              f"{', '.join(HOSTS)})"}
    if len(body) > MAX_BODY_BYTES:
        return 413, {"error": f"the body is larger than {MAX_BODY_BYTES} bytes"}
    secret = resolve_secret(host, secrets, environ)
    if not secret:
        return 401, {"error": f"no webhook secret is configured for {host}: set "
                              f"{secret_setting(host)}"}
    if not verify(host, headers, body, secret):
        return 401, {"error": "missing or invalid webhook signature"}
    try:
        event = parse_event(host, headers, body)
    except (ValueError, UnicodeDecodeError) as exc:
        return 400, {"error": f"the body is not a webhook payload: {exc}"}
    if event.kind == "ping":
        return 202, {"triggered": [], "note": "ping received"}
    if event.kind == "other":
        return 202, {"triggered": [], "note": "this event does not trigger a sync"}
    bindings = service.bindings_for_repo(event.repo_names)
    if not bindings:
        return 202, {"triggered": [], "note": "no repo binding follows this repository"}
    if event.kind == "pull_request":
        # Its plan is against the branch it merges into: only a binding of that branch
        # may say what merging applies.
        bindings = [b for b in bindings if event.base and service.branch_of(b) == event.base]
        if not bindings:
            note = ("the pull request names no base branch" if not event.base else
                    f"no repo binding of this repository tracks the base branch {event.base!r}")
            return 202, {"triggered": [], "note": note}
    triggered = []
    for binding_id in bindings:
        if event.kind == "push":
            started = service.trigger(binding_id)
        else:
            started = service.trigger_preview(binding_id, event.ref, event.head_sha,
                                              event.pr_number)
        if started is not False:
            triggered.append(binding_id)
    return 202, {"triggered": triggered, "event": event.kind}


def _branch_name(ref: Any) -> str | None:
    """`main` for `main` or `refs/heads/main`; None when not a name."""
    if not isinstance(ref, str):
        return None
    return ref.removeprefix("refs/heads/") or None


def _lower(headers: Mapping[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


def _names(*values: Any) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for value in values:
        if isinstance(value, str) and value:
            seen[value] = None
    return tuple(seen)


def _github_like(event: str, payload: dict[str, Any]) -> HookEvent:
    """GitHub, Gitea and Forgejo share the payload shape of push and pull_request."""
    repo = payload.get("repository") or {}
    names = _names(repo.get("full_name"), repo.get("clone_url"), repo.get("html_url"),
                   repo.get("ssh_url"))
    if event == "ping":
        return HookEvent("ping", names)
    if event == "push":
        return HookEvent("push", names, payload.get("ref"), payload.get("after"))
    if event in ("pull_request", "pull_request_sync"):
        pr = payload.get("pull_request") or {}
        head = pr.get("head") or {}
        if payload.get("action") not in _PR_ACTIONS:
            return HookEvent("other", names)
        number = payload.get("number", pr.get("number"))
        return HookEvent("pull_request", names, head.get("ref"), head.get("sha"),
                         int(number) if number is not None else None,
                         _branch_name((pr.get("base") or {}).get("ref")))
    return HookEvent("other", names)


def _gitlab(event: str, payload: dict[str, Any]) -> HookEvent:
    project = payload.get("project") or {}
    names = _names(project.get("path_with_namespace"), project.get("git_http_url"),
                   project.get("web_url"), project.get("git_ssh_url"))
    if event == "Push Hook":
        return HookEvent("push", names, payload.get("ref"),
                         payload.get("checkout_sha") or payload.get("after"))
    if event == "Merge Request Hook":
        attrs = payload.get("object_attributes") or {}
        if attrs.get("action") not in _MR_ACTIONS:
            return HookEvent("other", names)
        iid = attrs.get("iid")
        return HookEvent("pull_request", names, attrs.get("source_branch"),
                         (attrs.get("last_commit") or {}).get("id"),
                         int(iid) if iid is not None else None,
                         _branch_name(attrs.get("target_branch")))
    return HookEvent("other", names)


def _generic(payload: dict[str, Any]) -> HookEvent:
    """`{"event": "push"|"pull_request", "repository": name or [names], "ref", "sha",
    "number", "base"}` for senders that are not a Git host (a CI job, a script); `base`:
    the branch a pull request merges into."""
    repos = payload.get("repository")
    names = _names(*(repos if isinstance(repos, list) else [repos]))
    kind = payload.get("event", "push")
    if kind not in ("push", "pull_request", "ping"):
        return HookEvent("other", names)
    number = payload.get("number")
    return HookEvent(kind, names, payload.get("ref"), payload.get("sha"),
                     int(number) if number is not None else None,
                     _branch_name(payload.get("base")))
