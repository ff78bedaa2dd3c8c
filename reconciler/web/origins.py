"""Which requests a browser may have been tricked into sending, refused before anything is
read or triggered.

- DNS rebinding: an attacker's page at `evil.example` points that name at 127.0.0.1 and
  reads the API as its own origin. Its requests carry `Host: evil.example`, so only the
  names the server is known by are answered: `localhost`, the names in the config's
  `dashboard.hosts` and any IP address (reaching the server by address involves no name
  to rebind; the bound address and a Kubernetes probe's pod IP are among them).
- Cross-site requests: a page on another site can POST a form or a `text/plain` fetch to
  the refresh endpoint without a CORS preflight. A browser says where such a request came
  from (`Origin`, `Sec-Fetch-Site`); one from anywhere but the server's own origin is
  refused. A request that names no origin (curl, the CLI) is not a browser's and passes.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

LOCAL_NAMES = ("localhost",)
_PORT = re.compile(r":\d*$")


def host_name(host_header: str) -> str:
    """`Host`'s name without its port or IPv6 brackets, lower case."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return _PORT.sub("", host)


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class TrustedHosts:
    """The names this server answers to: `localhost` and `names` (from `dashboard.hosts`),
    besides any IP address."""

    def __init__(self, names: Iterable[str] = ()) -> None:
        self.names = frozenset(n.lower().rstrip(".") for n in (*LOCAL_NAMES, *names))

    def allow(self, host_header: str | None) -> bool:
        name = host_name(host_header or "").rstrip(".")
        return bool(name) and (name in self.names or _is_address(name))


def cross_site(headers: Mapping[str, str]) -> str | None:
    """Why a browser says this request comes from another origin than the server's own
    (the one in its `Host` header), or None when it does not."""
    site = headers.get("sec-fetch-site")
    if site is not None and site.lower() not in ("same-origin", "none"):
        return f"the browser sent it from another site (Sec-Fetch-Site: {site})"
    origin = headers.get("origin")
    if origin is None:
        return None
    host = headers.get("host", "").strip().lower()
    if urlsplit(origin.strip().lower()).netloc != host:
        return f"its Origin {origin!r} is not this server's ({host})"
    return None
