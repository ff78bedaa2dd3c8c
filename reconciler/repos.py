"""Which bindings follow a repository a webhook names: repositories compared by their
`owner/repo` path, whatever host, scheme or user info their URL carries."""

from __future__ import annotations

from collections.abc import Iterable
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
    """Ids of the `(id, url)` bindings whose repository is one of `names`. Compared by path
    only: a webhook triggers a fetch from the binding's own URL, so a match is a hint."""
    wanted = {repo_key(n) for n in names if n}
    return [binding_id for binding_id, url in bindings if repo_key(url) in wanted]
