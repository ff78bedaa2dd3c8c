"""What the server answers when something is wrong, over real HTTP: a bug behind a page or
a webhook is a logged 500 with the security headers, and the next request is served; a
head that grows past the limit before it ends is a 400."""

from __future__ import annotations

import socket

import httpx
import pytest
from nodus_gitops.web import server
from nodus_gitops.web.limits import Limits

from tests.web.seed import Seeded


def test_a_bug_behind_a_page_is_a_logged_500(client: httpx.Client, seeded: Seeded,
                                             monkeypatch: pytest.MonkeyPatch,
                                             caplog: pytest.LogCaptureFixture) -> None:
    def broken(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("a bug in a query")

    monkeypatch.setattr(seeded.store, "list_bindings", broken)
    response = client.get("/api/v1/repos")
    assert response.status_code == 500
    assert response.json() == {"error": "internal error; see the service log"}
    assert response.headers["Content-Security-Policy"] == server.CSP
    [record] = [r for r in caplog.records if r.name == "nodus_gitops.web"]
    assert record.exc_info and "a bug in a query" in str(record.exc_info[1])
    assert record.path == "/api/v1/repos"  # type: ignore[attr-defined]
    monkeypatch.undo()
    assert client.get("/api/v1/repos").status_code == 200


def test_a_bug_behind_a_webhook_is_a_logged_500(client: httpx.Client,
                                                monkeypatch: pytest.MonkeyPatch,
                                                caplog: pytest.LogCaptureFixture) -> None:
    from nodus_gitops.web import hooks

    def broken(*_args: object) -> None:
        raise RuntimeError("a bug in a hook")

    monkeypatch.setattr(hooks, "handle", broken)
    response = client.post("/hooks/generic", content=b"{}")
    assert response.status_code == 500 and response.headers["Connection"] == "close"
    assert any(r.exc_info and r.getMessage() == "webhook failed" for r in caplog.records)


def test_a_head_that_grows_past_the_limit_is_400(server_url: str) -> None:
    # Not ended yet: the server would buffer it for ever without the limit.
    url = httpx.URL(server_url)
    padding = b"a" * (Limits().max_head_bytes + 1)
    with socket.create_connection((url.host, url.port), timeout=10) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + padding)
        assert sock.recv(65536).startswith(b"HTTP/1.1 400 ")
