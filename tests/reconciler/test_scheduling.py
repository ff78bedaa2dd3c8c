"""How `Service.run` schedules many bindings: each gets its first sync however long the
queue of first syncs is, and later polls are spread over the interval, not taken in one
burst per interval."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pygit2
from nodus_gitops import service as service_module
from nodus_gitops.config import Binding, Settings
from nodus_gitops.providers.base import FakeProvider
from nodus_gitops.state.store import Store
from nodus_gitops.wiring import build_service

JOB = ("apiVersion: nodus.dev/v1\nkind: Job\nmetadata:\n  name: {name}\nspec:\n"
       "  image: python:3.12-slim\n  command: [python3, -c, pass]\n")


def bare_repo(path: Path, name: str) -> str:
    """A bare repository of one commit holding `manifests/<name>.yaml`."""
    repo = pygit2.init_repository(str(path), bare=True)
    folder = repo.TreeBuilder()
    folder.insert(f"{name}.yaml", repo.create_blob(JOB.format(name=name).encode()),
                  pygit2.GIT_FILEMODE_BLOB)
    top = repo.TreeBuilder()
    top.insert("manifests", folder.write(), pygit2.GIT_FILEMODE_TREE)
    who = pygit2.Signature("t", "t@example.com")
    return str(repo.create_commit("refs/heads/main", who, who, "first", top.write(), []))


def bindings_served(tmp_path: Path, count: int, provider: FakeProvider, **fields: object,
                    ) -> tuple[tuple[Binding, ...], Store, service_module.Service]:
    """`count` bindings, each its own bare repository of one Job (`job-<n>`), and one
    service syncing them on `provider`; the caller closes the store."""
    bindings = tuple(
        Binding(id=f"team-{n}", url=str(tmp_path / "remotes" / f"team-{n}.git"),
                path="manifests", project=f"team-{n}", **fields)
        for n in range(count))
    for n in range(count):
        bare_repo(tmp_path / "remotes" / f"team-{n}.git", f"job-{n}")
    store = Store.open(None, tmp_path / "state")
    settings = Settings(state_dir=tmp_path / "state", instance="test", bindings=bindings,
                        checks={"gitnotes": False})
    return bindings, store, build_service(settings, store,
                                          provider_factory=lambda _name: provider)


def counting_polls(service: service_module.Service) -> dict[str, int]:
    """The polls of each binding that ran a sync (not given way), counted as they come."""
    polls: dict[str, int] = {}
    reconcile = service.reconcile

    def counted(binding_id: str, **options: object):
        report = reconcile(binding_id, **options)
        if report is not None:
            polls[binding_id] = polls.get(binding_id, 0) + 1
        return report

    service.reconcile = counted
    return polls


def serve_while(service: service_module.Service, store: Store, watch, *after) -> None:
    """`service.run()` while `watch` runs on a thread of its own (it stops the service);
    then each of `after`, and the store closed, however the run ended."""
    threading.Thread(target=watch, daemon=True).start()
    try:
        service.run()
    finally:
        for step in after:
            step()
        store.close()


def test_every_binding_gets_its_first_sync_however_long_the_queue(tmp_path: Path) -> None:
    # Each create takes a while, so that the first syncs of 60 bindings queue for the
    # scheduler's workers for seconds: none of them may be dropped for starting late
    # (they would wait a whole interval, here far longer than the test's deadline).
    count = 60

    def slow_create(op: str, _key: object, _arg: object) -> None:
        if op == "create":
            time.sleep(0.3)

    provider = FakeProvider(slow_create)
    _, store, service = bindings_served(tmp_path, count, provider, interval=600)
    service.follow_up = False

    def stop_when_all_created() -> None:
        deadline = time.monotonic() + 60
        while len(provider.resources) < count and time.monotonic() < deadline:
            time.sleep(0.1)
        service.stopping.set()

    serve_while(service, store, stop_when_all_created)
    missing = sorted({f"job-{n}" for n in range(count)}
                     - {k.name for k in provider.resources})
    assert not missing, f"never synced: {missing}"


def test_polls_are_spread_over_the_interval() -> None:
    phases = service_module.poll_phases(["a", "b", "c", "d"], 20.0)
    assert sorted(phases.values()) == [5.0, 10.0, 15.0, 20.0]
    assert service_module.poll_phases(["only"], 30.0) == {"only": 30.0}  # one binding: as before


def test_follow_up_reads_share_one_thread_and_still_come(tmp_path: Path) -> None:
    # A sync that starts runs reads their status a few times in the next second. With
    # many bindings syncing, that must not be a thread per read (thousands of them).
    count = 20
    provider = FakeProvider()
    bindings, store, service = bindings_served(tmp_path, count, provider)
    before = threading.active_count()
    try:
        for binding in bindings:
            assert service.reconcile(binding.id).result == "applied"
        assert threading.active_count() <= before + 2  # not 4 timers a sync
        deadline = time.monotonic() + 30
        while sum(op == "get" for op, _ in provider.calls) < count:
            assert time.monotonic() < deadline, "the follow-up reads never came"
            time.sleep(0.05)
    finally:
        store.close()


def test_a_poll_due_while_first_syncs_are_queued_does_not_wait_behind_them(
        tmp_path: Path, monkeypatch) -> None:
    # One worker: the first binding's first sync runs, the next one's blocks in its
    # create and the third's is queued behind it. The first binding's regular poll
    # (due within its 1 s interval) must still run: a queue of first syncs (1,000 of
    # them at start) must not hold up the polls of the bindings already synced.
    monkeypatch.setattr(service_module, "SYNC_WORKERS", 1)
    release, created = threading.Event(), []

    def block_after_the_first(op: str, key: object, _arg: object) -> None:
        if op == "create":
            created.append(key)
            if len(created) > 1:
                release.wait(60)

    provider = FakeProvider(block_after_the_first)
    _, store, service = bindings_served(tmp_path, 3, provider, interval=1)
    service.follow_up = False
    polls = counting_polls(service)
    polled_again: list[bool] = []

    def watch() -> None:
        # until the first synced binding polls again, while the others' first syncs
        # are still blocked or queued (30 s: many intervals)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not polled_again:
            if any(n >= 2 for n in polls.values()):
                polled_again.append(not release.is_set())
            time.sleep(0.05)
        release.set()
        service.stopping.set()

    serve_while(service, store, watch, release.set)
    assert polled_again == [True], (
        f"no binding polled again while first syncs were queued: polls {polls}")


def test_a_poll_that_comes_while_a_read_holds_its_binding_waits_for_it(tmp_path: Path) -> None:
    # Status reads hold the binding's lock 1 s at a time with 0.1 s between them (a slow
    # backend); the binding polls every second, so its polls fall at every point of the
    # reads' cycle in turn. A poll that came during a read and gave way at once would
    # leave the binding unpolled for a whole interval, ten times in eleven.
    _, store, service = bindings_served(tmp_path, 1, FakeProvider(), interval=1)
    service.follow_up = False
    lock, polls, stop = service.locks["team-0"], counting_polls(service), threading.Event()

    def slow_reads() -> None:
        while not stop.is_set():
            with lock:
                time.sleep(1.0)
            time.sleep(0.1)

    def stop_after_the_first_sync() -> None:
        deadline = time.monotonic() + 60
        while not polls and time.monotonic() < deadline:
            time.sleep(0.05)
        threading.Thread(target=slow_reads, daemon=True).start()
        time.sleep(8)
        stop.set()
        service.stopping.set()

    serve_while(service, store, stop_after_the_first_sync, stop.set)
    # about 8 polls after the first sync; giving way, one or two
    after_first = polls.get("team-0", 0) - 1
    assert after_first >= 5, f"{after_first} polls in 8 s of 1 s intervals"


def test_follow_up_reads_far_past_their_time_are_dropped() -> None:
    # One read takes 2 s while 50 more come due: by then the status tick has read the
    # same resources, and reading them late would hold each binding's lock in turn.
    from nodus_gitops.follow_ups import FollowUps

    first, reads = threading.Event(), []

    def read(binding_id: str, _keys: list) -> None:
        reads.append(binding_id)
        if binding_id == "slow":
            first.set()
            time.sleep(2.0)

    follow_ups = FollowUps(read, stale_after=1.0)
    follow_ups.add("slow", [], [0.0])
    assert first.wait(10)
    for n in range(50):
        follow_ups.add(f"late-{n}", [], [0.0])
    deadline = time.monotonic() + 10
    while follow_ups.dropped < 50 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert reads == ["slow"] and follow_ups.dropped == 50
    follow_ups.add("on-time", [], [0.0])  # once caught up, reads come as before
    while reads[-1] != "on-time" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert reads == ["slow", "on-time"]
