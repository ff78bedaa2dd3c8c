"""The one retry helper (floor.retry): which errors retry, how often, how long it waits."""

from __future__ import annotations

import random

import pytest
from nodus_gitops.floor.retry import Backoff, RetryPolicy, retry_after


class Flaky(Exception):
    def __init__(self, delay: float | None = None) -> None:
        super().__init__("flaky")
        self.delay = delay


class Broken(Exception):
    pass


def failing(times: int, exc: Exception, result: str = "ok"):
    calls = {"n": 0}

    def fn() -> str:
        calls["n"] += 1
        if calls["n"] <= times:
            raise exc
        return result

    return fn, calls


def test_retryable_errors_are_retried_with_equal_jitter_backoff():
    waits: list[float] = []
    fn, calls = failing(3, Flaky())
    policy = RetryPolicy(attempts=4, base_delay=0.5, max_delay=30.0)
    assert policy.retrying(Flaky, sleep=waits.append, rng=random.Random(3))(fn) == "ok"
    assert calls["n"] == 4 and len(waits) == 3
    for n, wait in enumerate(waits):
        ceiling = 0.5 * 2**n
        assert ceiling / 2 <= wait <= ceiling


def test_the_last_error_is_raised_after_the_attempts():
    waits: list[float] = []
    fn, calls = failing(10, Flaky())
    with pytest.raises(Flaky):
        RetryPolicy(attempts=3).retrying(Flaky, sleep=waits.append)(fn)
    assert calls["n"] == 3 and len(waits) == 2


def test_other_errors_go_through_at_once():
    waits: list[float] = []
    fn, calls = failing(1, Broken())
    with pytest.raises(Broken):
        RetryPolicy().retrying(Flaky, sleep=waits.append)(fn)
    assert calls["n"] == 1 and waits == []


def test_one_attempt_never_retries():
    fn, calls = failing(1, Flaky())
    with pytest.raises(Flaky):
        RetryPolicy(attempts=1).retrying(Flaky, sleep=pytest.fail)(fn)
    assert calls["n"] == 1


def test_a_servers_wait_is_honoured_and_capped_at_the_max_delay():
    waits: list[float] = []
    fn, _ = failing(2, Flaky(delay=7.0))
    hint = lambda e: e.delay  # noqa: E731
    RetryPolicy(max_delay=30.0).retrying(Flaky, sleep=waits.append, hint=hint)(fn)
    assert waits == [7.0, 7.0]
    waits.clear()
    fn, _ = failing(1, Flaky(delay=500.0))
    RetryPolicy(max_delay=30.0).retrying(Flaky, sleep=waits.append, hint=hint)(fn)
    assert waits == [30.0]


def test_with_a_max_wait_a_longer_servers_wait_stops_the_retries():
    waits: list[float] = []
    fn, calls = failing(5, Flaky(delay=120.0))
    policy = RetryPolicy(max_delay=30.0, max_wait=90.0)
    with pytest.raises(Flaky) as raised:
        policy.retrying(Flaky, sleep=waits.append, hint=lambda e: e.delay)(fn)
    assert raised.value.delay == 120.0 and calls["n"] == 1 and waits == []
    fn, _ = failing(1, Flaky(delay=60.0))  # under max_wait: slept, above max_delay or not
    policy.retrying(Flaky, sleep=waits.append, hint=lambda e: e.delay)(fn)
    assert waits == [60.0]


def test_no_hint_means_backoff():
    waits: list[float] = []
    fn, _ = failing(1, Flaky(delay=None))
    RetryPolicy(base_delay=1.0).retrying(Flaky, sleep=waits.append,
                                         hint=lambda e: e.delay)(fn)
    assert 0.5 <= waits[0] <= 1.0


def test_before_sleep_sees_the_failure_and_the_wait():
    seen: list[tuple[str, float]] = []
    fn, _ = failing(1, Flaky(delay=2.0))
    RetryPolicy().retrying(
        Flaky, sleep=lambda _s: None, hint=lambda e: e.delay,
        before_sleep=lambda s: seen.append((str(s.outcome.exception()), s.next_action.sleep)),
    )(fn)
    assert seen == [("flaky", 2.0)]


def test_the_injected_rng_decides_the_jitter():
    def waits(seed: int) -> list[float]:
        out: list[float] = []
        fn, _ = failing(3, Flaky())
        RetryPolicy().retrying(Flaky, sleep=out.append, rng=random.Random(seed))(fn)
        return out

    assert waits(5) == waits(5)
    assert waits(5) != waits(6)


def test_backoff_between_polls_grows_to_the_cap():
    backoff = Backoff(random.Random(7))
    assert backoff.next_delay(0) == 0.0
    for n in range(1, 14):
        ceiling = min(300.0, 2.0 ** (n - 1))
        assert ceiling / 2 <= backoff.next_delay(n) <= ceiling
    assert backoff.next_delay(10_000) <= 300.0


def test_retry_after_reads_seconds_and_http_dates():
    assert retry_after("7", 0.0) == 7.0
    assert retry_after("-3", 0.0) == 0.0
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT", 1445412470.0) == pytest.approx(10.0)
    assert retry_after("soon", 0.0) is None
    # "-0000" is UTC with no zone: the same instant on a machine in any time zone
    assert retry_after("Wed, 21 Oct 2015 07:28:00 -0000", 1445412470.0) == pytest.approx(10.0)
