"""The named outcomes every layer speaks of: a sync's result, a plan's action types and
the journal's operations. One enum each, used by the store, the plan, apply, the checks,
the metrics and the API; no bare strings for them anywhere else. Imports nothing of the
project, so every layer may use it.
"""

from __future__ import annotations

from enum import StrEnum


class SyncResult(StrEnum):
    """What one reconcile step ended with. A step starts as ERROR and becomes anything
    else only once that is proven (an unexpected exception leaves it ERROR)."""

    PENDING = "pending"  # recorded at a sync's start, until it finishes
    APPLIED = "applied"  # every planned change was carried out
    NOOP = "noop"  # the commit was applied and nothing needed to change
    INVALID = "invalid"  # a manifest has problems: nothing of the commit applied
    BLOCKED = "blocked"  # every allowed change applied; some were refused by a guard
    PARTIAL = "partial"  # a provider call failed: the commit is not (fully) applied
    ERROR = "error"  # the reconciler could not judge or apply the commit
    # Polls that record no sync: the branch had not moved (or the invalid tip was
    # already judged), or a failed poll is waiting out its backoff.
    UNCHANGED = "unchanged"
    BACKOFF = "backoff"

    @property
    def applied(self) -> bool:
        """The commit is what the backend runs: the only results a green check shows."""
        return self in (SyncResult.APPLIED, SyncResult.NOOP)

    @property
    def ok(self) -> bool:
        """Nothing went wrong (a poll that found nothing new is fine)."""
        return self.applied or self is SyncResult.UNCHANGED


# What the dashboard and metrics count as a failure a person should look at.
FAILED_RESULTS = frozenset({SyncResult.INVALID, SyncResult.BLOCKED, SyncResult.PARTIAL,
                            SyncResult.ERROR})


class ActionType(StrEnum):
    """One planned action on one resource."""

    CREATE = "create"
    PATCH = "patch"
    REPLACE = "replace"
    DELETE = "delete"
    NOOP = "noop"
    BLOCKED = "blocked"


# Actions that start or change a run: what a commit's run check and follow-up reads wait
# for, and what a dry run sends.
RUNS = frozenset({ActionType.CREATE, ActionType.PATCH, ActionType.REPLACE})


class JournalOp(StrEnum):
    """One provider call journaled as an intent (a replace is a delete, then a create)."""

    CREATE = "create"
    PATCH = "patch"
    DELETE = "delete"


def counts_text(summary: dict[str, int]) -> str:
    """`1 created, 2 unchanged`: the counts a sync message and a check title show."""
    return ", ".join(f"{n} {k}" for k, n in summary.items() if n) or "nothing to do"
