"""ttlSecondsAfterFinished for composites and their children, applied by the controllers.

A stage's or cell's own TTL is the controller's to apply, not its backend's: the child
Job is created without it, so it cannot vanish before its result is in the composite's
record; the controller deletes it once the TTL passed (a stage whose outputs an
unfinished stage still takes as inputs waits for that stage). A finished composite's TTL
deletes it with every child Job and leaves a tombstone, so the same create again (a
journal resolving its intent) returns the finished composite instead of a second run.

Nothing reads a finished composite by itself (the service refreshes unfinished ones), so
`expire_finished()` is the step that keeps these on time: the service calls it
periodically. A plain Job's TTL is its backend's own (`ExpiresFinished` on the local and
Slurm backends, reached through the composite). Whichever removes something, it removes
only what a read has already shown finished: the reconciler's record of it is then final,
so the plan never sees it missing, to re-create or to call drift.
"""

from __future__ import annotations

from typing import Any

# The capability is one of the providers' (providers.base); named here too for the
# service, which asks `isinstance(provider, ExpiresFinished)`.
from nodus_gitops.providers.base import ExpiresFinished

__all__ = ["ExpiresFinished", "TTL_FIELD", "is_due", "ttl_of", "without_ttl"]

TTL_FIELD = "ttlSecondsAfterFinished"


def ttl_of(spec: dict[str, Any]) -> float | None:
    value = spec.get(TTL_FIELD)
    return None if value is None or isinstance(value, bool) else float(value)


def is_due(finished_at: float | None, ttl: float | None, now: float) -> bool:
    return finished_at is not None and ttl is not None and now >= finished_at + ttl


def without_ttl(spec: dict[str, Any]) -> dict[str, Any]:
    """A child's Job spec as its backend gets it: the TTL is the controller's."""
    return {k: v for k, v in spec.items() if k != TTL_FIELD}
