"""What the local backend cannot honour of where and how a Job asked to run.

This machine is the backend's only capacity: it has no region class, none of it is
interruptible, and there is no other capacity to pick for a deadline. A Job that sets
placement.regions, placement.interruptible: true or completeByTime runs here anyway,
and these sentences, one per field, say so in the Job's events (and so in `describe`).
"""

from __future__ import annotations

from nodus_gitops.floor.quantities import parse_time
from nodus_gitops.providers.local.spec import JobSpec


def not_honoured(spec: JobSpec, now: float) -> list[str]:
    notes = []
    if spec.regions:
        notes.append(f"placement.regions ({', '.join(spec.regions)}): this machine has no "
                     "region class; the Job runs here")
    if spec.interruptible:
        notes.append("placement.interruptible: this machine has no interruptible capacity; "
                     "the Job runs on capacity that is never reclaimed, at the same rate")
    if spec.complete_by:
        notes.append(_complete_by(spec, now))
    return notes


def _complete_by(spec: JobSpec, now: float) -> str:
    note = (f"completeByTime ({spec.complete_by}): this machine is the only capacity, so "
            "the time picks none; the Job runs here as soon as it can")
    when = parse_time(spec.complete_by)
    if when is None:
        return note
    left = when.timestamp() - now
    if left <= 0:
        return note + ", and the time has already passed"
    if spec.expected_duration is not None and spec.expected_duration > left:
        return note + (f", and expectedDuration ({spec.expected_duration:g}s) says it "
                       f"should not finish in time ({left:.0f}s left)")
    return note
