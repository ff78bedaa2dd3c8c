"""Gitea and Forgejo commit statuses (`POST /api/v1/repos/{owner}/{repo}/statuses/{sha}`).

Both hosts take our four states as they are (they also have `warning`, unused here), a
`context`, a `description` and a `target_url`, with the token in `Authorization: token`.
"""

from __future__ import annotations

from nodus_gitops.checks.github import GitHubStatusWriter


def gitea_auth(token: str) -> dict[str, str]:
    return {"Authorization": f"token {token}"}


def default_api_url(web_base: str) -> str:
    return f"{web_base}/api/v1"


class GiteaStatusWriter(GitHubStatusWriter):
    """Gitea's commit status API has GitHub's request shape (path, states, fields); only
    the host, the API prefix and the token scheme differ, and those live in the client."""

    name = "gitea"
    needs = "a token with write:repository"
