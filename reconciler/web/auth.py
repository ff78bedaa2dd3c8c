"""Optional dashboard authentication, from the config's `dashboard` section:
`token` / `tokenEnv` (a bearer token; also accepted as the password of Basic auth) and
`basicAuth: {user, passwordEnv}`. No section: no authentication (the server binds to
127.0.0.1 by default). Probes and webhooks are not behind it: hooks carry signatures."""

from __future__ import annotations

import base64
import binascii
import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nodus_gitops.floor.errors import ConfigError


@dataclass(frozen=True)
class Auth:
    token: str | None = None
    user: str | None = None
    password: str | None = None

    @classmethod
    def from_config(cls, raw: Any, environ: Mapping[str, str] | None = None) -> Auth | None:
        """None when `raw` configures nothing; ConfigError names a missing variable."""
        environ = os.environ if environ is None else environ
        if not raw:
            return None
        if not isinstance(raw, Mapping):
            raise ConfigError("dashboard: a mapping with token, tokenEnv or basicAuth")

        def from_env(setting: str, name: Any) -> str:
            value = environ.get(str(name), "")
            if not value:
                raise ConfigError(f"{setting}: environment variable {name} is not set")
            return value

        token = raw.get("token") or None
        if raw.get("tokenEnv"):
            token = from_env("dashboard.tokenEnv", raw["tokenEnv"])
        user = password = None
        basic = raw.get("basicAuth")
        if basic:
            if not isinstance(basic, Mapping) or not basic.get("user") or not basic.get(
                    "passwordEnv"):
                raise ConfigError("dashboard.basicAuth: give user and passwordEnv")
            user = str(basic["user"])
            password = from_env("dashboard.basicAuth.passwordEnv", basic["passwordEnv"])
        if token is None and user is None:
            return None
        return cls(str(token) if token else None, user, password)

    def allows(self, header: str | None) -> bool:
        scheme, _, value = (header or "").strip().partition(" ")
        scheme = scheme.lower()
        if scheme == "bearer" and self.token:
            return _same(value.strip(), self.token)
        if scheme != "basic":
            return False
        try:
            user, _, password = base64.b64decode(value.strip(), validate=True).decode(
                "utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        if self.user is not None and self.password is not None and _same(
                user, self.user) & _same(password, self.password):
            return True
        return bool(self.token) and _same(password, self.token or "")

    @property
    def challenge(self) -> str:
        return 'Basic realm="nodus-gitops", charset="UTF-8"'


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())
