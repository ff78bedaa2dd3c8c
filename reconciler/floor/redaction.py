"""Keeping credentials out of what is shown: URLs in messages, pages and logs, and the
secrets a component holds in the errors it raises."""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urlsplit, urlunsplit

# A secret shorter than this is not masked: replacing every "ab" in a message would hide
# the message, not the secret.
_SHORTEST_SECRET = 4
_URL_PASSWORD = re.compile(r"(://[^:/@\s]*):[^@/\s]*@")


def url_without_userinfo(url: str) -> str:
    """`url` without its user:password part, for messages; scp-like URLs and paths as is."""
    if "://" not in url:
        return url
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def mask_url_passwords(text: str) -> str:
    """`text` with the password of every `scheme://user:password@` in it replaced by ***."""
    return _URL_PASSWORD.sub(r"\1:***@", text)


def scrub(text: str, secrets: Iterable[str], mask: str = "***") -> str:
    """`text` with every secret held in `secrets` replaced by `mask`."""
    for secret in secrets:
        if secret and len(secret) >= _SHORTEST_SECRET:
            text = text.replace(secret, mask)
    return text
