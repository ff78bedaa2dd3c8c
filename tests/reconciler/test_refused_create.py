"""A create the backend refuses leaves the resource visible, with what happened, in
`get`, the JSON API and the dashboard, until a later commit's create succeeds."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from nodus_gitops.floor.errors import PermanentError
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.output import resource_object, resources_table
from nodus_gitops.providers.base import FakeProvider, Observed
from nodus_gitops.state.store import Store
from nodus_gitops.web.server import start_server

from tests.fixtures_git import ManifestRepo
from tests.reconciler.test_reconcile import World, job

DENIED = ResourceKey("Job", "team-a", "denied")


@pytest.fixture
def store(state_url: str):
    s = Store.open(state_url)
    yield s
    s.close()


def refusing_world(repo: ManifestRepo, store: Store, tmp: Path, message: str,
                   refusing: dict[str, bool] | None = None) -> World:
    """ok.yaml and denied.yaml pushed and synced, the backend refusing to create `denied`
    with `message` (while `refusing["on"]`, when given)."""
    def handler(op, key, arg):
        if op == "create" and key == DENIED and (refusing is None or refusing["on"]):
            raise PermanentError(message)
        return None

    world = World(repo, store, tmp)
    world.provider = FakeProvider(handler)
    world.service.syncs["team-a"].applier.provider = world.provider
    world.push({"ok.yaml": job("ok"), "denied.yaml": job("denied")})
    return world


def test_a_refused_create_shows_until_it_applies(manifest_repo: ManifestRepo, store,
                                                 tmp_path: Path) -> None:
    refusing = {"on": True}
    world = refusing_world(manifest_repo, store, tmp_path, "Job denied already exists "
                           "(created with another idempotency key)", refusing)
    report = world.sync()
    assert report.result == "partial" and "1 failed" in report.message

    record = store.get_resource(DENIED)
    assert record is not None and (record.phase, record.reason) == ("CreateFailed",
                                                                     "CreateFailed")
    assert "another idempotency key" in record.message and record.fix
    table = resources_table(store.list_inventory())
    assert "denied" in table and "CreateFailed" in table
    assert resource_object(record)["phase"] == "CreateFailed"

    stop = start_server(world.service, "127.0.0.1:0")
    host, port = stop.address  # type: ignore[attr-defined]
    try:
        with httpx.Client(base_url=f"http://{host}:{port}", timeout=10) as http:
            api = http.get("/api/v1/resources/Job/team-a/denied").json()
            assert api["phase"] == "CreateFailed", api
            assert "another idempotency key" in str(api)
            page = http.get("/resources").text
            assert "denied" in page and "CreateFailed" in page
    finally:
        stop()  # type: ignore[operator]

    # Nothing new on the branch: the commit is judged, the refusal is not retried in a loop.
    assert world.sync().result == "unchanged"
    # The backend is fixed; the next commit creates it, and it reads as any other run.
    refusing["on"] = False
    world.push({"other.yaml": job("other")}, "unrelated change")
    report = world.sync()
    assert report.result == "applied", report.message
    assert {a.key.name: a.action.value for a in report.plan.actions}["denied"] == "create"
    record = store.get_resource(DENIED)
    assert record.phase == "Running" and record.provider_id
    assert world.backend() == {"ok", "denied", "other"}


def test_a_refused_create_removed_from_git_goes_without_a_trace(manifest_repo, store,
                                                                tmp_path: Path) -> None:
    world = refusing_world(manifest_repo, store, tmp_path, "403 forbidden: project quota")
    world.sync()
    world.push({"denied.yaml": None}, "drop it")
    report = world.sync()
    assert report.result == "applied", report.message
    assert store.get_resource(DENIED) is None
    assert {k.name for k in world.provider.resources} == {"ok"}


def test_a_refused_name_held_by_another_owner_is_never_deleted(manifest_repo, store,
                                                               tmp_path: Path) -> None:
    """The backend refused the create because someone else holds that name: removing the
    manifest forgets the record and never touches what the other owner runs."""
    world = refusing_world(manifest_repo, store, tmp_path, "Job denied already exists "
                           "(created with another idempotency key)")
    assert world.sync().result == "partial"
    world.provider.resources[DENIED] = Observed(DENIED, "theirs-1", "Running")  # the other's
    world.push({"denied.yaml": None}, "drop it")
    report = world.sync()
    assert report.result == "applied", report.message
    assert ("delete", DENIED) not in world.provider.calls
    assert world.provider.resources[DENIED].provider_id == "theirs-1"
    assert store.get_resource(DENIED) is None


def test_a_refused_create_never_overwrites_another_bindings_record(store) -> None:
    from nodus_gitops.apply import Applier, ApplyContext
    from nodus_gitops.plan import Desired, plan
    from nodus_gitops.state.records import InventoryRecord

    manifest = {"apiVersion": "nodus.dev/v1", "kind": "Job", "metadata": {"name": "denied"},
                "spec": {"command": ["true"]}}
    store.upsert_binding("bx", "https://h/r.git", "main", "x", "team-a")
    store.upsert_binding("by", "https://h/r.git", "main", "y", "team-a")
    store.upsert_resource(InventoryRecord(DENIED, "bx", manifest, "h1", phase="Running",
                                          provider_id="bx-1"))

    def refuse(op, key, arg):
        if op == "create":
            raise PermanentError("already exists")
        return None

    applier = Applier(store, FakeProvider(refuse))
    changes = applier.apply(plan([Desired.of(DENIED, manifest, "y/denied.yaml")], []),
                            ApplyContext("by", "team-a", "test", "https://h/r.git", "c1"))
    assert changes.failed
    record = store.get_resource(DENIED)
    assert (record.binding_id, record.phase, record.provider_id) == ("bx", "Running", "bx-1")
