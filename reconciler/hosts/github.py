"""What every request to GitHub's REST API carries (github.com and Enterprise Server)."""

from __future__ import annotations

API_VERSION = "2022-11-28"
ACCEPT = "application/vnd.github+json"


def github_headers() -> dict[str, str]:
    return {"Accept": ACCEPT, "X-GitHub-Api-Version": API_VERSION}


def github_auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
