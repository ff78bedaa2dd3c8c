"""Slow, idle and too many clients against the real server on 127.0.0.1, as an attacker
meets it: 2,000 connections that each send a request line, a header and one byte neither
stop /healthz answering nor stay open (the server closes them itself once its head timeout
passes, and logs no traceback doing so); a head that trickles in a byte at a time, an idle
keep-alive connection and a webhook body that never arrives are all closed by the server;
connections over the cap are closed at once; and stopping the server joins its thread."""

from __future__ import annotations

import logging
import resource
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from nodus_gitops.web.limits import Limits
from nodus_gitops.web.server import start_server

from tests.web.seed import Seeded

HELD = 2000
PARTIAL = b"GET /api/v1/repos HTTP/1.1\r\nHost: 127.0.0.1\r\nX"  # line, header, one byte
GRACE = 30.0  # generous: how late past its timeout the server may close, on a busy machine


@pytest.fixture(autouse=True)
def enough_file_descriptors() -> None:
    """Both ends of every held connection live in this process: twice HELD, plus room."""
    need = 2 * HELD + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            pytest.skip(f"ulimit -Hn is {hard}: {need} file descriptors are needed")
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


def address(stop: object) -> tuple[str, int]:
    return stop.address  # type: ignore[attr-defined,no-any-return]


def hold(where: tuple[str, int], n: int, data: bytes = PARTIAL) -> list[socket.socket]:
    held = []
    for _ in range(n):
        sock = socket.create_connection(where, timeout=GRACE)
        sock.sendall(data)
        held.append(sock)
    return held


def closed_by_server(sock: socket.socket, deadline: float) -> bool:
    """Whether the server ends this connection (EOF after any answer, or a reset) before
    `deadline`."""
    try:
        while True:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            if sock.recv(65536) == b"":
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def abort(sock: socket.socket) -> None:
    """Close with a reset (RST), as a client that dies does."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    sock.close()


@pytest.fixture
def served(seeded: Seeded) -> Iterator[tuple[str, int]]:
    stop = start_server(seeded.service, "127.0.0.1:0")
    yield address(stop)
    stop()  # type: ignore[operator]


def test_two_thousand_half_sent_requests(served: tuple[str, int], caplog: pytest.LogCaptureFixture,
                                         capfd: pytest.CaptureFixture[str]) -> None:
    caplog.set_level(logging.DEBUG)
    host, port = served
    held = hold(served, HELD)
    started = time.monotonic()
    try:
        # While all of them are held, the probe still answers.
        before = time.perf_counter()
        health = httpx.get(f"http://{host}:{port}/healthz", timeout=10)
        answered_in = time.perf_counter() - before
        assert health.status_code == 200
        with capfd.disabled():  # the figures, for whoever runs this
            print(f"\n/healthz with {HELD} half-sent requests held: {answered_in * 1000:.1f} ms")
        # Then the server closes every one of them itself, once the head timeout passed.
        deadline = started + Limits().head_timeout + GRACE
        still_open = [s for s in held if not closed_by_server(s, deadline)]
        assert not still_open, f"{len(still_open)} of {HELD} connections left open"
        with capfd.disabled():
            print(f"all {HELD} closed by the server {time.monotonic() - started:.1f} s after "
                  f"they were opened (head timeout {Limits().head_timeout:g} s)")
    finally:
        for sock in held:
            abort(sock)
    assert httpx.get(f"http://{host}:{port}/healthz", timeout=10).status_code == 200
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err
    assert [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR] == []


def test_clients_that_reset_mid_head_leave_no_traceback(
        served: tuple[str, int], caplog: pytest.LogCaptureFixture,
        capfd: pytest.CaptureFixture[str]) -> None:
    caplog.set_level(logging.DEBUG)
    for sock in hold(served, 200):
        abort(sock)
    host, port = served
    assert httpx.get(f"http://{host}:{port}/healthz", timeout=10).status_code == 200
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err
    assert [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR] == []


@pytest.fixture
def quick(seeded: Seeded) -> Iterator[tuple[tuple[str, int], Limits]]:
    limits = Limits(head_timeout=2.0, keep_alive_timeout=1.0, body_timeout=2.0,
                    max_connections=20)
    stop = start_server(seeded.service, "127.0.0.1:0", limits)
    yield address(stop), limits
    stop()  # type: ignore[operator]


def test_a_head_that_trickles_in_is_cut_off(quick: tuple[tuple[str, int], Limits]) -> None:
    # Every byte comes before the keep-alive timeout would fire, so only a deadline on
    # the whole head ends this connection.
    where, limits = quick
    started = time.monotonic()
    deadline = started + limits.head_timeout + GRACE
    with socket.create_connection(where, timeout=GRACE) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
        ended = False
        for byte in b"GET / HTTP/1.1\r\nX-Slow: " + b"a" * 10_000:
            try:
                sock.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                ended = True
                break
            sock.settimeout(limits.keep_alive_timeout / 4)
            try:
                if sock.recv(1) == b"":
                    ended = True
                    break
            except ConnectionResetError:  # closed with bytes unread: a reset, not an EOF
                ended = True
                break
            except TimeoutError:
                pass
            assert time.monotonic() < deadline, "the trickling head was never cut off"
        assert ended


def test_an_idle_keep_alive_connection_is_closed(
        quick: tuple[tuple[str, int], Limits]) -> None:
    where, limits = quick
    with socket.create_connection(where, timeout=GRACE) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
        assert closed_by_server(sock, time.monotonic() + limits.keep_alive_timeout + GRACE)


def test_a_webhook_body_that_never_arrives_is_408(
        quick: tuple[tuple[str, int], Limits]) -> None:
    where, limits = quick
    with socket.create_connection(where, timeout=GRACE) as sock:
        sock.sendall(b"POST /hooks/github HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Content-Length: 100\r\nContent-Type: application/json\r\n\r\n{\"ref\"")
        answer = b""
        while not answer.endswith(b"}") and (chunk := sock.recv(65536)):
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 408 "), answer
        assert b"connection: close" in answer.lower()
        assert closed_by_server(sock, time.monotonic() + GRACE)


def test_connections_over_the_cap_are_closed_at_once(
        quick: tuple[tuple[str, int], Limits]) -> None:
    where, limits = quick
    held = hold(where, limits.max_connections)
    try:
        with socket.create_connection(where, timeout=GRACE) as extra:
            extra.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert closed_by_server(extra, time.monotonic() + GRACE)
    finally:
        for sock in held:
            sock.close()
    # Below the cap again: served. (The server may take a moment to see the closes.)
    deadline = time.monotonic() + GRACE
    while True:
        try:
            answer = httpx.get(f"http://{where[0]}:{where[1]}/healthz", timeout=GRACE)
            break
        except httpx.TransportError:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    assert answer.status_code == 200


def test_stop_closes_held_connections_and_joins_its_thread(
        seeded: Seeded, caplog: pytest.LogCaptureFixture,
        capfd: pytest.CaptureFixture[str]) -> None:
    caplog.set_level(logging.DEBUG)
    before = set(threading.enumerate())
    stop = start_server(seeded.service, "127.0.0.1:0")
    where = address(stop)
    held = hold(where, 50)
    with socket.create_connection(where, timeout=GRACE) as idle:  # served from a worker thread
        idle.sendall(b"GET /api/v1/repos HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert idle.recv(65536).startswith(b"HTTP/1.1 200 ")
        stop()  # type: ignore[operator]
        assert closed_by_server(idle, time.monotonic() + GRACE)
    assert all(closed_by_server(s, time.monotonic() + GRACE) for s in held)
    for sock in held:
        sock.close()
    assert set(threading.enumerate()) - before == set()
    with pytest.raises(OSError):
        socket.create_connection(where, timeout=GRACE).close()
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err
    assert [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR] == []
