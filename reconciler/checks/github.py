"""GitHub commit checks: check runs (a GitHub App installation token) or commit statuses
(any token with `repo:status`), on github.com or GitHub Enterprise Server.

Check runs: a run is created per (commit, context) and PATCHed while it is in progress;
once completed it is final, and a later post for that pair creates a new run (GitHub shows
the newest run of a name), because annotations PATCHed onto a run are appended, never
replaced. At most 50 annotations go in one request (the Checks API limit): the first 50
with the create or PATCH, the rest in further PATCHes, up to MAX_ANNOTATIONS_TOTAL: each
request is paced and counted by GitHub, and a pull request of 50,000 invalid files must
not hold its binding for a thousand of them (the summary counts every problem). A create
retried after a 5xx may leave a second run of the same name; GitHub shows the newest, so
that is harmless.
"""

from __future__ import annotations

from typing import Any

from nodus_gitops.checks.base import describe
from nodus_gitops.checks.model import Annotation, CheckRun, CheckState
from nodus_gitops.hosts.client import ApiClient, truncate

MAX_ANNOTATIONS = 50  # per request, documented for create and update
MAX_ANNOTATIONS_TOTAL = 1000  # per post: 20 requests
MAX_DESCRIPTION = 140  # commit status description
MAX_OUTPUT_TEXT = 65535  # output.summary
CHECKS_WRITE = "checks: write"  # what a 403 names when GitHub's answer does not

# error -> failure: `error` means the reconciler could not judge the commit (remote or
# provider down). `neutral` and `skipped` would satisfy a required check and let an
# unverified change merge; `action_required` asks for details at details_url and a user
# action the reconciler cannot offer. `failure` keeps the merge blocked; the title and
# summary say it was an error.
_CONCLUSION = {CheckState.SUCCESS: "success", CheckState.FAILURE: "failure",
               CheckState.ERROR: "failure"}


def default_api_url(web_base: str) -> str:
    """api.github.com for github.com; `<web base>/api/v3` for Enterprise Server."""
    return "https://api.github.com" if web_base == "https://github.com" else f"{web_base}/api/v3"


class GitHubChecksWriter:
    """Check runs through the Checks API (GitHub Apps only can write them)."""

    name = "github"

    def __init__(self, api: ApiClient, repository: str) -> None:
        self._api = api
        self._repo = repository  # owner/name
        self._runs: dict[tuple[str, str], tuple[int, bool]] = {}  # -> (id, completed)

    def post(self, run: CheckRun) -> None:
        key = (run.commit, run.context)
        known = self._runs.get(key) or self._lookup(run)
        annotations = [_annotation(a) for a in run.annotations[:MAX_ANNOTATIONS_TOTAL]]
        first, rest = annotations[:MAX_ANNOTATIONS], annotations[MAX_ANNOTATIONS:]
        body = {**_status_fields(run), "output": _output(run, first)}
        if run.details_url:
            body["details_url"] = run.details_url
        if known is None or known[1]:
            created = self._api.request("POST", f"/repos/{self._repo}/check-runs",
                                        json={"name": run.context, "head_sha": run.commit,
                                              **body}, needs=CHECKS_WRITE)
            run_id = int(created["id"])
        else:
            run_id = known[0]
            self._api.request("PATCH", f"/repos/{self._repo}/check-runs/{run_id}", json=body,
                              needs=CHECKS_WRITE)
        self._runs[key] = (run_id, run.state is not CheckState.PENDING)
        for start in range(0, len(rest), MAX_ANNOTATIONS):
            chunk = rest[start:start + MAX_ANNOTATIONS]
            self._api.request("PATCH", f"/repos/{self._repo}/check-runs/{run_id}",
                              json={"output": _output(run, chunk)}, needs=CHECKS_WRITE)

    def _lookup(self, run: CheckRun) -> tuple[int, bool] | None:
        """The newest run of this name on the commit (after a restart emptied the map)."""
        found = self._api.request(
            "GET", f"/repos/{self._repo}/commits/{run.commit}/check-runs",
            params={"check_name": run.context, "filter": "latest"}, needs="checks: read")
        runs = (found or {}).get("check_runs") or []
        if not runs:
            return None
        return int(runs[0]["id"]), runs[0].get("status") == "completed"


class GitHubStatusWriter:
    """Commit statuses: the same four states as ours, one line of description."""

    name = "github"
    needs = "commit statuses: write"

    def __init__(self, api: ApiClient, repository: str) -> None:
        self._api = api
        self._repo = repository

    def post(self, run: CheckRun) -> None:
        body = {"state": run.state.value, "context": run.context,
                "description": describe(run, MAX_DESCRIPTION)}
        if run.details_url:
            body["target_url"] = run.details_url
        self._api.request("POST", f"/repos/{self._repo}/statuses/{run.commit}", json=body,
                          needs=self.needs)


def _status_fields(run: CheckRun) -> dict[str, str]:
    # pending is posted when a sync or plan starts, so the run is in progress, not queued.
    if run.state is CheckState.PENDING:
        return {"status": "in_progress"}
    return {"status": "completed", "conclusion": _CONCLUSION[run.state]}


def _output(run: CheckRun, annotations: list[dict[str, Any]]) -> dict[str, Any]:
    output: dict[str, Any] = {"title": run.title,
                              "summary": truncate(run.summary or run.title, MAX_OUTPUT_TEXT)}
    if annotations:
        output["annotations"] = annotations
    return output


def _annotation(a: Annotation) -> dict[str, Any]:
    return {"path": a.path, "start_line": a.line, "end_line": a.line,
            "annotation_level": a.level.value, "message": a.message}
