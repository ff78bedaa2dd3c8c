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

Each signed delivery's id (GitHub `X-GitHub-Delivery`, Gitea `X-Gitea-Delivery` or
Forgejo `X-Forgejo-Delivery`, GitLab `X-Gitlab-Event-UUID`, others `X-Nodus-Delivery`)
is recorded in the state store, shared by every replica: the same id again (a host's
redelivery, or a replay of the request as it was sent) is answered 200 as a duplicate
and triggers nothing. Only a verified delivery is recorded, so unsigned requests cannot
fill the record, nor mark a genuine delivery's id as seen. The id is not covered by the
signature: a replay under a new id is stopped only by the point above, that a webhook
can at worst cause an early fetch.
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
MAX_DELIVERY_ID = 200  # characters; hosts send UUIDs (36)
HOSTS = ("github", "gitea", "gitlab", "generic")
SECRET_ENV = "NODUS_GITOPS_WEBHOOK_SECRET_{host}"  # e.g. NODUS_GITOPS_WEBHOOK_SECRET_GITHUB
_PR_ACTIONS = {"opened", "reopened", "synchronize", "synchronized", "edited", "ready_for_review"}
_MR_ACTIONS = {"open", "reopen", "update"}  # GitLab merge request object_attributes.action
# Where each host puts a delivery's id, in the order read (Forgejo sends all three).
DELIVERY_HEADERS = {"github": ("x-github-delivery",),
                    "gitea": ("x-forgejo-delivery", "x-gitea-delivery", "x-github-delivery"),
                    "gitlab": ("x-gitlab-event-uuid",),
                    "generic": ("x-nodus-delivery",)}

Kind = Literal["push", "pull_request", "ping", "other"]


@dataclass(frozen=True)
class HookEvent:
    kind: Kind
    repo_names: tuple[str, ...] = ()  # full names ("owner/repo") and clone/web URLs
    ref: str | None = None
    head_sha: str | None = None
    pr_number: int | None = None
    base: str | None = None  # a pull request's base (target) branch


class PayloadError(ValueError):
    """A body that is not the payload its host sends: what is wrong, for the 400."""


class HookService(Protocol):
    """What a webhook needs of the service (the Service implements it)."""

    def bindings_for_repo(self, names: tuple[str, ...], host: str) -> list[str]: ...

    def first_delivery(self, host: str, delivery_id: str) -> bool: ...

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
    """What a delivery is about; raises PayloadError when the body is not JSON, not an
    object, or has a field of another shape than the host sends."""
    try:
        payload = json.loads(body)
    except RecursionError:  # the decoder recurses once per level
        raise PayloadError("the body is JSON nested too deep") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise PayloadError(f"the body is not JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise PayloadError("the body is not a JSON object (a webhook payload is one)")
    h = _lower(headers)
    if host == "gitlab":
        return _gitlab(h.get("x-gitlab-event", ""), payload)
    if host == "generic":
        return _generic(payload)
    event = (h.get("x-github-event", "") if host == "github" else
             h.get("x-forgejo-event") or h.get("x-gitea-event") or h.get("x-github-event", ""))
    return _github_like(event, payload)


def delivery_id(host: str, headers: Mapping[str, str]) -> str | None:
    """The id the host gave this delivery; None when it sent none."""
    h = _lower(headers)
    return next((h[name].strip() for name in DELIVERY_HEADERS.get(host, ())
                 if h.get(name, "").strip()), None)


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
    except PayloadError as exc:
        return 400, {"error": f"not a webhook payload: {exc}"}
    delivery = delivery_id(host, headers)
    if delivery is not None:
        if len(delivery) > MAX_DELIVERY_ID or not delivery.isprintable():
            return 400, {"error": f"the delivery id is not one a host sends (printable, at "
                                  f"most {MAX_DELIVERY_ID} characters)"}
        if not service.first_delivery(host, delivery):
            return 200, {"triggered": [], "duplicate": True,
                         "note": f"delivery {delivery} was received before: nothing "
                                 "triggered"}
    if event.kind == "ping":
        return 202, {"triggered": [], "note": "ping received"}
    if event.kind == "other":
        return 202, {"triggered": [], "note": "this event does not trigger a sync"}
    bindings = service.bindings_for_repo(event.repo_names, host)
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


def _branch_name(ref: str | None) -> str | None:
    """`main` for `main` or `refs/heads/main`; None when not a name."""
    if not ref:
        return None
    return ref.removeprefix("refs/heads/") or None


def _lower(headers: Mapping[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


# -- reading a payload: every field checked for the shape its host sends ------------------


def _object(payload: dict[str, Any], key: str, where: str = "") -> dict[str, Any]:
    """`payload[key]` as an object ({} when absent or null)."""
    value = payload.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PayloadError(f"{where}{key} is not an object")
    return value


def _text(payload: dict[str, Any], key: str, where: str = "") -> str | None:
    """`payload[key]` as a string (None when absent or null)."""
    value = payload.get(key)
    if value is not None and not isinstance(value, str):
        raise PayloadError(f"{where}{key} is not a string")
    return value


def _number(payload: dict[str, Any], key: str, where: str = "") -> int | None:
    """`payload[key]` as a whole number (None when absent or null); digits as text too."""
    value = payload.get(key)
    if value is None:
        return None
    if isinstance(value, str) and value.isdigit():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise PayloadError(f"{where}{key} is not a whole number")
    return value


def _names(payload: dict[str, Any], keys: tuple[str, ...], where: str) -> tuple[str, ...]:
    """The non-empty strings under `keys`, each once, in order."""
    seen: dict[str, None] = {}
    for key in keys:
        if value := _text(payload, key, where):
            seen[value] = None
    return tuple(seen)


_REPO_NAMES = ("full_name", "clone_url", "html_url", "ssh_url")
_PROJECT_NAMES = ("path_with_namespace", "git_http_url", "web_url", "git_ssh_url")


def _github_like(event: str, payload: dict[str, Any]) -> HookEvent:
    """GitHub, Gitea and Forgejo share the payload shape of push and pull_request."""
    names = _names(_object(payload, "repository"), _REPO_NAMES, "repository.")
    if event == "ping":
        return HookEvent("ping", names)
    if event == "push":
        return HookEvent("push", names, _text(payload, "ref"), _text(payload, "after"))
    if event in ("pull_request", "pull_request_sync"):
        pr = _object(payload, "pull_request")
        head = _object(pr, "head", "pull_request.")
        ref, sha = _text(head, "ref", "pull_request.head."), _text(head, "sha",
                                                                   "pull_request.head.")
        base = _text(_object(pr, "base", "pull_request."), "ref", "pull_request.base.")
        number = _number(payload, "number")
        if number is None:
            number = _number(pr, "number", "pull_request.")
        if _text(payload, "action") not in _PR_ACTIONS:
            return HookEvent("other", names)
        return HookEvent("pull_request", names, ref, sha, number, _branch_name(base))
    return HookEvent("other", names)


def _gitlab(event: str, payload: dict[str, Any]) -> HookEvent:
    names = _names(_object(payload, "project"), _PROJECT_NAMES, "project.")
    if event == "Push Hook":
        return HookEvent("push", names, _text(payload, "ref"),
                         _text(payload, "checkout_sha") or _text(payload, "after"))
    if event == "Merge Request Hook":
        attrs = _object(payload, "object_attributes")
        where = "object_attributes."
        source, iid = _text(attrs, "source_branch", where), _number(attrs, "iid", where)
        last = _text(_object(attrs, "last_commit", where), "id", f"{where}last_commit.")
        target = _text(attrs, "target_branch", where)
        if _text(attrs, "action", where) not in _MR_ACTIONS:
            return HookEvent("other", names)
        return HookEvent("pull_request", names, source, last, iid, _branch_name(target))
    return HookEvent("other", names)


def _generic(payload: dict[str, Any]) -> HookEvent:
    """`{"event": "push"|"pull_request", "repository": name or [names], "ref", "sha",
    "number", "base"}` for senders that are not a Git host (a CI job, a script); `base`:
    the branch a pull request merges into."""
    repos = payload.get("repository")
    listed = repos if isinstance(repos, list) else [repos]
    if not all(r is None or isinstance(r, str) for r in listed):
        raise PayloadError("repository is not a name or a list of names")
    names = tuple(dict.fromkeys(r for r in listed if r))
    kind = _text(payload, "event") or "push"
    ref, sha = _text(payload, "ref"), _text(payload, "sha")
    number, base = _number(payload, "number"), _text(payload, "base")
    if kind not in ("push", "pull_request", "ping"):
        return HookEvent("other", names)
    return HookEvent(kind, names, ref, sha, number, _branch_name(base))  # type: ignore[arg-type]
