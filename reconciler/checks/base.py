"""The check-writer interface, and the one-line description hosts with statuses only
show. `CheckWriter.post` either shows the check or raises `TransientError(delay)` (worth
trying again later) or `PermanentError` (the request or the setup is wrong); the HTTP
behaviour every hosted writer shares is `nodus_gitops.hosts.client.ApiClient`.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from nodus_gitops.checks.model import CheckRun
from nodus_gitops.floor.markdown_text import plain
from nodus_gitops.hosts.client import truncate


@runtime_checkable
class CheckWriter(Protocol):
    """Shows a `CheckRun` on one host; `name` is its target in the check records."""

    name: str

    def post(self, run: CheckRun) -> None: ...


def describe(run: CheckRun, limit: int) -> str:
    """One line for hosts whose statuses have only a description: title, then the
    summary's first line when it adds something. A description is plain text: the
    escapes that kept a manifest's text from being Markdown in the summary are undone."""
    first = next((plain(line.strip()) for line in run.summary.splitlines() if line.strip()),
                 "")
    text = f"{run.title}: {first}" if first and first != run.title else run.title
    return truncate(text, limit)

