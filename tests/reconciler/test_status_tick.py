"""The status tick of a binding whose resources have all finished reads nothing: with a
thousand bindings, a query each every two seconds was most of an idle reconciler's
work. One that still has a running resource reads it, until it finishes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from nodus_gitops.config import Binding, Settings
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.providers.base import FakeProvider
from nodus_gitops.state.store import Store
from nodus_gitops.wiring import build_service
from sqlalchemy import event

from tests.reconciler.test_scheduling import bare_repo


def test_a_tick_reads_only_while_something_is_unfinished(tmp_path: Path) -> None:
    bare_repo(tmp_path / "remote.git", "job-0")
    provider = FakeProvider()  # creates it Running
    binding = Binding(id="team", url=str(tmp_path / "remote.git"), path="manifests",
                      project="team")
    store = Store.open(None, tmp_path / "state")
    settings = Settings(state_dir=tmp_path / "state", instance="test", bindings=(binding,),
                        checks={"gitnotes": False})
    service = build_service(settings, store, provider_factory=lambda _name: provider)
    service.follow_up = False
    queries: list[str] = []
    try:
        assert service.reconcile("team").result == "applied"
        event.listen(store._engine, "before_cursor_execute",
                     lambda *args: queries.append(args[2]))
        service.refresh_binding("team")  # running: read from the backend
        assert queries and [op for op, _ in provider.calls].count("get") == 1
        key = ResourceKey("Job", "team", "job-0")
        provider.resources[key] = replace(provider.resources[key], phase="Succeeded")
        service.refresh_binding("team")  # it finished: recorded so
        assert store.get_resource(key).phase == "Succeeded"
        queries.clear()
        gets = [op for op, _ in provider.calls].count("get")
        service.refresh_binding("team")
        assert queries == [] and [op for op, _ in provider.calls].count("get") == gets
    finally:
        store.close()
