"""GitLab commit statuses (`POST /projects/:id/statuses/:sha`), gitlab.com or self-managed.

GitLab runs each (sha, name) status through a state machine and answers 400 "Cannot
transition status via :run from :running" to a repeated state, and moves a finished status
back to pending or running only by starting another. So this writer remembers the last
state it sent per (sha, name) and skips, without an error, a repeat or a step back; a 400
of that kind (the memory was lost in a restart) counts as already shown.
"""

from __future__ import annotations

import logging
import threading
from urllib.parse import quote

from nodus_gitops.checks.base import describe
from nodus_gitops.checks.model import CheckRun, CheckState
from nodus_gitops.floor.errors import PermanentError
from nodus_gitops.hosts.client import ApiClient

log = logging.getLogger("nodus_gitops.checks")

MAX_DESCRIPTION = 140  # GitHub's documented limit, kept everywhere so hosts read the same

# pending -> running: our pending is posted when a sync or plan starts, so the work is
# under way, which is GitLab's `running`; `pending` there means "waiting for a runner".
_STATE = {CheckState.PENDING: "running", CheckState.SUCCESS: "success",
          CheckState.FAILURE: "failed", CheckState.ERROR: "failed"}
_FINISHED = frozenset({"success", "failed", "canceled"})


def gitlab_auth(token: str) -> dict[str, str]:
    return {"PRIVATE-TOKEN": token}  # personal, project and group access tokens alike


def default_api_url(web_base: str) -> str:
    return f"{web_base}/api/v4"


def may_send(last: str | None, new: str) -> bool:
    """False for a repeat, or for pending/running after a finished state."""
    if last is None:
        return True
    if new == last:
        return False
    return not (last in _FINISHED and new not in _FINISHED)


class GitLabStatusWriter:
    name = "gitlab"

    def __init__(self, api: ApiClient, project: str) -> None:
        self._api = api
        self._project = quote(project, safe="")  # a numeric id, or the URL-encoded path
        self._last: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()

    def post(self, run: CheckRun) -> None:
        key, state = (run.commit, run.context), _STATE[run.state]
        with self._lock:
            last = self._last.get(key)
        if not may_send(last, state):
            log.info("gitlab status skipped: the transition is not allowed",
                     extra={"context": run.context, "commit": run.commit, "from": last,
                            "to": state})
            return
        body = {"state": state, "name": run.context,
                "description": describe(run, MAX_DESCRIPTION)}
        if run.details_url:
            body["target_url"] = run.details_url
        try:
            self._api.request("POST", f"/projects/{self._project}/statuses/{run.commit}",
                              json=body, needs="a token with the api scope, Developer role")
        except PermanentError as exc:
            if "cannot transition status" not in str(exc).lower():
                raise
            log.info("gitlab already has this status", extra={"context": run.context,
                                                             "commit": run.commit})
        with self._lock:
            self._last[key] = state
