"""Where an idle poll's CPU goes: one binding of one Job whose repository is served over
HTTP on 127.0.0.1 (`git http-backend`, kept-alive connections), already synced; each
part timed by this process's CPU time over `--polls` calls (the Git server's own time is
another process's and not counted).

Parts: the whole idle `Service.reconcile`; the ref listing through libgit2 (what a poll
does); the same listing over a kept-alive connection with http.client and with httpx (a
transport of our own, for comparison); the store's binding row, the journal's pending
intents and the poll time an idle poll reads or keeps.

Prints JSON. Run: python bench/bench_idle_poll.py [--polls 500]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import httpx  # noqa: E402
from nodus_gitops.config import Binding, Settings  # noqa: E402
from nodus_gitops.providers.base import FakeProvider  # noqa: E402
from nodus_gitops.state.store import Store  # noqa: E402
from nodus_gitops.wiring import build_service  # noqa: E402

from tests.fixtures_git import serve_git_http  # noqa: E402
from tests.reconciler.test_scheduling import bare_repo  # noqa: E402


def cpu_ms(call: Callable[[], object], count: int) -> float:
    """This process's CPU milliseconds per call, after a few calls to warm up."""
    for _ in range(20):
        call()
    started = time.process_time()
    for _ in range(count):
        call()
    return round((time.process_time() - started) / count * 1000, 3)


def run(polls: int) -> dict:
    root = Path(tempfile.mkdtemp(prefix="bench-idle-poll-"))
    bare_repo(root / "team.git", "job")
    with serve_git_http(root) as server:
        url = server.url_for("team")
        binding = Binding(id="team", url=url, path="manifests", project="team")
        store = Store.open(None, root / "state")
        settings = Settings(state_dir=root / "state", instance="bench", bindings=(binding,),
                            checks={"gitnotes": False})
        service = build_service(settings, store, provider_factory=lambda _n: FakeProvider())
        service.follow_up = False
        assert service.reconcile("team").result == "applied"
        store.defer_poll_times()  # as `serve` does: idle polls' times kept in memory
        sync = service.syncs["team"]
        tip = store.get_binding("team").last_seen_commit
        refs = urllib.parse.urlsplit(url)
        refs_path = refs.path + "/info/refs?service=git-upload-pack"
        connection = http.client.HTTPConnection(refs.hostname, refs.port)

        def by_http_client() -> bytes:
            connection.request("GET", refs_path)
            return connection.getresponse().read()

        with httpx.Client() as client:
            parts = {
                "idle_reconcile_ms": cpu_ms(lambda: service.reconcile("team", wait=2), polls),
                "ref_listing_libgit2_ms": cpu_ms(lambda: sync.source.poll(tip), polls),
                "ref_listing_http_client_keepalive_ms": cpu_ms(by_http_client, polls),
                "ref_listing_httpx_keepalive_ms": cpu_ms(
                    lambda: client.get(url + "/info/refs",
                                       params={"service": "git-upload-pack"}).content, polls),
                "binding_row_ms": cpu_ms(lambda: store.get_binding("team"), polls),
                "pending_intents_ms": cpu_ms(lambda: store.pending_intents("team"), polls),
                "poll_time_ms": cpu_ms(lambda: store.record_poll("team", tip, None), polls),
            }
        connection.close()
        store.close()
    return {"benchmark": "idle_poll", "polls": polls, "loadavg": _loadavg(), **parts}


def _loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--polls", type=int, default=500)
    print(json.dumps(run(parser.parse_args().polls)))


if __name__ == "__main__":
    main()
