"""The one place Nodus API answers become provider errors.

The API answers failures with Kubernetes `Status` objects (`reason`, `code`, `message`,
`details.causes`). `raise_for_status` turns every non-2xx answer into exactly one error of
the reconciler's tree; callers that treat an answer as success (404 on delete, 409
AlreadyExists on create) catch the specific subclass. Server causes stay data
(`InvalidManifest.causes`) so they can be shown on the manifest's own lines.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

import httpx
from nodus_gitops.floor.errors import NotFoundError, PermanentError, TransientError
from nodus_gitops.floor.problems import Problem, json_path
from nodus_gitops.floor.retry import retry_after

Cause = tuple[str, str]  # (field path such as spec.stages[1].template.timeout, message)


class InvalidManifest(PermanentError):
    """422 Invalid: the server rejected the manifest; `causes` name the fields."""

    def __init__(self, message: str, causes: list[Cause]) -> None:
        super().__init__(message)
        self.causes = causes


class AlreadyExists(PermanentError):
    """409 AlreadyExists on create; `create` decides whether to adopt the resource."""


class Conflict(TransientError):
    """409 Conflict on an update: someone else changed it first; re-read and retry."""


def status_of(response: httpx.Response) -> dict[str, Any]:
    """The response's `Status` object, or a stand-in when the body is not one."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("kind") == "Status":
        return body
    text = response.text.strip().splitlines()[0][:200] if response.text.strip() else ""
    return {"code": response.status_code, "message": text or response.reason_phrase}


def causes_of(status: dict[str, Any]) -> list[Cause]:
    causes = (status.get("details") or {}).get("causes") or []
    return [(str(c.get("field") or ""), str(c.get("message") or c.get("reason") or "invalid"))
            for c in causes if isinstance(c, dict)]


def raise_for_status(response: httpx.Response, what: str, *, credential: str,
                     now: Callable[[], datetime]) -> None:
    """Raise the error for a failed answer to `what` (such as `create Job/team-a/hello`);
    `credential` names the setting the API key came from, for 401 and 403."""
    code = response.status_code
    if code < 400:
        return
    status = status_of(response)
    reason = status.get("reason") or ""
    message = str(status.get("message") or response.reason_phrase)
    if code == 401 or reason == "Unauthorized":
        raise PermanentError(f"{what}: the Nodus API rejected the API key (401 Unauthorized: "
                             f"{message}); put a valid key in {credential}")
    if code == 403 or reason == "Forbidden":
        raise PermanentError(f"{what}: the API key from {credential} is not allowed to do "
                             f"this (403 Forbidden: {message}); grant it access to the project "
                             "or bind the repository to a project it can use")
    if code == 404 or reason == "NotFound":
        raise NotFoundError(f"{what}: not found ({message})")
    if code == 409 and reason == "AlreadyExists":
        raise AlreadyExists(f"{what}: already exists ({message})")
    if code == 409 and reason == "Conflict":
        raise Conflict(f"{what}: changed concurrently ({message})")
    if code == 422 or reason == "Invalid":
        causes = causes_of(status)
        listed = "; ".join(f"{f}: {m}" if f else m for f, m in causes)
        raise InvalidManifest(f"{what}: rejected as invalid: {listed or message}", causes)
    if code == 429 or code >= 500:
        delay = retry_after(response.headers.get("Retry-After"), now().timestamp())
        raise TransientError(f"{what}: the Nodus API answered {code} {reason or ''}".rstrip()
                             + f" ({message}); retrying later", delay)
    raise PermanentError(f"{what}: the Nodus API answered {code} {reason}".rstrip()
                         + f" ({message})")


def transport_error(error: httpx.HTTPError, what: str) -> TransientError:
    """A timeout or a broken connection: the request may or may not have arrived. Retrying
    is safe because every create carries its Idempotency-Key."""
    kind = "timed out" if isinstance(error, httpx.TimeoutException) else "failed"
    return TransientError(f"{what}: the request to the Nodus API {kind} "
                          f"({type(error).__name__}: {error}); retrying later")


_SEGMENT = re.compile(r"([^.\[\]]+)|\[(\d+)\]|\[([^\]]*)\]")


def field_path(text: str) -> tuple[str | int, ...]:
    """`spec.stages[1].template.timeout` -> ('spec', 'stages', 1, 'template', 'timeout');
    a bracketed key (`metadata.labels[nodus.dev/x]`) stays one string part."""
    parts: list[str | int] = []
    for name, index, key in _SEGMENT.findall(text):
        parts.append(int(index) if index else (name or key))
    return tuple(parts)


def causes_to_problems(causes: Iterable[Cause], manifest_file: str,
                       doc_line_of: Callable[[tuple[str | int, ...]], int], *,
                       kind: str = "", name: str = "") -> list[Problem]:
    """Server causes as validation problems, each on the line of the field it names
    (or the nearest parent `doc_line_of` finds)."""
    problems = []
    for text, message in causes:
        path = field_path(text)
        problems.append(Problem(manifest_file, doc_line_of(path), kind, name,
                                json_path(path), message))
    return problems
