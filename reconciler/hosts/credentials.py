"""How nodus-gitops authenticates to a Git host: `Credentials` (a token, a password or an
SSH key, from the environment or a file) and `split_userinfo`, which takes the secrets
out of a URL. Kept apart from `source` (pygit2): the config reads them at start-up."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

from nodus_gitops.floor.errors import ConfigError


@dataclass(frozen=True, repr=False)
class Credentials:
    """How to authenticate to a remote: a user name and token/password, or an SSH key.

    `hint` names the settings a user should change when authentication fails; it is not
    a secret. The repr shows which fields are set, never their values (key paths aside).
    """

    username: str | None = None
    password: str | None = None  # a password or an access token
    ssh_key: str | None = None  # path of the private key
    ssh_pubkey: str | None = None  # path of the public key; libssh2 derives it when unset
    ssh_passphrase: str | None = None
    hint: str = field(default="", compare=False)

    @classmethod
    def from_env(cls, prefix: str, environ: Mapping[str, str] | None = None) -> Credentials:
        """Read `{prefix}_USERNAME`, `{prefix}_PASSWORD` (or `{prefix}_TOKEN`),
        `{prefix}_SSH_KEY`, `{prefix}_SSH_PUBKEY` and `{prefix}_SSH_PASSPHRASE`."""
        env = os.environ if environ is None else environ

        def get(name: str) -> str | None:
            return env.get(f"{prefix}_{name}") or None

        return cls(
            username=get("USERNAME"),
            password=get("PASSWORD") or get("TOKEN"),
            ssh_key=get("SSH_KEY"),
            ssh_pubkey=get("SSH_PUBKEY"),
            ssh_passphrase=get("SSH_PASSPHRASE"),
            hint=f"set {prefix}_TOKEN (and {prefix}_USERNAME) or {prefix}_SSH_KEY",
        )

    @classmethod
    def from_file(cls, path: str | Path) -> Credentials:
        """Read a `key=value` file: one pair a line, blank lines and `#` comments ignored.

        Keys: username, password (or token), ssh_key, ssh_pubkey, ssh_passphrase. Values
        are taken verbatim after the first `=`, surrounding spaces stripped, no quoting.
        """
        keys = {"username", "password", "token", "ssh_key", "ssh_pubkey", "ssh_passphrase"}
        try:
            lines = Path(path).read_text().splitlines()
        except OSError as exc:
            raise ConfigError(f"credentials file {path}: cannot read it: {exc.strerror}") from None
        values: dict[str, str] = {}
        for number, line in enumerate(lines, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, sep, value = line.partition("=")
            key = key.strip().lower()
            if not sep or key not in keys:
                raise ConfigError(
                    f"{path}:{number}: expected key=value with a key among {sorted(keys)}"
                )
            values["password" if key == "token" else key] = value.strip()
        return cls(**{k: v or None for k, v in values.items()},
                   hint=f"check the credentials file {path}")

    def secret(self, fresh: bool = False) -> str | None:
        """The password or token to send now; `fresh` when the remote refused the last
        one (credentials whose tokens expire fetch a new one)."""
        return self.password

    def redacted(self) -> tuple[str, ...]:
        """What messages must never show: the password and passphrase (credentials that
        mint their tokens: the last tokens minted)."""
        return tuple(s for s in (self.password, self.ssh_passphrase) if s)

    def __repr__(self) -> str:
        shown = [f"{name}=<set>" for name in ("username", "password", "ssh_passphrase")
                 if getattr(self, name)]
        shown += [f"{name}={getattr(self, name)!r}" for name in ("ssh_key", "ssh_pubkey")
                  if getattr(self, name)]
        return f"Credentials({', '.join(shown)})"


def split_userinfo(url: str) -> tuple[str, str | None, str | None]:
    """(`url` without its secrets, user, password), user and password percent-decoded.

    What is kept is the URL to store, show and annotate; the user-info goes to the
    credentials only. HTTP loses its whole user-info (the user belongs with the token); an
    ssh:// user name stays (it is part of the address). scp-like URLs and paths as is.
    """
    if "://" not in url:
        return url, None, None
    parts = urlsplit(url)
    user = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password else None
    host = parts.netloc.rpartition("@")[2]
    if parts.scheme == "ssh" and parts.username:
        host = f"{parts.username}@{host}"
    return urlunsplit(parts._replace(netloc=host)), user, password
