"""The one HTTP client every Git host's API is reached through (GitHub, GitLab, Gitea):
by the check writers, the pull-request comments and the GitHub App's token mints.

`ApiClient` is where every host's HTTP behaviour lives: a minimum interval between writes
per host, retries (floor.retry's policy, on tenacity) with equal-jitter backoff on 429 and
5xx, GitHub's rate-limit headers honoured, and waits too long to sleep through turned into
a `TransientError` so a reconcile never stalls on a check.
A 401 is tried once more when the token source has a fresher token (a GitHub App
installation token that expired between two requests). Paginated lists follow the
`Link: rel="next"` header, on the same API only. Tokens reach only the Authorization
header: never a log line, a repr or an exception.
"""

from __future__ import annotations

import logging
import random
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from json import dumps as json_dumps
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpx
import tenacity
from nodus_gitops.floor.errors import NotFoundError, PermanentError, TransientError
from nodus_gitops.floor.redaction import scrub, url_without_userinfo
from nodus_gitops.floor.retry import RetryPolicy as _Policy
from nodus_gitops.floor.retry import retry_after

log = logging.getLogger("nodus_gitops.hosts")
_WRITES = frozenset({"POST", "PATCH", "PUT", "DELETE"})
MAX_PAGES = 100  # of one list (100 items a page): a pull request's comments, open PRs
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class ValidationFailed(PermanentError):
    """A 422: the host understood the request and refused what it asks."""


class TokenSource(Protocol):
    """Where a client takes the token of each request. `setting` names what a user changes
    when the token is refused; `renew(rejected)` is asked after a 401 and says whether a
    different token can now be had (then the request is sent once more)."""

    @property
    def setting(self) -> str: ...

    def get(self) -> str: ...

    def renew(self, rejected: str) -> bool: ...


@dataclass(frozen=True, repr=False)
class Token:
    """An API token from the environment or a file; the file is re-read on every use so a
    token rotated by something outside is picked up."""

    setting: str  # the setting a user changes when the token is rejected
    value: str | None = None
    file: Path | None = None

    def get(self) -> str:
        if self.file is None:
            return self.value or ""
        try:
            return self.file.read_text().strip()
        except OSError as exc:
            raise PermanentError(f"{self.setting}: cannot read {self.file}: "
                                 f"{exc.strerror}") from None

    def renew(self, rejected: str) -> bool:
        """A file rewritten since the refused token was read holds another one."""
        return self.file is not None and self.get() != rejected

    def __repr__(self) -> str:
        return f"Token({self.setting})"


def without_lone_surrogates(text: str) -> str:
    """`text` with U+FFFD for each lone surrogate: how a file name that is not UTF-8 comes
    from Git (its bytes, escaped), which UTF-8, and so no host, can carry."""
    return _LONE_SURROGATE.sub("\ufffd", text)


def truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class HostLimiter:
    """Spaces writes to one host at least `interval` seconds apart, across all clients that
    share it, and holds a host back until a reported rate-limit reset. Thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._next: dict[str, float] = {}
        self._lock = threading.Lock()

    def reserve(self, host: str, interval: float) -> float:
        """Book the next write slot for `host`; returns how long to wait before using it."""
        with self._lock:
            now = self._clock()
            slot = max(now, self._next.get(host, now))
            self._next[host] = slot + interval
            return slot - now

    def blocked_for(self, host: str) -> float:
        with self._lock:
            return max(0.0, self._next.get(host, 0.0) - self._clock())

    def block_for(self, host: str, seconds: float) -> None:
        with self._lock:
            until = self._clock() + seconds
            self._next[host] = max(self._next.get(host, until), until)


@dataclass(frozen=True)
class RetryPolicy(_Policy):
    """429s, 5xx and broken connections: 4 attempts, equal-jitter backoff from 1 s doubling
    up to 30 s; a host's Retry-After or rate-limit reset is honoured up to `max_wait`."""

    attempts: int = 4
    base_delay: float = 1.0
    max_delay: float = 30.0
    max_wait: float = 90.0  # longest wait slept inline; longer ones go back to the caller
    secondary_wait: float = 60.0  # GitHub: a secondary limit without headers: wait >= 1 min


class _Again(Exception):
    """One failed exchange worth trying again after `delay` seconds (internal)."""

    def __init__(self, message: str, delay: float) -> None:
        super().__init__(message)
        self.message = message
        self.delay = delay


@dataclass
class ApiClient:
    """JSON over HTTP to one API base URL with a token. `request` returns the decoded body
    (None when empty) or raises TransientError/PermanentError with a token-free message."""

    base_url: str
    token: TokenSource
    auth: Callable[[str], Mapping[str, str]]  # token -> the auth header(s) of this host
    headers: Mapping[str, str] = field(default_factory=dict)
    min_interval: float = 1.0
    limiter: HostLimiter = field(default_factory=HostLimiter)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    sleep: Callable[[float], None] = time.sleep
    wall: Callable[[], float] = time.time  # for x-ratelimit-reset, an epoch time
    rng: random.Random = field(default_factory=random.Random)
    transport: httpx.BaseTransport | None = None
    timeout: float = 10.0

    def __post_init__(self) -> None:
        self.base_url = self.base_url.rstrip("/")
        self.host = urlsplit(self.base_url).netloc
        self._backoff = self.retry.backoff(self.rng)
        self._client = httpx.Client(
            headers={"User-Agent": "nodus-gitops", **self.headers},
            timeout=self.timeout, transport=self.transport, follow_redirects=False)

    def close(self) -> None:
        self._client.close()

    def request(self, method: str, path: str, *, json: Any = None,
                params: Mapping[str, str] | None = None, needs: str = "",
                written: Callable[[], Any] | None = None) -> Any:
        """`needs` names the permission the request takes (`checks: write`), for the
        message of a 403 whose response does not say it. `written`, for a write that must
        not happen twice (a new comment): after an answer that leaves unsure whether the
        host did it (a 5xx, a broken connection), it is asked before the request is sent
        again, and what it finds (not None) is the answer."""
        answer = self._exchange(method.upper(), path, self.base_url + path, json, params,
                                needs, written)
        return answer.found if isinstance(answer, _Written) else _decode(answer)

    def pages(self, path: str, *, params: Mapping[str, str] | None = None,
              needs: str = "") -> Iterator[Any]:
        """The decoded body of each page of a list, following `Link: rel="next"`. A next
        page on another address is refused: the token goes to this API only."""
        url, query = self.base_url + path, params
        for _ in range(MAX_PAGES):
            response = self._exchange("GET", path, url, None, query, needs, None)
            assert isinstance(response, httpx.Response)  # nothing to find without `written`
            yield _decode(response)
            following = response.links.get("next", {}).get("url")
            if not following:
                return
            if not following.startswith(self.base_url + "/"):
                raise PermanentError(f"GET {self.host}{path}: the next page is on another "
                                     f"address ({url_without_userinfo(following)}); not followed")
            url, query = following, None
        raise PermanentError(f"GET {self.host}{path}: more than {MAX_PAGES} pages")

    def _exchange(self, method: str, path: str, url: str, json: Any,
                  params: Mapping[str, str] | None, needs: str,
                  written: Callable[[], Any] | None) -> httpx.Response | _Written:
        where = f"{method} {self.host}{path}"
        renewed = False  # a 401 is tried once more with a fresh token, at once
        unsure = False  # the last failure may have left the write done
        retrying = self.retry.retrying(_Again, sleep=self.sleep, rng=self.rng,
                                       hint=lambda e: getattr(e, "delay", None),
                                       before_sleep=self._log_retry)
        try:
            for attempt in retrying:
                with attempt:
                    if unsure and written is not None and (found := written()) is not None:
                        return _Written(found)
                    number = attempt.retry_state.attempt_number
                    while True:
                        self._wait_turn(method, where)
                        token = self.token.get()
                        try:
                            response = self._client.request(
                                method, url,
                                content=None if json is None else _json_body(json),
                                params=params, headers={**self.auth(token), **(
                                    {"Content-Type": "application/json"}
                                    if json is not None else {})})
                        except httpx.TransportError as exc:
                            unsure = True
                            raise _Again(f"{where}: {type(exc).__name__}",
                                         self._backoff.next_delay(number)) from None
                        self._note_exhaustion(response)
                        if response.is_success:
                            return response
                        if response.status_code == 401 and not renewed and self.token.renew(
                                token):
                            renewed = True
                            log.info("token refused, retrying with a fresh one",
                                     extra={"host": self.host, "request": where})
                            continue
                        break
                    delay = self._retry_delay(response, number)
                    if delay is None:
                        raise self._permanent(response, where, token, needs)
                    unsure = response.status_code >= 500
                    raise _Again(scrub(f"{where} answered {response.status_code}: "
                                        f"{_api_message(response)}", (token,), "<token>"), delay)
        except _Again as failed:  # out of attempts, or a wait too long to sleep through
            raise TransientError(failed.message, delay=failed.delay) from None
        raise AssertionError("unreachable")  # tenacity re-raises the last failure

    # -- pacing -------------------------------------------------------------------------

    def _wait_turn(self, method: str, where: str) -> None:
        wait = self.limiter.blocked_for(self.host)
        if wait > self.retry.max_wait:  # checked before booking, so a refusal books nothing
            raise TransientError(f"{where}: held back {wait:.0f}s more by the host's rate "
                                 "limit", delay=wait)
        if method in _WRITES:
            wait = self.limiter.reserve(self.host, self.min_interval)
        if wait > 0:
            self.sleep(wait)

    def _note_exhaustion(self, response: httpx.Response) -> None:
        # GitHub: remaining 0 means every request fails until reset (epoch seconds), even
        # when this one succeeded, so stop sending to this host until then.
        headers = response.headers
        if headers.get("x-ratelimit-remaining") == "0" and "x-ratelimit-reset" in headers:
            seconds = _number(headers["x-ratelimit-reset"])
            if seconds is not None:
                self.limiter.block_for(self.host, max(0.0, seconds - self.wall()) + 1)

    def _log_retry(self, state: tenacity.RetryCallState) -> None:
        failed = state.outcome.exception() if state.outcome is not None else None
        delay = state.next_action.sleep if state.next_action is not None else 0.0
        log.warning("check write failed, retrying",
                    extra={"host": self.host, "error": getattr(failed, "message", str(failed)),
                           "delay": round(delay, 2)})

    def _retry_delay(self, response: httpx.Response, attempt: int) -> float | None:
        """Seconds to wait before trying again, or None when retrying cannot help."""
        status, headers = response.status_code, response.headers
        limited = (status == 429 or "retry-after" in headers
                   or headers.get("x-ratelimit-remaining") == "0"
                   or "rate limit" in _api_message(response).lower())
        if not (status >= 500 or (status in (403, 429) and limited)):
            return None
        if "retry-after" in headers:
            asked = retry_after(headers["retry-after"], self.wall())
            if asked is not None:
                return asked
        if headers.get("x-ratelimit-remaining") == "0" and "x-ratelimit-reset" in headers:
            return self.limiter.blocked_for(self.host)  # set by _note_exhaustion
        backoff = self._backoff.next_delay(attempt)
        return max(backoff, self.retry.secondary_wait) if status in (403, 429) else backoff

    def _permanent(self, response: httpx.Response, where: str, token: str,
                   needs: str) -> PermanentError:
        status = response.status_code
        message = f"{where} answered {status}: {_api_message(response)}"
        if status == 401:
            message += f"; the token was rejected: check {self.token.setting}"
        elif status == 403:
            # GitHub names what an App or fine-grained token lacks in this header.
            wanted = response.headers.get("x-accepted-github-permissions") or needs
            wanted = f" ({wanted})" if wanted else ""
            message += f"; the token may lack permission{wanted}: check {self.token.setting}"
        kind = {404: NotFoundError, 422: ValidationFailed}.get(status, PermanentError)
        return kind(scrub(message, (token,), "<token>"))


@dataclass(frozen=True)
class _Written:
    """What `written` found after an answer that left unsure whether a write was done."""

    found: Any


def _json_body(value: Any) -> bytes:
    """The JSON httpx would send, with a lone surrogate as U+FFFD instead of an error."""
    text = json_dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return without_lone_surrogates(text).encode()


def _decode(response: httpx.Response) -> Any:
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        return None


def _api_message(response: httpx.Response) -> str:
    """The host's own error text: `message` (GitHub, GitLab, Gitea) plus GitHub's `errors`."""
    body = _decode(response)
    if not isinstance(body, dict):
        return truncate(response.reason_phrase or "no message", 200)
    text = str(body.get("message") or body.get("error") or "no message")
    errors = body.get("errors")
    if isinstance(errors, list) and errors:
        details = [e.get("message") or f"{e.get('field')} {e.get('code')}" if isinstance(e, dict)
                   else str(e) for e in errors]
        text += f" ({'; '.join(map(str, details))})"
    return truncate(text, 300)


def _number(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None

