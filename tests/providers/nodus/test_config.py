"""Settings and authentication: key from the environment or a file, a kubeconfig with a
token, a token file, a CA or a client certificate, and one clear ConfigError per mistake."""

from __future__ import annotations

import base64
import json
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
import respx
import yaml
from nodus_gitops.floor.errors import ConfigError, TransientError
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.providers.nodus import NodusConfig, NodusProvider

KEY = ResourceKey("Job", "team-a", "hello")
JOB_PATH = "/apis/nodus.dev/v1/namespaces/team-a/jobs/hello"
needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


def _config(settings: dict, environ: dict | None = None, base: Path | None = None):
    return NodusConfig.from_settings("nodus", settings, environ=environ or {}, base_dir=base)


def _auth_header(config: NodusConfig, url: str = "https://nodus.test") -> str | None:
    """The Authorization header the provider sends with this config."""
    with respx.mock(assert_all_called=True) as router:
        route = router.get(url + JOB_PATH).respond(json={"metadata": {"name": "hello"}})
        NodusProvider(config).get(KEY)
        return route.calls.last.request.headers.get("Authorization")


def test_key_from_the_default_environment_variable() -> None:
    config = _config({"url": "https://nodus.test/"}, {"NODUS_API_KEY": "k-env"})
    assert config.url == "https://nodus.test"
    assert _auth_header(config) == "Bearer k-env"


def test_key_from_a_named_environment_variable() -> None:
    config = _config({"url": "https://nodus.test", "apiKeyEnv": "TEAM_A_KEY"},
                     {"TEAM_A_KEY": "k-team", "NODUS_API_KEY": "k-other"})
    assert _auth_header(config) == "Bearer k-team"


def test_key_from_a_file_is_reread_so_rotation_works(tmp_path: Path) -> None:
    (tmp_path / "key").write_text("k-file-1\n")
    config = _config({"url": "https://nodus.test", "apiKeyFile": "key"}, base=tmp_path)
    assert _auth_header(config) == "Bearer k-file-1"
    (tmp_path / "key").write_text("k-file-2\n")
    assert _auth_header(config) == "Bearer k-file-2"


@pytest.mark.parametrize("settings, environ, setting", [
    ({"url": "https://nodus.test"}, {}, "providers.nodus.apiKeyEnv"),
    ({"url": "https://nodus.test", "apiKeyEnv": "MY_KEY"}, {"NODUS_API_KEY": "x"}, "MY_KEY"),
    ({"url": "https://nodus.test", "apiKeyFile": "/nonexistent/key"}, {},
     "providers.nodus.apiKeyFile"),
    ({}, {"NODUS_API_KEY": "x"}, "providers.nodus.url"),
    ({"url": "nodus.test"}, {"NODUS_API_KEY": "x"}, "providers.nodus.url"),
    ({"url": "https://nodus.test", "timeout": "soon"}, {"NODUS_API_KEY": "x"},
     "providers.nodus.timeout"),
    ({"url": "https://nodus.test", "apikey": "x"}, {}, "providers.nodus: unknown setting 'apikey'"),
    ({"url": "https://nodus.test", "context": "prod"}, {"NODUS_API_KEY": "x"},
     "providers.nodus.context"),
])
def test_each_mistake_is_a_config_error_naming_the_setting(settings: dict, environ: dict,
                                                           setting: str) -> None:
    with pytest.raises(ConfigError, match=setting.replace(".", r"\.")):
        _config(settings, environ)


def test_empty_key_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "key").write_text("\n")
    with pytest.raises(ConfigError, match="apiKeyFile: .* is empty"):
        _config({"url": "https://nodus.test", "apiKeyFile": str(tmp_path / "key")})


def test_timeout_as_seconds_or_duration() -> None:
    env = {"NODUS_API_KEY": "x"}
    assert _config({"url": "https://n.test", "timeout": 5}, env).timeout == 5.0
    assert _config({"url": "https://n.test", "timeout": "1m"}, env).timeout == 60.0


def test_the_key_is_in_no_repr() -> None:
    config = _config({"url": "https://nodus.test"}, {"NODUS_API_KEY": "k-secret-123"})
    provider = NodusProvider(config)
    for text in (repr(config), str(config), repr(provider), repr(config.credential),
                 repr(provider._client.auth)):
        assert "k-secret-123" not in text


# --- kubeconfig --------------------------------------------------------------------


def _kubeconfig(tmp_path: Path, user: dict, cluster: dict | None = None,
                current: str = "nodus") -> Path:
    doc = {
        "apiVersion": "v1", "kind": "Config", "current-context": current,
        "clusters": [{"name": "nodus", "cluster": cluster or {"server": "https://kube.test"}},
                     {"name": "other", "cluster": {"server": "https://other.test"}}],
        "users": [{"name": "ci", "user": user}, {"name": "other", "user": {"token": "t-other"}}],
        "contexts": [
            {"name": "nodus", "context": {"cluster": "nodus", "user": "ci",
                                          "namespace": "team-a"}},
            {"name": "other", "context": {"cluster": "other", "user": "other"}}],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_kubeconfig_token_server_and_namespace(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path, {"token": "t-kube"})
    config = _config({"kubeconfig": str(path)}, {"NODUS_API_KEY": "ignored"})
    assert (config.url, config.project, config.verify) == ("https://kube.test", "team-a", True)
    assert _auth_header(config, "https://kube.test") == "Bearer t-kube"
    assert "t-kube" not in repr(config)


def test_kubeconfig_context_setting_picks_another_context(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path, {"token": "t-kube"})
    config = _config({"kubeconfig": str(path), "context": "other"})
    assert config.url == "https://other.test"
    assert _auth_header(config, "https://other.test") == "Bearer t-other"


def test_kubeconfig_token_file_relative_to_the_kubeconfig(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("t-from-file\n")
    path = _kubeconfig(tmp_path, {"tokenFile": "token"})
    assert _auth_header(_config({"kubeconfig": str(path)}), "https://kube.test") == \
        "Bearer t-from-file"


def test_kubeconfig_insecure_skip_tls_verify(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path, {"token": "t"}, {"server": "https://kube.test",
                                                  "insecure-skip-tls-verify": True})
    assert _config({"kubeconfig": str(path)}).verify is False


def test_kubeconfig_without_a_user_token_falls_back_to_the_key_setting(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path, {})
    config = _config({"kubeconfig": str(path)}, {"NODUS_API_KEY": "k-env"})
    assert _auth_header(config, "https://kube.test") == "Bearer k-env"


@pytest.mark.parametrize("user, cluster, context, message", [
    ({"exec": {"command": "aws"}}, None, None, "uses exec"),
    ({"token": "t"}, None, "missing", "context 'missing' not found"),
    ({"token": "t"}, {"server": "https://kube.test", "certificate-authority-data": "%%%"},
     None, "not base64"),
    ({"token": "t"}, {"server": "https://kube.test",
                      "certificate-authority-data": base64.b64encode(b"junk").decode()},
     None, "not a PEM"),
    ({"token": "t"}, {"server": "https://kube.test", "certificate-authority": "nope.crt"},
     None, "certificate-authority"),
    ({"tokenFile": "missing-token"}, None, None, "cannot read"),
])
def test_kubeconfig_mistakes(tmp_path: Path, user: dict, cluster: dict | None,
                             context: str | None, message: str) -> None:
    path = _kubeconfig(tmp_path, user, cluster)
    settings = {"kubeconfig": str(path), **({"context": context} if context else {})}
    with pytest.raises(ConfigError, match=message) as caught:
        _config(settings)
    assert "providers.nodus.kubeconfig" in str(caught.value)


def test_missing_kubeconfig_file() -> None:
    with pytest.raises(ConfigError, match=r"providers\.nodus\.kubeconfig: cannot read"):
        _config({"kubeconfig": "/nonexistent/kubeconfig"})


# --- TLS with a real server ----------------------------------------------------------


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("needs openssl to make a test certificate")
    d = tmp_path_factory.mktemp("certs")
    for name, subject, extra in (("server", "/CN=127.0.0.1", ["-addext",
                                  "subjectAltName=IP:127.0.0.1,DNS:localhost"]),
                                 ("client", "/CN=ci", [])):
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-days",
                        "2", "-subj", subject, "-keyout", str(d / f"{name}.key"),
                        "-out", str(d / f"{name}.crt"), *extra],
                       check=True, capture_output=True)
    return {n: d / n for n in ("server.crt", "server.key", "client.crt", "client.key")}


@pytest.fixture
def https_server(certs: dict[str, Path]) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            body = json.dumps({"metadata": {"name": "hello", "uid": "u-1"},
                               "status": {"phase": "Running",
                                          "auth": self.headers.get("Authorization")}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(certs["server.crt"], certs["server.key"])
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def test_kubeconfig_ca_data_verifies_a_real_tls_server(tmp_path: Path, certs: dict,
                                                       https_server: str) -> None:
    path = _kubeconfig(tmp_path, {"token": "t-tls"},
                       {"server": https_server,
                        "certificate-authority-data": _b64(certs["server.crt"])})
    config = _config({"kubeconfig": str(path)})
    assert isinstance(config.verify, ssl.SSLContext)
    assert [c["subject"] for c in config.verify.get_ca_certs()] == [((("commonName",
                                                                       "127.0.0.1"),),)]
    observed = NodusProvider(config).get(KEY)
    assert observed is not None and observed.status["auth"] == "Bearer t-tls"


def test_kubeconfig_ca_file_verifies_too(tmp_path: Path, certs: dict, https_server: str) -> None:
    shutil.copy(certs["server.crt"], tmp_path / "ca.crt")
    path = _kubeconfig(tmp_path, {"token": "t"}, {"server": https_server,
                                                  "certificate-authority": "ca.crt"})
    assert NodusProvider(_config({"kubeconfig": str(path)})).get(KEY) is not None


def test_without_the_ca_the_server_is_not_trusted(https_server: str) -> None:
    config = _config({"url": https_server}, {"NODUS_API_KEY": "k"})
    with pytest.raises(TransientError, match="ConnectError"):
        NodusProvider(config).get(KEY)


@needs_openssl
def test_kubeconfig_client_certificate_data_loads(tmp_path: Path, certs: dict) -> None:
    path = _kubeconfig(tmp_path, {"client-certificate-data": _b64(certs["client.crt"]),
                                  "client-key-data": _b64(certs["client.key"])})
    config = _config({"kubeconfig": str(path)})
    assert isinstance(config.verify, ssl.SSLContext) and config.credential is None
    with respx.mock() as router:
        route = router.get("https://kube.test" + JOB_PATH).respond(json={})
        NodusProvider(config).get(KEY)
    assert "Authorization" not in route.calls.last.request.headers
    # A key that does not match its certificate is named, not a traceback.
    bad = _kubeconfig(tmp_path, {"client-certificate-data": _b64(certs["client.crt"]),
                                 "client-key-data": _b64(certs["server.key"])})
    with pytest.raises(ConfigError, match="key pair"):
        _config({"kubeconfig": str(bad)})


def test_provider_from_settings_builds_a_working_client() -> None:
    provider = NodusProvider.from_settings("nodus", {"url": "https://nodus.test"},
                                           environ={"NODUS_API_KEY": "k"})
    assert provider.name == "nodus" and provider.config.timeout == 30.0
    assert isinstance(provider._client, httpx.Client)
