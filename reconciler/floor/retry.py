"""Retrying a call, on tenacity: one policy for every retry inside a call (a provider call,
a check writer's HTTP request), and the equal-jitter backoff they share with the delay
between a binding's failed polls.

A `RetryPolicy` says how many attempts, the exponential backoff (`base_delay`, doubling,
capped at `max_delay`, each delay drawn from [d/2, d] so that callers sharing a server do
not retry in step) and what to do with a server's own wait (Retry-After): honoured, and
capped at `max_delay`, or, with `max_wait` set, honoured up to `max_wait` and past it the
retries stop so the caller can hand the wait back instead of stalling. `retrying` turns it
into a `tenacity.Retrying` for given exceptions, with the sleep and the random source
injected so that tests neither wait nor draw by chance.
"""

from __future__ import annotations

import datetime
import email.utils
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import tenacity
from tenacity.wait import wait_base

Hint = Callable[[BaseException], "float | None"]  # the wait a failure itself asks for


@dataclass(frozen=True)
class Backoff(wait_base):
    """Delay after `failures` consecutive failures: `base`, 2×, 4× ... up to `cap`, each
    drawn from [d/2, d] ("equal jitter"); `rng` is injected so tests are deterministic.

    Also a tenacity wait strategy: after attempt n failed it waits `next_delay(n)`.
    """

    rng: random.Random = field(default_factory=random.Random)
    base: float = 1.0
    cap: float = 300.0

    def next_delay(self, failures: int) -> float:
        if failures <= 0:
            return 0.0
        ceiling = min(self.cap, self.base * 2.0 ** min(failures - 1, 32))
        return ceiling / 2 + self.rng.random() * ceiling / 2

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        return self.next_delay(retry_state.attempt_number)


@dataclass(frozen=True)
class RetryPolicy:
    """How a call is retried: `attempts` in all (1: never retried), backoff from
    `base_delay` doubling up to `max_delay`; a server's wait is capped at `max_delay`,
    or, when `max_wait` is set, a longer one than `max_wait` stops the retries."""

    attempts: int = 4
    base_delay: float = 1.0
    max_delay: float = 30.0
    max_wait: float | None = None

    def backoff(self, rng: random.Random) -> Backoff:
        return Backoff(rng, self.base_delay, self.max_delay)

    def server_wait(self, hint: float | None) -> float | None:
        """The wait honoured for a server's hint (None: none given)."""
        if hint is None or self.max_wait is not None:
            return hint
        return min(hint, self.max_delay)

    def retrying(self, retry_on: type[BaseException] | tuple[type[BaseException], ...], *,
                 sleep: Callable[[float], None] = time.sleep,
                 rng: random.Random | None = None, hint: Hint | None = None,
                 before_sleep: Callable[[tenacity.RetryCallState], Any] | None = None,
                 ) -> tenacity.Retrying:
        """A `tenacity.Retrying` that retries `retry_on` exceptions (anything else goes
        through at once) and re-raises the last one when it gives up. `hint(exc)` is the
        wait a failure asks for (a Retry-After), or None to back off."""
        backoff = self.backoff(rng or random.Random())

        def wait(state: tenacity.RetryCallState) -> float:
            asked = self.server_wait(_hint_of(state, hint))
            return backoff(state) if asked is None else max(0.0, asked)

        def too_long(state: tenacity.RetryCallState) -> bool:
            asked = _hint_of(state, hint)
            return self.max_wait is not None and asked is not None and asked > self.max_wait

        return tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(retry_on),
            stop=tenacity.stop_after_attempt(max(1, self.attempts)) | too_long,
            wait=wait, sleep=sleep, before_sleep=before_sleep, reraise=True)


def _hint_of(state: tenacity.RetryCallState, hint: Hint | None) -> float | None:
    if hint is None or state.outcome is None or not state.outcome.failed:
        return None
    exc = state.outcome.exception()
    return None if exc is None else hint(exc)


def retry_after(value: str | None, now: float) -> float | None:
    """Seconds a Retry-After header asks to wait: delta-seconds or an HTTP date (RFC 9110)
    against `now` (epoch seconds); None when it is absent or neither."""
    if not value or not value.strip():
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # "-0000": UTC with no zone said, never this machine's time
        when = when.replace(tzinfo=datetime.UTC)
    return max(0.0, when.timestamp() - now)
