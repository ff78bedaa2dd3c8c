"""Where the Nodus API is and how to authenticate: the `providers.<name>` settings.

Three ways to authenticate, from the most to the least explicit: a key file
(`apiKeyFile`), a kubeconfig (`kubeconfig`, optional `context`: server, token or token
file, CA, client certificate), or an environment variable (`apiKeyEnv`, default
`NODUS_API_KEY`). The kubeconfig is read with PyYAML alone; exec plugins and auth
providers are refused by name. The key never appears in a repr, a log or a message:
only the setting it came from does.
"""

from __future__ import annotations

import base64
import binascii
import os
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import certifi
import yaml
from nodus_gitops.floor.errors import ConfigError, refuse_unknown_settings
from nodus_gitops.floor.quantities import parse_duration

DEFAULT_KEY_ENV = "NODUS_API_KEY"
DEFAULT_TIMEOUT = 30.0
KNOWN_KEYS = ("type", "url", "apiKeyEnv", "apiKeyFile", "kubeconfig", "context", "timeout",
              "project")


@dataclass(frozen=True)
class Credential:
    """A bearer token and the setting it comes from. A file is read on every request, so a
    rotated token (a projected service-account token) is picked up without a restart."""

    setting: str
    value: str | None = field(default=None, repr=False)
    path: Path | None = None

    def token(self) -> str:
        if self.path is None:
            return self.value or ""
        try:
            return self.path.read_text(encoding="utf-8").strip()
        except OSError as e:
            raise ConfigError(f"{self.setting}: cannot read {self.path}: {e.strerror}") from None

    def __repr__(self) -> str:
        return f"Credential({self.setting})"


@dataclass(frozen=True)
class NodusConfig:
    """Everything the provider needs to reach the API; `verify` is what httpx takes."""

    url: str
    credential: Credential | None
    verify: ssl.SSLContext | bool = True
    timeout: float = DEFAULT_TIMEOUT
    project: str | None = None  # the default project, for estimates of bare manifests
    name: str = "nodus"

    @classmethod
    def from_settings(cls, name: str, settings: Mapping[str, Any], *,
                      environ: Mapping[str, str] | None = None,
                      base_dir: Path | None = None) -> NodusConfig:
        environ = os.environ if environ is None else environ
        where = f"providers.{name}"
        refuse_unknown_settings(settings, KNOWN_KEYS, where)
        timeout = _timeout(settings.get("timeout"), f"{where}.timeout")
        base = base_dir or Path.cwd()
        kube = None
        if settings.get("kubeconfig"):
            path = _path(settings["kubeconfig"], base)
            kube = read_kubeconfig(path, settings.get("context"), f"{where}.kubeconfig")
        elif settings.get("context"):
            raise ConfigError(f"{where}.context: set {where}.kubeconfig too")
        url = settings.get("url") or (kube.server if kube else None)
        if not url:
            raise ConfigError(f"{where}.url: not set (the Nodus API URL, such as "
                              f"https://api.nodus.dev; or set {where}.kubeconfig)")
        if not str(url).startswith(("https://", "http://")):
            raise ConfigError(f"{where}.url: {url!r} is not an http(s) URL")
        credential = _credential(where, settings, environ, base, kube)
        return cls(url=str(url).rstrip("/"), credential=credential,
                   verify=kube.verify if kube else True, timeout=timeout,
                   project=settings.get("project") or (kube.namespace if kube else None),
                   name=name)

    @property
    def credential_setting(self) -> str:
        return self.credential.setting if self.credential else "the kubeconfig's client cert"


def _credential(where: str, settings: Mapping[str, Any], environ: Mapping[str, str],
                base: Path, kube: Kubeconfig | None) -> Credential | None:
    if settings.get("apiKeyFile"):
        path = _path(settings["apiKeyFile"], base)
        credential = Credential(f"{where}.apiKeyFile ({path})", path=path)
        if not credential.token():
            raise ConfigError(f"{where}.apiKeyFile: {path} is empty")
        return credential
    if kube is not None and (kube.credential or kube.has_client_cert):
        return kube.credential
    env = settings.get("apiKeyEnv") or DEFAULT_KEY_ENV
    value = environ.get(env, "").strip()
    if not value:
        raise ConfigError(f"{where}.apiKeyEnv: the environment variable {env} is not set "
                          f"(put the Nodus API key there, or set {where}.apiKeyFile or "
                          f"{where}.kubeconfig)")
    return Credential(f"the environment variable {env} ({where}.apiKeyEnv)", value=value)


def _timeout(value: Any, setting: str) -> float:
    if value is None:
        return DEFAULT_TIMEOUT
    seconds = value if isinstance(value, int | float) and not isinstance(value, bool) \
        else parse_duration(value)
    if seconds is None or seconds <= 0:
        raise ConfigError(f"{setting}: {value!r} is not a positive number of seconds or a "
                          "duration such as 30s")
    return float(seconds)


def _path(value: Any, base: Path) -> Path:
    path = Path(os.path.expanduser(str(value)))
    return path if path.is_absolute() else base / path


# --- kubeconfig ------------------------------------------------------------------------


@dataclass(frozen=True)
class Kubeconfig:
    """The parts of one kubeconfig context the provider uses."""

    server: str
    credential: Credential | None
    verify: ssl.SSLContext | bool
    namespace: str | None
    has_client_cert: bool = False


def read_kubeconfig(path: Path, context: str | None, setting: str) -> Kubeconfig:
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"{setting}: cannot read {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{setting}: {path} is not YAML: {e}") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{setting}: {path} is not a kubeconfig")
    name = context or doc.get("current-context")
    if not name:
        raise ConfigError(f"{setting}: {path} has no current-context; set the provider's "
                          "context setting")
    ctx = _named(doc, "contexts", "context", name, f"{setting}: context")
    cluster = _named(doc, "clusters", "cluster", ctx.get("cluster"), f"{setting}: cluster")
    user = _named(doc, "users", "user", ctx.get("user"), f"{setting}: user") \
        if ctx.get("user") else {}
    if not cluster.get("server"):
        raise ConfigError(f"{setting}: cluster {ctx.get('cluster')!r} has no server")
    for unsupported in ("exec", "auth-provider", "username"):
        if unsupported in user:
            raise ConfigError(f"{setting}: user {ctx.get('user')!r} uses {unsupported}, which "
                              "nodus-gitops does not run; use a token, tokenFile or a client "
                              "certificate, or set apiKeyFile")
    base = path.parent
    where = f"{setting} ({path}, user {ctx.get('user')!r})"
    credential = None
    if user.get("token"):
        credential = Credential(where, value=str(user["token"]))
    elif user.get("tokenFile"):
        credential = Credential(where, path=_path(user["tokenFile"], base))
        credential.token()  # fail now, naming the setting, rather than on the first request
    cert = _pem(user, "client-certificate", base, setting)
    key = _pem(user, "client-key", base, setting)
    verify = _verify(cluster, base, setting, (cert, key) if cert and key else None)
    return Kubeconfig(str(cluster["server"]).rstrip("/"), credential, verify,
                      ctx.get("namespace"), has_client_cert=bool(cert and key))


def _named(doc: dict, section: str, inner: str, name: Any, what: str) -> dict:
    for entry in doc.get(section) or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            return entry.get(inner) or {}
    raise ConfigError(f"{what} {name!r} not found in the kubeconfig")


def _pem(section: dict, key: str, base: Path, setting: str) -> bytes | None:
    """`key` as a path or `key-data` as base64, decoded to PEM bytes."""
    if section.get(f"{key}-data"):
        try:
            return base64.b64decode(section[f"{key}-data"], validate=True)
        except (binascii.Error, ValueError):
            raise ConfigError(f"{setting}: {key}-data is not base64") from None
    if section.get(key):
        path = _path(section[key], base)
        try:
            return path.read_bytes()
        except OSError as e:
            raise ConfigError(f"{setting}: {key} {path}: {e.strerror}") from None
    return None


def _verify(cluster: dict, base: Path, setting: str,
            client: tuple[bytes, bytes] | None) -> ssl.SSLContext | bool:
    ca = _pem(cluster, "certificate-authority", base, setting)
    insecure = bool(cluster.get("insecure-skip-tls-verify"))
    if ca is None and client is None:
        return not insecure
    # The cluster's CA alone is trusted, as kubectl does; it is held in memory (`cadata`),
    # so no CA file is left on disk. PROTOCOL_TLS_CLIENT checks the host name.
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if ca is None:
        ctx.load_verify_locations(cafile=certifi.where())
    else:
        try:
            ctx.load_verify_locations(cadata=ca.decode("ascii"))
        except (ssl.SSLError, UnicodeDecodeError, ValueError):
            raise ConfigError(f"{setting}: certificate-authority is not a PEM "
                              "certificate") from None
    if insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if client is not None:
        _load_client_cert(ctx, *client, setting)
    return ctx


def _load_client_cert(ctx: ssl.SSLContext, cert: bytes, key: bytes, setting: str) -> None:
    # The ssl module loads a chain from files only: write them private, load, delete.
    with tempfile.TemporaryDirectory(prefix="nodus-kube-") as tmp:
        cert_file, key_file = Path(tmp, "client.crt"), Path(tmp, "client.key")
        for path, data in ((cert_file, cert), (key_file, key)):
            path.touch(mode=0o600)
            path.write_bytes(data)
        try:
            ctx.load_cert_chain(cert_file, key_file)
        except ssl.SSLError:
            raise ConfigError(f"{setting}: client-certificate and client-key do not form a "
                              "PEM key pair") from None
