"""Commit checks as frozen values: what one writer is asked to show on one commit.

A `CheckRun` is host-neutral; each writer maps it to its host's vocabulary. Context names
are `nodus/<instance>/<kind>` so that two reconcilers (or the sync and plan checks of one)
never overwrite each other's check on the same commit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

CHECK_KINDS = ("sync", "plan", "run")
_INSTANCE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class CheckState(StrEnum):
    PENDING = "pending"
    SUCCESS = "success"
    FAILURE = "failure"  # the commit is wrong: invalid manifests, a refused plan
    ERROR = "error"  # the reconciler could not judge: remote down, provider failure


class AnnotationLevel(StrEnum):
    NOTICE = "notice"
    WARNING = "warning"
    FAILURE = "failure"


@dataclass(frozen=True)
class Annotation:
    """One problem at a file and line of the commit (line 1 when the file is the point)."""

    path: str
    line: int
    message: str
    level: str = AnnotationLevel.FAILURE

    def __post_init__(self) -> None:
        object.__setattr__(self, "level", AnnotationLevel(self.level))
        object.__setattr__(self, "line", max(1, int(self.line)))  # hosts reject line 0


@dataclass(frozen=True)
class CheckRun:
    """The check `context` of `commit` in `repo_url`, as `binding_id` sees it now."""

    binding_id: str
    repo_url: str
    commit: str
    context: str
    state: CheckState
    title: str
    summary: str
    annotations: tuple[Annotation, ...] = ()
    details_url: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", CheckState(self.state))
        object.__setattr__(self, "annotations", tuple(self.annotations))


def context_name(instance: str, kind: str) -> str:
    """`nodus/<instance>/<kind>` for kind sync, plan or run."""
    if kind not in CHECK_KINDS:
        raise ValueError(f"check kind {kind!r} is not one of {', '.join(CHECK_KINDS)}")
    if not _INSTANCE.match(instance):
        raise ValueError(f"instance name {instance!r} cannot be part of a check context")
    return f"nodus/{instance}/{kind}"
