"""Webhook deliveries in the state store, on SQLite and PostgreSQL: the same delivery is
the first once, whichever replica (process, store) receives it, even at the same time;
the record forgets what is older than a week or beyond its limit."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path

import pytest
from nodus_gitops.state import Store
from nodus_gitops.web.hooks import handle

from tests.fixtures_git import ManifestRepo
from tests.state.support import TickingClock, execute
from tests.web.test_hooks_delivery import SECRET, build, github, push, wait_for_background


@pytest.fixture
def clock() -> TickingClock:
    return TickingClock()


def test_a_delivery_is_the_first_once_per_host(state_url: str, clock: TickingClock) -> None:
    with Store.open(state_url, clock=clock) as store:
        assert store.record_delivery("github", "72d3162e") is True
        assert store.record_delivery("github", "72d3162e") is False
        assert store.record_delivery("gitea", "72d3162e") is True  # another host's id


def test_replicas_on_one_database_share_what_they_received(state_url: str) -> None:
    with Store.open(state_url) as one, Store.open(state_url) as two:
        assert one.record_delivery("github", "d-1") is True
        assert two.record_delivery("github", "d-1") is False


def test_of_replicas_receiving_one_delivery_at_once_exactly_one_is_first(
        state_url: str) -> None:
    stores = [Store.open(state_url) for _ in range(4)]
    start = threading.Barrier(len(stores) * 4)
    answers: list[bool] = []

    def receive(store: Store, delivery: str) -> None:
        start.wait()
        answers.append(store.record_delivery("gitlab", delivery))

    threads = [threading.Thread(target=receive, args=(store, f"uuid-{n % 4}"))
               for store in stores for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for store in stores:
        store.close()
    assert sorted(answers) == [False] * 12 + [True] * 4


def test_deliveries_older_than_a_week_are_forgotten(state_url: str, clock: TickingClock) -> None:
    with Store.open(state_url, clock=clock) as store:
        store.record_delivery("github", "old")
        clock.now += timedelta(days=6)
        store.record_delivery("github", "recent")
        assert store.record_delivery("github", "old") is False  # six days: still held
        clock.now += timedelta(days=2)
        store.record_delivery("github", "next")
        assert store.record_delivery("github", "old") is True  # eight days: forgotten
        assert store.record_delivery("github", "recent") is False
    rows = execute(state_url, "SELECT delivery_id FROM webhook_delivery ORDER BY 1")[0]
    assert rows == [("next",), ("old",), ("recent",)]


def test_the_record_keeps_only_the_newest_rows_beyond_its_limit(
        state_url: str, clock: TickingClock) -> None:
    with Store.open(state_url, clock=clock) as store:
        for n in range(10):
            assert store.record_delivery("github", f"d-{n}", limit=4) is True
        assert execute(state_url, "SELECT count(*) FROM webhook_delivery") == [[(4,)]]
        assert store.record_delivery("github", "d-9", limit=4) is False
        assert store.record_delivery("github", "d-0", limit=4) is True  # pushed out


def test_two_services_behind_one_url_sync_a_delivery_once(tmp_path: Path,
                                                          state_url: str) -> None:
    """The same delivery reaching both replicas behind a load balancer (a redelivery
    lands on the other one) triggers on the first only."""
    repo = ManifestRepo(tmp_path / "srv", "ml", tmp_path / "work")
    repo.write("a.yaml", "apiVersion: nodus.dev/v1\nkind: Job\nmetadata:\n  name: a\n"
                         "spec:\n  command: [python3, -c, pass]\n")
    head = repo.commit("a")
    repo.push()
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    one = build(tmp_path / "one", str(repo.bare), state=state_url)
    two = build(tmp_path / "two", str(repo.bare), state=state_url)
    payload = push("acme/ml", head)
    payload["repository"]["clone_url"] = str(repo.bare)  # what a local remote matches by
    headers, body = github("push", payload, "d-shared")
    first = handle(one, "github", headers, body, {"github": SECRET})
    again = handle(two, "github", headers, body, {"github": SECRET})
    wait_for_background("trigger-ml")
    assert (first[0], first[1]["triggered"]) == (202, ["ml"])
    assert (again[0], again[1]["triggered"], again[1]["duplicate"]) == (200, [], True)
    one.store.close()
    two.store.close()
