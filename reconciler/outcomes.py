"""Where a binding's outcomes go. The sync ladder says what happened to a commit through
this protocol; the checks package implements it (commit checks and plan comments on the
Git host), and the composition root hands one to each binding's sync, so the engine never
imports the layer above it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from nodus_gitops.floor.problems import Problem
from nodus_gitops.floor.results import SyncResult
from nodus_gitops.plan import Plan
from nodus_gitops.state.records import InventoryRecord


class CommitReporter(Protocol):
    def sync_started(self, commit: str) -> None:
        """The commit is being planned and applied."""

    def runs_started(self, commit: str, count: int) -> None:
        """`count` resources the commit created or replaced are running."""

    def sync_finished(self, commit: str, result: SyncResult, message: str,
                      problems: Sequence[Problem], plan: Plan | None,
                      summary: dict[str, int]) -> None:
        """What syncing the commit did, whatever step it ended at."""

    def runs_finished(self, commit: str, records: Sequence[InventoryRecord]) -> None:
        """Every resource the commit started reached a terminal phase."""

    def planned(self, commit: str, plan: Plan | None, problems: Sequence[Problem],
                ref: str, number: int | None) -> None:
        """A preview (a pull request's head, a preview branch) was planned, never applied."""
