"""Which bindings follow a repository a webhook names: repositories compared by their
`owner/repo` path, whatever host, scheme or user info their URL carries. A binding is
the repository its URL names and, where the URL is a mirror, the one its commit checks
are posted to (`checks.github.repository`, `checks.gitea.repository`,
`checks.gitlab.project`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit


def repo_key(name: str) -> str:
    """How a repository is compared: `owner/repo` (a full name, or a URL's path), lower-case,
    without `.git`, user info, scheme or host."""
    if "://" in name:
        path = urlsplit(name).path
    elif ":" in name.split("/", 1)[0]:  # git@host:owner/repo.git
        path = name.split(":", 1)[1]
    else:
        path = name
    return path.strip("/").removesuffix(".git").lower()


def match_bindings(names: Iterable[str], bindings: Iterable[tuple[str, str]]) -> list[str]:
    """Ids of the `(id, url or repository)` bindings whose repository is one of `names`,
    each once, in order (a binding may come with several). Compared by path only: a
    webhook triggers a fetch from the binding's own URL, so a match is a hint."""
    wanted = {repo_key(n) for n in names if n}
    found = (binding_id for binding_id, repo in bindings if repo_key(repo) in wanted)
    return list(dict.fromkeys(found))


# The setting naming the repository each host's check writer posts to.
_CHECKS_REPOSITORY = {"github": "repository", "gitea": "repository", "gitlab": "project"}


def checks_repositories(checks: Mapping[str, Any], host: str) -> tuple[str, ...]:
    """The repositories the `checks` settings post to on `host` (a `generic` sender may
    name any host's), as set there; none where a writer takes it from the URL."""
    hosts = list(_CHECKS_REPOSITORY) if host == "generic" else [host]
    found = []
    for name in hosts:
        settings = checks.get(name)
        key = _CHECKS_REPOSITORY.get(name)
        if key and isinstance(settings, Mapping) and isinstance(settings.get(key), str):
            found.append(settings[key])
    return tuple(found)
