"""The slurmrestd client (openapi v0.0.36 to v0.0.38): submit, read, list and cancel
jobs, with every failure mapped to `TransientError` or `PermanentError` in one place.

slurmrestd answers 500 for almost everything, a rejected token included, so the body's
`errors` decide: a token slurmctld refuses comes back at once as error -1 ("Unspecified
error") or 5005 ("Zero Bytes were transmitted"), while an unreachable slurmctld takes
its connect retries (seconds) or says 1800. A refused token is a PermanentError that
says how to get a new one; the cluster being down or restarting is transient.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx
from nodus_gitops.floor.errors import ConfigError, PermanentError, TransientError
from nodus_gitops.providers.slurm.config import SlurmConfig, token_claims

INVALID_JOB_ID = 2017
AUTH_ERRORS = frozenset({-1, 5005})
CONTROLLER_DOWN = frozenset({1800, 1001, 1002, 1008})
_FAST_SECONDS = 4.0  # slurmctld down costs its connect retries (about 9 s); auth failures don't


class SlurmRequestError(PermanentError):
    """slurmctld refused a request; `codes` are its error numbers."""

    def __init__(self, message: str, codes: frozenset[int]) -> None:
        super().__init__(message)
        self.codes = codes


@dataclass(frozen=True)
class Task:
    """One job, or one task of a job array, as slurmctld reports it."""

    job_id: int
    array_job_id: int
    index: int | None  # the array task id; None for a plain job or an array's pending part
    pending_indexes: str  # an array's pending part, such as "2-3%2"
    state: str
    reason: str
    exit_code: int  # a raw wait status
    start: float
    end: float
    suspend_time: float
    pre_sus_time: float
    name: str
    comment: str

    @classmethod
    def from_json(cls, j: dict[str, Any]) -> Task:
        task_id = j.get("array_task_id")
        return cls(
            job_id=int(j.get("job_id") or 0),
            array_job_id=int(j.get("array_job_id") or 0),
            index=int(task_id) if isinstance(task_id, int) else None,
            pending_indexes=str(j.get("array_task_string") or ""),
            state=str(j.get("job_state") or "UNKNOWN"),
            reason=str(j.get("state_reason") or ""),
            exit_code=int(j.get("exit_code") or 0),
            start=float(j.get("start_time") or 0),
            end=float(j.get("end_time") or 0),
            suspend_time=float(j.get("suspend_time") or 0),
            pre_sus_time=float(j.get("pre_sus_time") or 0),
            name=str(j.get("name") or ""),
            comment=str(j.get("comment") or ""),
        )

    def run_seconds(self, now: float) -> float:
        """Seconds this task has run, time suspended left out (Slurm's own arithmetic)."""
        if self.start <= 0 or self.start > now:
            return 0.0
        if self.state == "SUSPENDED":
            return self.pre_sus_time
        end = self.end if self.end > 0 and self.state not in ("RUNNING", "CONFIGURING") else now
        if self.suspend_time > 0:
            return max(0.0, self.pre_sus_time + end - self.suspend_time)
        return max(0.0, end - self.start)


class SlurmClient:
    """slurmrestd over HTTP with the `X-SLURM-USER-NAME` / `X-SLURM-USER-TOKEN` headers."""

    def __init__(self, config: SlurmConfig, transport: httpx.BaseTransport | None = None):
        self.config = config
        self._http = httpx.Client(
            base_url=f"{config.url}/slurm/{config.api_version}",
            timeout=config.timeout_seconds, transport=transport,
            headers={"Content-Type": "application/json"})

    def close(self) -> None:
        self._http.close()

    # -- the one place errors are mapped ------------------------------------------------
    def _headers(self) -> dict[str, str]:
        token = self.config.token()
        user = self.config.job_user
        claims = token_claims(token)
        if claims is None:
            raise PermanentError(self._auth_message("the token is not a JWT"))
        exp = claims.get("exp")
        if isinstance(exp, int | float) and exp < time.time():
            raise PermanentError(self._auth_message("the token expired"))
        return {"X-SLURM-USER-NAME": user, "X-SLURM-USER-TOKEN": token}

    def _auth_message(self, why: str) -> str:
        user = self.config.job_user
        source = self.config.token_env + (
            f" or {self.config.token_file}" if self.config.token_file else "")
        return (f"slurm authentication failed for user {user!r} at {self.config.url}: {why}; "
                f"get a new token with `scontrol token username={user} lifespan=86400` and "
                f"put it in {source} (slurmrestd must run with SLURM_JWT=daemon)")

    def _request(self, method: str, path: str, body: dict | None = None) -> dict[str, Any]:
        headers = self._headers()
        started = time.monotonic()
        try:
            resp = self._http.request(method, path, json=body, headers=headers)
        except httpx.TimeoutException:
            raise TransientError(f"slurmrestd at {self.config.url} timed out "
                                 f"({method} {path})", delay=5) from None
        except httpx.TransportError as exc:
            raise TransientError(f"slurmrestd at {self.config.url} is unreachable: "
                                 f"{exc.__class__.__name__}", delay=5) from None
        elapsed = time.monotonic() - started
        try:
            doc = resp.json()
        except ValueError:
            doc = {}
        errors = [e for e in (doc.get("errors") or []) if isinstance(e, dict)]
        codes = frozenset(int(e.get("error_number", e.get("error_code", 0)) or 0)
                          for e in errors)
        text = "; ".join(str(e.get("description") or e.get("error") or e) for e in errors)
        if resp.status_code == 401:
            raise PermanentError(self._auth_message("slurmrestd asked for a token (HTTP 401)"))
        if resp.status_code == 403:
            raise PermanentError(self._auth_message("the token was refused (HTTP 403)"))
        if resp.status_code >= 500 and codes & CONTROLLER_DOWN:
            raise TransientError(f"slurmctld is unreachable behind {self.config.url}: {text}",
                                 delay=5)
        if resp.status_code >= 500 and codes and codes <= AUTH_ERRORS:
            if elapsed < _FAST_SECONDS:
                raise PermanentError(self._auth_message(f"slurmrestd refused it ({text})"))
            raise TransientError(f"slurmctld did not answer in time: {text}", delay=5)
        if errors and codes - {0}:
            raise SlurmRequestError(f"slurm refused {method} {path}: {text}", codes)
        if resp.status_code >= 500 or resp.status_code == 429:
            raise TransientError(f"slurmrestd answered HTTP {resp.status_code} "
                                 f"({method} {path}): {text or resp.text[:200]}", delay=5)
        if resp.status_code >= 400:
            raise PermanentError(f"slurmrestd refused {method} {path} (HTTP "
                                 f"{resp.status_code}): {text or resp.text[:200]}")
        return doc

    # -- operations ---------------------------------------------------------------------
    def ping(self) -> dict[str, Any]:
        return self._request("GET", "/ping")

    def submit(self, script: str, job: dict[str, Any]) -> int:
        """Submit a batch job (or array); returns its job id."""
        doc = self._request("POST", "/job/submit", {"script": script, "job": job})
        job_id = doc.get("job_id")
        if not isinstance(job_id, int):
            raise TransientError(f"slurmrestd accepted a job without an id: {doc}", delay=5)
        return job_id

    def job(self, job_id: int) -> list[Task] | None:
        """Every record of a job (an array: its tasks and its pending part); None when
        slurmctld no longer knows it (older than MinJobAge, or a cold restart)."""
        try:
            doc = self._request("GET", f"/job/{job_id}")
        except SlurmRequestError as exc:
            if INVALID_JOB_ID in exc.codes:
                return None
            raise
        return [Task.from_json(j) for j in doc.get("jobs") or []]

    def jobs(self) -> list[Task]:
        """Every job slurmctld knows (for finding a job by name after a crash)."""
        return [Task.from_json(j) for j in self._request("GET", "/jobs").get("jobs") or []]

    def partitions(self) -> list[dict[str, Any]]:
        """Every partition as slurmctld describes it (name, flags, node counts)."""
        return [p for p in self._request("GET", "/partitions").get("partitions") or []
                if isinstance(p, dict)]

    def cancel(self, job_id: int | str) -> None:
        """Cancel a job, an array (all its tasks) or one task; already gone is success."""
        try:
            self._request("DELETE", f"/job/{job_id}")
        except SlurmRequestError as exc:
            if INVALID_JOB_ID not in exc.codes and 2021 not in exc.codes:
                raise


__all__ = ["ConfigError", "SlurmClient", "SlurmRequestError", "Task"]
