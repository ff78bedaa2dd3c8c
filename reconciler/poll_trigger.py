"""When a binding polls: its first sync at once, then every interval from its own phase.

One scheduler job a binding with this trigger, rather than a one-off job for the first
sync beside an interval job: APScheduler 3 removes a one-off job once it ran, and a
shutdown at that moment (the state set to stopped before its lock is taken) makes that
removal raise JobLookupError in the scheduler's thread. A job that never ends is never
removed."""

from __future__ import annotations

from datetime import datetime, timedelta

from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.interval import IntervalTrigger


class FirstThenEvery(BaseTrigger):
    """Fires at `first`, then at `start`, `start + interval`, ... (the first of those
    after the time it last fired, skipping any already passed)."""

    def __init__(self, first: datetime, interval: float, start: datetime) -> None:
        self.first = first
        self.every = IntervalTrigger(seconds=interval, start_date=start,
                                     timezone=start.tzinfo)

    def get_next_fire_time(self, previous_fire_time: datetime | None,
                           now: datetime) -> datetime | None:
        if previous_fire_time is None:
            return self.first
        # the regular polls start from the phase, not from when the first sync ran
        after = max(previous_fire_time, now) + timedelta(microseconds=1)
        return self.every.get_next_fire_time(None, after)

    def __str__(self) -> str:
        return f"first at {self.first.isoformat()}, then {self.every}"
