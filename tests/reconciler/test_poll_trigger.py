"""A binding's poll schedule: its first sync at once, then every interval from its phase,
one scheduler job that is never removed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st
from nodus_gitops.poll_trigger import FirstThenEvery

T0 = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


@given(interval=st.floats(1, 3600), phase=st.floats(0, 1),
       lateness=st.lists(st.floats(0, 7200), min_size=1, max_size=30))
def test_the_first_sync_is_at_once_and_every_later_poll_on_the_phase(interval, phase, lateness):
    start = T0 + timedelta(seconds=phase * interval)
    trigger = FirstThenEvery(T0, interval, start)
    fired = trigger.get_next_fire_time(None, T0)
    assert fired == T0
    for late in lateness:  # each run starts `late` seconds after it was due
        now = fired + timedelta(seconds=late)
        following = trigger.get_next_fire_time(fired, now)
        assert following is not None and following > fired and following > now - \
            timedelta(microseconds=1)
        # on the binding's phase: a whole number of intervals after its start (the
        # interval as the trigger holds it, in whole microseconds: 1.3671875 s is
        # 1,367,188 us, so 3 steps of the float are 1.5 us off)
        steps = (following - start) / trigger.every.interval
        assert abs(steps - round(steps)) < 1e-9 and round(steps) >= 0
        # and no poll on the phase was skipped that was still ahead
        assert following - timedelta(seconds=interval) <= max(now, fired) + \
            timedelta(milliseconds=1) or following == start
        fired = following


def test_a_scheduler_job_with_it_polls_at_once_and_stays_scheduled():
    import threading

    from apscheduler.schedulers.background import BackgroundScheduler

    ran = threading.Event()
    scheduler = BackgroundScheduler()
    now = datetime.now(UTC)
    scheduler.add_job(ran.set, FirstThenEvery(now, 600, now + timedelta(seconds=300)),
                      id="team-a")
    scheduler.start()
    try:
        assert ran.wait(10)
        job = scheduler.get_job("team-a")  # still there: never removed, so never raced
        assert job is not None and job.next_run_time >= now + timedelta(seconds=299)
    finally:
        scheduler.shutdown()
