"""The reconcile loop end to end: a bare repo served over smart HTTP on 127.0.0.1, real
pushes, the real state store (SQLite and PostgreSQL), and an in-memory provider."""

from __future__ import annotations

from pathlib import Path

import pytest
from nodus_gitops.config import Binding, Settings
from nodus_gitops.floor.identity import LABEL_MANAGED_BY, ResourceKey
from nodus_gitops.providers.base import FakeProvider, Observed
from nodus_gitops.state.store import Store
from nodus_gitops.wiring import build_service

from tests.fixtures_git import ManifestRepo


def job(name: str, extra_spec: str = "", annotations: str = "") -> str:
    meta = f"  annotations:\n{annotations}" if annotations else ""
    return (f"apiVersion: nodus.dev/v1\nkind: Job\nmetadata:\n  name: {name}\n{meta}spec:\n"
            f"  image: python:3.12-slim\n  command: [python3, -c, pass]\n{extra_spec}")


@pytest.fixture
def store(state_url: str):
    """The real state store, once on SQLite and once on PostgreSQL."""
    s = Store.open(state_url)
    yield s
    s.close()


class World:
    """A repo, a provider, a store and the service reconciling them."""

    def __init__(self, repo: ManifestRepo, store: Store, tmp: Path, **binding) -> None:
        self.repo = repo
        self.store = store
        self.provider = FakeProvider()
        self.binding = Binding(id="team-a", url=repo.push_url, branch="main", path="manifests",
                               project="team-a", **binding)
        settings = Settings(state_dir=tmp / "state", instance="test", bindings=(self.binding,))
        self.service = build_service(settings, store, provider_factory=lambda _name: self.provider)

    def push(self, files: dict[str, str | None], message: str = "change") -> str:
        for path, text in files.items():
            if text is None:
                self.repo.remove(f"manifests/{path}")
            else:
                self.repo.write(f"manifests/{path}", text)
        sha = self.repo.commit(message)
        self.repo.push()
        return sha

    def sync(self):
        report = self.service.reconcile("team-a")
        assert report is not None
        return report

    def actions(self, report) -> dict[str, str]:
        return {a.key.name: a.action.value for a in report.plan.actions}

    def backend(self) -> set[str]:
        return {k.name for k in self.provider.resources}


@pytest.fixture
def world(manifest_repo: ManifestRepo, store: Store, tmp_path: Path) -> World:
    return World(manifest_repo, store, tmp_path)


def test_add_change_rename_delete(world: World) -> None:
    sha = world.push({"a.yaml": job("a"), "b.yaml": job("b", '  maxCostUSD: "1.00"\n')})
    report = world.sync()
    assert report.result == "applied" and report.commit == sha
    assert world.actions(report) == {"a": "create", "b": "create"}
    assert world.backend() == {"a", "b"}
    created = world.provider.manifests[ResourceKey("Job", "team-a", "a")]
    assert created["metadata"]["labels"][LABEL_MANAGED_BY] == "nodus-gitops"
    assert world.store.get_binding("team-a").last_applied_commit == sha

    # Nothing new: no sync record, nothing called but status reads.
    calls = len(world.provider.calls)
    assert world.sync().result == "unchanged"
    assert all(op == "get" for op, _ in world.provider.calls[calls:])

    # Raise the cap: patched in place.
    world.push({"b.yaml": job("b", '  maxCostUSD: "2.00"\n')})
    report = world.sync()
    assert world.actions(report)["b"] == "patch"
    assert ("patch", ResourceKey("Job", "team-a", "b")) in world.provider.calls

    # Rename a file: same resource, nothing re-created, the inventory follows the file.
    world.repo.rename("manifests/a.yaml", "manifests/jobs/a.yaml")
    world.repo.commit("move")
    world.repo.push()
    report = world.sync()
    assert world.actions(report)["a"] == "noop"
    assert world.store.get_resource(ResourceKey("Job", "team-a", "a")).source_file == \
        "manifests/jobs/a.yaml"
    assert [op for op, _ in world.provider.calls].count("create") == 2

    # Delete a manifest: pruned.
    world.push({"b.yaml": None})
    report = world.sync()
    assert world.actions(report)["b"] == "delete"
    assert world.backend() == {"a"}
    assert world.store.get_resource(ResourceKey("Job", "team-a", "b")) is None


def test_invalid_commit_applies_nothing(world: World) -> None:
    world.push({"a.yaml": job("a")})
    world.sync()
    good = world.store.get_binding("team-a").last_applied_commit
    world.push({"b.yaml": job("b"), "bad.yaml": job("bad", "  timeout: 10x\n")})
    report = world.sync()
    assert report.result == "invalid"
    assert any('"10x" is not a duration' in p.message and p.file == "manifests/bad.yaml"
               and p.line == 8 for p in report.problems)
    assert world.backend() == {"a"}  # b was valid but the commit is all or nothing
    assert world.store.get_binding("team-a").last_applied_commit == good
    assert world.store.last_sync("team-a").result == "invalid"
    # Fixing it applies the whole commit.
    world.push({"bad.yaml": job("bad")})
    assert world.sync().result == "applied"
    assert world.backend() == {"a", "b", "bad"}


def test_a_resource_moved_in_two_commits_stays(world: World) -> None:
    """Copy to a new file (invalid: defined twice), then delete the old file: the
    resource was never meant to go, so nothing is deleted."""
    world.push({"a.yaml": job("x"), "keep.yaml": job("k")})
    assert world.sync().result == "applied"
    world.push({"b.yaml": job("x")}, "copy x to b.yaml")
    assert world.sync().result == "invalid"
    world.push({"a.yaml": None}, "drop the old copy")
    report = world.sync()
    assert "delete" not in world.actions(report).values()
    assert world.backend() == {"x", "k"}
    record = world.store.get_resource(ResourceKey("Job", "team-a", "x"))
    assert record is not None and record.source_file == "manifests/b.yaml"


def test_blocked_cases(world: World) -> None:
    world.push({"capped.yaml": job("capped", '  maxCostUSD: "1.00"\n'),
                "img.yaml": job("img"),
                "kept.yaml": job("kept", annotations="    nodus.dev/prune: disabled\n"),
                "other.yaml": job("other")})
    world.sync()
    world.push({"capped.yaml": job("capped", '  maxCostUSD: "0.50"\n'),
                "img.yaml": job("img", "  workingDir: /src\n"),
                "kept.yaml": None,
                "new.yaml": job("new")})
    report = world.sync()
    actions = {a.key.name: a for a in report.plan.actions}
    assert report.result == "blocked"
    assert actions["capped"].action == "blocked"
    assert "the cap can only be raised" in actions["capped"].reason
    assert actions["img"].action == "blocked" and "nodus.dev/on-change" in actions["img"].reason
    assert actions["kept"].action == "blocked" and "prune: disabled" in actions["kept"].reason
    assert actions["new"].action == "create"  # the rest of the plan still applies
    assert world.backend() == {"capped", "img", "kept", "other", "new"}


def test_replace_policy_recreates(world: World) -> None:
    replace = "    nodus.dev/on-change: Replace\n"
    world.push({"a.yaml": job("a", annotations=replace)})
    world.sync()
    world.push({"a.yaml": job("a", "  workingDir: /src\n", annotations=replace)})
    report = world.sync()
    assert world.actions(report)["a"] == "replace"
    ops = [op for op, k in world.provider.calls if k.name == "a"]
    assert ops.count("create") == 2 and "delete" in ops
    assert world.provider.manifests[ResourceKey("Job", "team-a", "a")]["spec"]["workingDir"] \
        == "/src"


def test_prune_guards(manifest_repo: ManifestRepo, store: Store, tmp_path: Path) -> None:
    world = World(manifest_repo, store, tmp_path)
    world.push({f"j{i}.yaml": job(f"j{i}") for i in range(12)})
    world.sync()
    # Twelve deletions exceed maxDeletions 10: refused, and the backend keeps them.
    world.push({"keep.yaml": job("keep"), **{f"j{i}.yaml": None for i in range(12)}})
    report = world.sync()
    assert report.result == "blocked" and len(world.backend()) == 13
    assert all("maxDeletions (10)" in a.reason for a in report.plan.blocked)
    # An empty desired set is refused without allowEmpty.
    world.push({"keep.yaml": None})
    report = world.sync()
    assert any("allowEmpty" in a.reason for a in report.plan.blocked)
    assert "keep" in world.backend()


def test_allow_empty_and_larger_blast_radius(manifest_repo: ManifestRepo, store: Store,
                                             tmp_path: Path) -> None:
    world = World(manifest_repo, store, tmp_path, allow_empty=True, max_deletions=20)
    world.push({f"j{i}.yaml": job(f"j{i}") for i in range(12)})
    world.sync()
    world.push({f"j{i}.yaml": None for i in range(12)})
    assert world.sync().result == "applied"
    assert world.backend() == set()


def test_finished_job_removed_by_ttl_is_not_rerun(world: World) -> None:
    world.push({"a.yaml": job("a", "  ttlSecondsAfterFinished: 1\n")})
    world.sync()
    key = ResourceKey("Job", "team-a", "a")
    world.provider.resources[key] = Observed(key, "fake-1", "Succeeded")
    world.service.syncs["team-a"].refresh()
    assert world.store.get_resource(key).phase == "Succeeded"
    del world.provider.resources[key]  # the backend's TTL removed it
    world.push({"other.yaml": job("other")})
    report = world.sync()
    assert "a" not in world.actions(report)  # in sync: only counted
    assert [op for op, k in world.provider.calls if k == key].count("create") == 1


def test_force_push_unrelated_history(world: World) -> None:
    world.push({"a.yaml": job("a"), "b.yaml": job("b")})
    world.sync()
    world.repo.reset_hard_to_new_history({"manifests/b.yaml": job("b"),
                                          "manifests/c.yaml": job("c")})
    world.repo.push(force=True)
    report = world.sync()
    assert world.actions(report) == {"a": "delete", "c": "create"}
    assert report.changes.summary()["unchanged"] == 1  # b
    assert world.backend() == {"b", "c"}


def test_unreachable_remote_keeps_last_good_state(world: World) -> None:
    world.push({"a.yaml": job("a")})
    world.sync()
    world.service.syncs["team-a"].source._repo.remotes.set_url("origin",
                                                               "http://127.0.0.1:9/nope.git")
    report = world.sync()
    assert report.result == "error" and "cannot reach" in report.message
    binding = world.store.get_binding("team-a")
    assert binding.last_error and "cannot reach" in binding.last_error
    assert world.backend() == {"a"}


def test_transient_errors_are_retried_permanent_recorded(manifest_repo, store, tmp_path):
    from nodus_gitops.floor.errors import PermanentError, TransientError

    failures = {"flaky": 2}

    def handler(op, key, arg):
        if op == "create" and key.name == "flaky" and failures["flaky"] > 0:
            failures["flaky"] -= 1
            raise TransientError("503 from the backend", delay=0)
        if op == "create" and key.name == "denied":
            raise PermanentError("403 forbidden: project quota")
        return None

    world = World(manifest_repo, store, tmp_path)
    world.provider = FakeProvider(handler)
    world.service.syncs["team-a"].applier.provider = world.provider
    world.service.syncs["team-a"].applier.sleep = lambda _s: None
    world.push({"flaky.yaml": job("flaky"), "denied.yaml": job("denied")})
    report = world.sync()
    assert report.result == "partial"
    assert world.backend() == {"flaky"}
    [failed] = report.changes.failed
    assert failed.action.key.name == "denied" and "403" in failed.error and not failed.transient
    events = world.store.list_events(ResourceKey("Job", "team-a", "denied"))
    assert any("403" in e.message for e in events)


def test_plan_is_identical_for_identical_inputs(world: World) -> None:
    world.push({f"j{i}.yaml": job(f"j{i}") for i in range(5)})
    sync = world.service.syncs["team-a"]
    head = sync.source.fetch()
    tree = sync.read_tree(head)
    assert sync.plan_commit(tree).to_json(head) == sync.plan_commit(tree).to_json(head)


def test_incremental_plan_matches_the_full_plan(world: World, monkeypatch) -> None:
    """After the first sync only changed keys are planned again; the answer must be what
    planning everything gives."""
    import random

    from nodus_gitops.plan import plan as full_plan

    rng = random.Random(7)
    caps = {f"j{i}": 1 for i in range(30)}
    world.push({f"{n}.yaml": job(n, f'  maxCostUSD: "{c}.00"\n') for n, c in caps.items()})
    world.sync()
    sync = world.service.syncs["team-a"]
    for round_ in range(6):
        files: dict[str, str | None] = {}
        for name in rng.sample(sorted(caps), 4):
            move = rng.choice(["raise", "lower", "remove", "image"])
            if move == "raise":
                caps[name] += 1
                files[f"{name}.yaml"] = job(name, f'  maxCostUSD: "{caps[name]}.00"\n')
            elif move == "lower":
                files[f"{name}.yaml"] = job(name, '  maxCostUSD: "0.10"\n')
            elif move == "remove":
                files[f"{name}.yaml"] = None
                del caps[name]
            else:
                files[f"{name}.yaml"] = job(name, f'  maxCostUSD: "{caps[name]}.00"\n'
                                            "  workingDir: /x\n")
        files[f"n{round_}.yaml"] = job(f"n{round_}")
        caps[f"n{round_}"] = 1
        world.push(files, f"round {round_}")
        head = sync.source.fetch()
        tree = sync.read_tree(head)
        assert tree.touched is not None  # read incrementally
        inventory, observed = sync.inventory.state()
        expected = full_plan(tree.desired(), inventory, observed, sync.options)
        sizes: list[int] = []
        monkeypatch.setattr("nodus_gitops.sync.plan", lambda d, *a, sizes=sizes, **kw: sizes.append(
            len(d)) or full_plan(d, *a, **kw))
        got = sync.plan_commit(tree)
        monkeypatch.undo()
        if round_ > 0:  # the first plan after a start is a full one
            assert sizes and sizes[0] < len(tree.index)  # it did plan only a subset
        assert got.to_json(head) == expected.to_json(head)
        world.sync()


def test_a_trigger_during_a_running_sync_is_not_dropped(world: World) -> None:
    import threading
    import time

    world.push({"a.yaml": job("a")})
    lock = world.service.locks["team-a"]
    lock.acquire()  # a sync (or refresh) is running
    assert world.service.trigger("team-a")
    assert world.service.trigger("team-a")  # a second push meanwhile: one run covers both
    threading.Timer(0.3, lock.release).start()
    deadline = time.monotonic() + 20
    while world.backend() != {"a"}:
        assert time.monotonic() < deadline, "the triggered sync never ran"
        time.sleep(0.05)
    assert [op for op, _ in world.provider.calls].count("create") == 1


def test_a_stopping_service_closes_each_backend_once(manifest_repo: ManifestRepo, store: Store,
                                                      tmp_path: Path) -> None:
    world = World(manifest_repo, store, tmp_path)
    world.push({"a.yaml": job("a")})
    world.sync()
    world.service.stopping.set()  # as a first SIGTERM does: drain, then stop
    world.service.run()
    assert world.provider.closed
