"""Gitea and Forgejo commit statuses (`POST /api/v1/repos/{owner}/{repo}/statuses/{sha}`).

Both hosts take our four states as they are (they also have `warning`, unused here), a
`context`, a `description` and a `target_url`, with the token in `Authorization: token`.
"""

from __future__ import annotations

from reconciler.checks.base import ApiClient, describe
from reconciler.checks.model import CheckRun

MAX_DESCRIPTION = 140  # GitHub's documented limit, kept everywhere so hosts read the same


def gitea_auth(token: str) -> dict[str, str]:
    return {"Authorization": f"token {token}"}


def default_api_url(web_base: str) -> str:
    return f"{web_base}/api/v1"


class GiteaStatusWriter:
    name = "gitea"

    def __init__(self, api: ApiClient, repository: str) -> None:
        self._api = api
        self._repo = repository  # owner/name

    def post(self, run: CheckRun) -> None:
        body = {"state": run.state.value, "context": run.context,
                "description": describe(run, MAX_DESCRIPTION)}
        if run.details_url:
            body["target_url"] = run.details_url
        self._api.request("POST", f"/repos/{self._repo}/statuses/{run.commit}", json=body)
