"""When a binding polls: its first sync at once, then every interval from its own phase.

One scheduler job a binding with this trigger, rather than a one-off job for the first
sync beside an interval job: APScheduler 3 removes a one-off job once it ran, and a
shutdown at that moment (the state set to stopped before its lock is taken) makes that
removal raise JobLookupError in the scheduler's thread. A job that never ends is never
removed."""

from __future__ import annotations

import concurrent.futures
from datetime import datetime, timedelta

from apscheduler.executors.base import run_job
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.job import Job
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


class FirstSyncsApart(ThreadPoolExecutor):
    """The scheduler's workers, with every binding's first sync (its FirstThenEvery's
    first run) on a pool of threads of its own. On one pool, the polls that came due
    while first syncs were queued (1,000 bindings at start) waited behind them in its
    one queue, 43 s at most, and each one's next poll was skipped meanwhile (its
    previous run had not ended): a lag of 41 s past the interval. A poll of a binding
    whose first sync is still queued is skipped as before (max_instances)."""

    def __init__(self, max_workers: int) -> None:
        super().__init__(max_workers)
        self._first_syncs = concurrent.futures.ThreadPoolExecutor(
            max_workers, thread_name_prefix="first-sync")

    def _do_submit_job(self, job: Job, run_times: list[datetime]) -> None:
        trigger = job.trigger
        if not (isinstance(trigger, FirstThenEvery) and run_times[-1] == trigger.first):
            super()._do_submit_job(job, run_times)
            return

        def done(future: concurrent.futures.Future) -> None:
            error = future.exception()
            if error is not None:
                self._run_job_error(job.id, error, error.__traceback__)
            else:
                self._run_job_success(job.id, future.result())

        self._first_syncs.submit(run_job, job, job._jobstore_alias, run_times,
                                 self._logger.name).add_done_callback(done)

    def shutdown(self, wait: bool = True) -> None:
        self._first_syncs.shutdown(wait)
        super().shutdown(wait)
