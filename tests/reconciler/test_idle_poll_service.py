"""`Service.run` and idle polls' times: while it runs, a poll that finds the applied tip
again makes no durable commit of its own; its time is shown at once by the service's
store (the dashboard, /readyz, metrics), written in one batch on the service's tick, and
what is held at a normal stop is written before the service returns."""

from __future__ import annotations

import threading
import time
from datetime import datetime
from pathlib import Path

from nodus_gitops.config import Binding, Settings
from nodus_gitops.floor.results import SyncResult
from nodus_gitops.providers.base import FakeProvider
from nodus_gitops.state.store import Store
from nodus_gitops.wiring import build_service
from sqlalchemy import event

from tests.reconciler.test_scheduling import bare_repo

WAIT = 60  # seconds: a deadline for what must happen, not a measure of how fast


def stored_polls(state: Path) -> dict[str, datetime | None]:
    """last_poll_at of each binding as the database holds it (another process's view)."""
    with Store.open(None, state, read_only=True) as other:
        return {b.id: b.last_poll_at for b in other.list_bindings()}


def test_idle_polls_are_shown_at_once_batched_on_the_tick_and_written_at_stop(
        tmp_path: Path) -> None:
    names = ["team-a", "team-b"]
    for name in names:
        bare_repo(tmp_path / "remotes" / f"{name}.git", f"job-{name}")
    bindings = tuple(Binding(id=n, url=str(tmp_path / "remotes" / f"{n}.git"),
                             path="manifests", project=n, interval=1) for n in names)
    state = tmp_path / "state"
    store = Store.open(None, state)
    settings = Settings(state_dir=state, instance="test", bindings=bindings,
                        checks={"gitnotes": False})
    service = build_service(settings, store, provider_factory=lambda _n: FakeProvider())
    service.follow_up = False
    reconcile = service.reconcile
    idle: dict[str, int] = {n: 0 for n in names}
    shown: list[tuple[dict[str, datetime | None], dict[str, datetime | None]]] = []
    done = threading.Event()

    def counted(binding_id: str, **options: object):
        report = reconcile(binding_id, **options)
        if report is not None and report.result == SyncResult.UNCHANGED:
            idle[binding_id] += 1
        return report

    service.reconcile = counted  # what the scheduler calls

    def watch() -> None:
        # Idle polls happen; a later tick writes their times in one batch, which
        # another process then reads.
        deadline = time.monotonic() + WAIT
        while min(idle.values()) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        here = {b.id: b.last_poll_at for b in store.list_bindings()}
        while time.monotonic() < deadline:
            there = stored_polls(state)
            if all(there[n] is not None and there[n] >= here[n] for n in names):
                shown.append((here, there))
                break
            time.sleep(0.1)
        done.set()
        service.stopping.set()

    threading.Thread(target=watch, daemon=True).start()
    try:
        service.run()
        # What the service's store showed last is in the database after the stop.
        last = {b.id: b.last_poll_at for b in store.list_bindings()}
        assert stored_polls(state) == last
        # After the stop, a poll is written at once again (one-off use of the store).
        assert store.flush_polls() == 0
        store.get_binding("team-a")
        seen = store.get_binding("team-a").last_seen_commit
        store.record_poll("team-a", seen, None)
        assert stored_polls(state)["team-a"] == store.get_binding("team-a").last_poll_at
    finally:
        store.close()
    assert done.is_set() and shown, f"idle polls {idle}: their times were never written"


def test_idle_polls_make_no_commit_each(tmp_path: Path) -> None:
    bare_repo(tmp_path / "remotes" / "team-a.git", "job-a")
    binding = Binding(id="team-a", url=str(tmp_path / "remotes" / "team-a.git"),
                      path="manifests", project="team-a", interval=600)
    state = tmp_path / "state"
    store = Store.open(None, state)
    settings = Settings(state_dir=state, instance="test", bindings=(binding,),
                        checks={"gitnotes": False})
    service = build_service(settings, store, provider_factory=lambda _n: FakeProvider())
    service.follow_up = False
    try:
        assert service.reconcile("team-a").result == SyncResult.APPLIED
        store.defer_poll_times()  # as `run` does
        commits: list[int] = []
        event.listen(store._engine, "commit", lambda _c: commits.append(1))
        for _ in range(5):
            assert service.reconcile("team-a").result == SyncResult.UNCHANGED
        assert commits == []
        polled = store.get_binding("team-a").last_poll_at
        service.write_poll_times()
        assert len(commits) == 1
        assert stored_polls(state)["team-a"] == polled
    finally:
        store.close()
