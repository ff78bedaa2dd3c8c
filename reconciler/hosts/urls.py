"""Where a repository lives on its Git host, from the URL a binding clones."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from nodus_gitops.floor.redaction import url_without_userinfo

_SCP_LIKE = re.compile(r"^(?:[^@/]+@)?([^:/]+):(.+)$")  # git@host:owner/repo.git


def split_repo_url(url: str) -> tuple[str, str]:
    """(web base `scheme://host[:port]`, repository path without .git) of an https, ssh or
    scp-like Git URL; the base is https unless the URL itself is plain http."""
    if "://" in url:
        parts = urlsplit(url)
        scheme = "http" if parts.scheme == "http" else "https"
        host = parts.netloc.rpartition("@")[2]
        if parts.scheme not in ("http", "https"):
            host = parts.hostname or ""  # an ssh port is not the web port
        path = parts.path
    else:
        match = _SCP_LIKE.match(url)
        scheme, (host, path) = "https", (match.groups() if match else ("", url))
    path = path.strip("/").removesuffix(".git")
    if not host or path.count("/") < 1:
        raise ValueError(f"cannot tell the host and repository from {url_without_userinfo(url)!r}")
    return f"{scheme}://{host}", path

