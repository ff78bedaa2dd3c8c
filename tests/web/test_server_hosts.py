"""DNS rebinding and cross-site requests, as an attacker's page in a browser would send them
to a dashboard with no auth configured: a Host header the server does not answer to gets
400 before anything is read; the one POST of the API (refresh) refused with 403 when its
Origin (or Sec-Fetch-Site) says another site sent it, whatever its content type; a
request with no Origin (curl, the CLI) still works; webhooks are signed and exempt."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from nodus_gitops.config import load_settings
from nodus_gitops.floor.errors import ConfigError

from tests.web.conftest import serve
from tests.web.seed import seed

OWN_NAME = "dash.example.org"


@pytest.fixture
def named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[httpx.Client, int]]:
    s = seed(tmp_path / "state", dashboard={"hosts": [OWN_NAME]})
    # A refresh that gets through asks for a sync: answered here, nothing is fetched.
    monkeypatch.setattr(s.service, "trigger", lambda binding: binding in s.service.syncs)
    url, stop = serve(s)
    with httpx.Client(base_url=url, timeout=10) as c:
        yield c, httpx.URL(url).port or 0
    stop()  # type: ignore[operator]
    s.store.close()


@pytest.mark.parametrize("host", ["evil.example", "evil.example:{port}", "127.0.0.1.nip.io",
                                  "localhost.evil.example", "attacker.test:80"])
def test_a_foreign_host_reads_nothing(named: tuple[httpx.Client, int], host: str) -> None:
    client, port = named
    for path in ("/api/v1/repos", "/", "/metrics", "/readyz", "/api/v1/repos/ml-team/refresh"):
        response = client.get(path, headers={"Host": host.format(port=port)})
        assert response.status_code == 400, (host, path)
        assert "ml-team" not in response.text
        assert "dashboard.hosts" in response.json()["error"]
    refresh = client.post("/api/v1/repos/ml-team/refresh", headers={"Host": host.format(
        port=port)})
    assert refresh.status_code == 400


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "LOCALHOST",
                                  "[::1]:{port}", OWN_NAME, f"{OWN_NAME.upper()}:{{port}}",
                                  "10.1.2.3:{port}", "[fd00::5]"])
def test_own_names_and_addresses_are_served(named: tuple[httpx.Client, int], host: str) -> None:
    # An address is never a rebinding: a browser that reaches the server by address has
    # no other site's name to confuse it with (a Kubernetes probe sends the pod's IP).
    client, port = named
    response = client.get("/api/v1/repos", headers={"Host": host.format(port=port)})
    assert response.status_code == 200, host
    assert [r["id"] for r in response.json()] == ["ml-team", "ops"]


def test_webhooks_answer_whatever_the_host(named: tuple[httpx.Client, int]) -> None:
    client, _port = named
    response = client.post("/hooks/github", content=b"{}", headers={"Host": "hooks.public.io"})
    assert response.status_code == 401  # unsigned: refused by the hook, not by the host


@pytest.mark.parametrize("headers", [
    {"Origin": "http://evil.example"},
    {"Origin": "http://evil.example", "Content-Type": "text/plain"},
    {"Origin": "null", "Content-Type": "text/plain"},
    {"Origin": "http://127.0.0.1:1"},
    {"Sec-Fetch-Site": "cross-site", "Content-Type": "text/plain"},
    {"Sec-Fetch-Site": "same-site"},
])
def test_a_cross_site_refresh_is_403(named: tuple[httpx.Client, int],
                                     headers: dict[str, str]) -> None:
    client, _port = named
    response = client.post("/api/v1/repos/ml-team/refresh", content=b"x", headers=headers)
    assert response.status_code == 403, headers
    assert "origin" in response.json()["error"].lower()


@pytest.mark.parametrize("headers", [
    {},
    {"Origin": "http://127.0.0.1:{port}", "Sec-Fetch-Site": "same-origin"},
    {"Origin": "http://localhost:{port}", "Host": "localhost:{port}"},
    {"Origin": f"https://{OWN_NAME}", "Host": OWN_NAME},
    {"Sec-Fetch-Site": "none"},
])
def test_a_same_origin_or_scripted_refresh_is_202(named: tuple[httpx.Client, int],
                                                  headers: dict[str, str]) -> None:
    client, port = named
    headers = {k: v.format(port=port) for k, v in headers.items()}
    response = client.post("/api/v1/repos/ml-team/refresh", headers=headers)
    assert response.status_code == 202, headers


def test_dashboard_hosts_setting_is_checked(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("dashboard:\n  hosts: [dash.example.org, other.example.org]\n")
    settings = load_settings(str(config), environ={})
    assert settings.dashboard["hosts"] == ["dash.example.org", "other.example.org"]
    config.write_text("dashboard:\n  hosts: dash.example.org\n")
    with pytest.raises(ConfigError, match=r"dashboard\.hosts: a list of host names"):
        load_settings(str(config), environ={})
    config.write_text("dashboard:\n  host: [dash.example.org]\n")
    with pytest.raises(ConfigError, match=r"dashboard: unknown setting 'host' \(known: .*hosts"):
        load_settings(str(config), environ={})
    config.write_text("dashboard:\n  hosts: ['http://dash.example.org/']\n")
    with pytest.raises(ConfigError, match=r"dashboard\.hosts\[0\]: .*a host name"):
        load_settings(str(config), environ={})
