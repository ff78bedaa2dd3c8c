"""A Job whose source.git fetch hangs (a server that accepts and never answers, on a host
the operator allowed) still obeys its `timeout` and a cancel: the fetch is part of
Provisioning, where the timeout already counts, and never holds the Job for the fetch's
own 300 s limit."""

from __future__ import annotations

import socketserver
import threading
import time

import pytest

from tests.providers.local.conftest import HAS_BWRAP

pytest_plugins = ["tests.providers.local.https_git"]
pytestmark = pytest.mark.skipif(not HAS_BWRAP, reason="needs bubblewrap")


class _Silent(socketserver.BaseRequestHandler):
    """Accepts and says nothing until the test ends."""

    released = threading.Event()

    def handle(self) -> None:
        self.released.wait(120)


@pytest.fixture
def silent_url(test_host):
    server = test_host.listening(
        lambda: socketserver.ThreadingTCPServer((test_host.address, 0), _Silent))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://{test_host.address}:{server.server_address[1]}/stuck.git"
    finally:
        _Silent.released.set()
        server.shutdown()
        server.server_close()
        _Silent.released.clear()


def test_a_hanging_fetch_ends_at_the_jobs_timeout(local_factory, https_git, silent_url):
    local = local_factory(**https_git.trusted())
    started = time.monotonic()
    k = local.create("stuck", command=["true"], timeout="3s",
                     source={"git": {"repo": silent_url}})
    done = local.wait(k, timeout=60)
    assert (done.phase, done.reason) == ("Failed", "DeadlineExceeded"), done
    assert "timeout of 3s" in done.message
    assert time.monotonic() - started < 60  # not the fetch's own 300 s


def test_a_job_cancelled_while_its_source_is_fetched_ends_cancelled(local_factory, https_git,
                                                                    silent_url):
    local = local_factory(**https_git.trusted())
    k = local.create("stuck", command=["true"], source={"git": {"repo": silent_url}})
    local.wait(k, "Provisioning", timeout=30)
    local.patch(k, state="Cancelled")
    done = local.wait(k, timeout=60)
    assert done.phase == "Cancelled", done
    assert "cancelled" in (done.message or "")
