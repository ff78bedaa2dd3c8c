"""A sync never lies (issue 15): a stateful property-based test of the reconcile loop.

Hypothesis makes random commits to a small manifests repository served over smart HTTP
(create a Job, edit its scalar, list and mapping fields, rename a file, move a resource
to another file, delete one or all, flip `nodus.dev/on-change` and `nodus.dev/prune`,
commit an invalid file or one that touches no manifest), syncs each through the real Git
source and a real SQLite state store against a fake provider that raises at random, and
drops the store to restart. The machine keeps a model of what Git asks for. After every
step it checks what a user relies on. Every rule applies in every state (a rule on
a Job that does not exist creates it, one that cannot apply commits nothing), so that
Hypothesis can drop any step while shrinking.

1. the incremental plan equals the full plan of the same commit against the same state;
2. the recorded sync result agrees with what the provider saw (never applied or noop
   when a provider call failed, an action was blocked or the sync crashed);
3. the commit's sync check is success only when every planned action was applied;
4. the provider's resources equal the recorded inventory (keys and spec hashes);
5. no resource exists twice (no create of a resource that exists);
6. nothing outside the inventory is ever deleted;
7. dropping the store and restarting converges to the same inventory, nothing re-run
   (needs `reconciler.adoption`; the rule is not drawn until that module exists).

Profiles: `sync-machine-ci` (the default, sized for CI) and `sync-machine-long`, chosen
with NODUS_PROPERTY_PROFILE=long. They apply to this machine only.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import random
import shutil
import tempfile
import traceback
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from nodus_gitops.checks.model import CheckRun
from nodus_gitops.config import Binding, Settings
from nodus_gitops.desired import DesiredTree
from nodus_gitops.floor.errors import PermanentError, TransientError
from nodus_gitops.floor.identity import (
    ANNOTATION_ON_CHANGE,
    ANNOTATION_PRUNE,
    ANNOTATION_SPEC_HASH,
    ResourceKey,
)
from nodus_gitops.plan import Plan, plan, spec_hash
from nodus_gitops.providers.base import FakeProvider, Observed, Workload
from nodus_gitops.source import Backoff
from nodus_gitops.state.store import Store
from nodus_gitops.sync import BindingSync
from nodus_gitops.wiring import build_sync

from tests.fixtures_git import GitHttpServer, ManifestRepo, serve_git_http

settings.register_profile(
    "sync-machine-ci", max_examples=150, stateful_step_count=10, deadline=None,
    derandomize=False, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "sync-machine-long", max_examples=int(os.environ.get("NODUS_PROPERTY_EXAMPLES", 2000)),
    stateful_step_count=25, deadline=None, derandomize=False,
    suppress_health_check=[HealthCheck.too_slow])
PROFILE = ("sync-machine-long" if os.environ.get("NODUS_PROPERTY_PROFILE") == "long"
           else "sync-machine-ci")

BINDING = "team-a"
PROJECT = "team-a"
ROOT = "manifests"  # the binding's path in the repository
NAMES = ("a", "b", "c")
FILES = ("a.yaml", "b.yaml", "c.yaml", "jobs/x.yaml", "jobs/y.yaml")
INVALID_FILE = "bad.yaml"
COPY_FILE = "copy.yaml"  # a second definition of a Job: invalid while both exist
APPLIED = ("applied", "noop")  # the results a green check stands for
REFUSED = "CreateFailed"  # the phase of a resource whose create the backend refused
ADOPTION_BUILT = importlib.util.find_spec("nodus_gitops.adoption") is not None
# Faults armed for one sync: (operation, Job name) -> how the provider fails it; after a
# commit, None (no sync) or the faults of the sync that follows it.
Faults = dict[tuple[str, str], str]
After = Faults | None


def key(name: str) -> ResourceKey:
    return ResourceKey("Job", PROJECT, name)


# --- the provider: records what it saw, raises what the test asks ----------------------


class RecordingProvider(FakeProvider):
    """A FakeProvider whose handler raises the faults armed for the current sync, and
    which records every effect: creates of a resource that already exists (a re-run),
    deletes of resources outside the given inventory, and which calls failed in the end
    (the last attempt of an operation on a key raised)."""

    def __init__(self) -> None:
        super().__init__(self._handle)
        self.faults: dict[tuple[str, str], str] = {}
        self.attempts: dict[tuple[str, ResourceKey], int] = {}
        self.last_raised: dict[tuple[str, ResourceKey], Exception | None] = {}
        self.recreated: list[ResourceKey] = []
        self.deleted_outside: list[ResourceKey] = []
        self.inventory: set[ResourceKey] = set()  # what the store recorded before the sync

    def arm(self, faults: Faults, inventory: set[ResourceKey]) -> None:
        self.faults, self.inventory = dict(faults), set(inventory)
        self.attempts.clear()
        self.last_raised.clear()

    def failed_calls(self) -> list[str]:
        """`op key: error` for each operation whose last attempt raised."""
        return [f"{op} {k.name}: {e!r}" for (op, k), e in sorted(self.last_raised.items())
                if e is not None]

    def _handle(self, op: str, k: ResourceKey, _arg: Any) -> Observed | None:
        if op == "get":
            return None
        attempt = self.attempts.get((op, k), 0) + 1
        self.attempts[(op, k)] = attempt
        mode = self.faults.get((op, k.name))
        error: Exception | None = None
        if mode == "permanent":
            error = PermanentError(f"{op} {k.short} refused (test fault)")
        elif mode == "transient" or (mode == "transient-once" and attempt == 1):
            error = TransientError(f"{op} {k.short} unavailable (test fault)", delay=0)
        self.last_raised[(op, k)] = error
        if error is not None:
            raise error
        return None

    def create(self, workload: Workload, idempotency_key: str) -> Observed:
        if workload.key in self.resources:
            self.recreated.append(workload.key)
        return super().create(workload, idempotency_key)

    def delete(self, k: ResourceKey) -> None:
        if k not in self.inventory:
            self.deleted_outside.append(k)
        super().delete(k)


# --- the wiring: one BindingSync on a SQLite store, instrumented -----------------------


@dataclass
class PlanSeen:
    commit: str
    incremental: Plan
    full: Plan


class SyncRig:
    """A BindingSync on a real SQLite store and the real Git source, against `provider`,
    with the instrumentation the invariants read: every sync check posted (through the
    default git-notes poster), and for every plan made, the full plan of the same commit
    against the same state. Retries do not sleep and backoff is waited out by `reconcile`
    moving the sync's clock on."""

    def __init__(self, url: str, tmp: Path, provider: FakeProvider | None = None,
                 **binding: Any) -> None:
        self.url = url
        self.tmp = tmp
        self.provider = provider if provider is not None else FakeProvider()
        self.binding = Binding(id=BINDING, url=url, branch="main", path=ROOT, project=PROJECT,
                               **binding)
        self.now = 0.0  # the sync's monotonic clock
        self.wall = itertools.count()  # the store's clock: one second a reading
        self.checks: list[CheckRun] = []
        self.plans: list[PlanSeen] = []
        self.stores = 0
        self.store: Store
        self.sync: BindingSync
        self.open()

    def _store_clock(self) -> datetime:
        return datetime(2024, 1, 1, tzinfo=UTC) + timedelta(seconds=next(self.wall))

    def open(self) -> None:
        """A fresh state store (a new SQLite file) and a new BindingSync over it; the Git
        mirror stays, as it would on a restart that lost only `state.db`."""
        self.stores += 1
        self.store = Store.open(f"sqlite:///{self.tmp / f'state-{self.stores}.db'}",
                                clock=self._store_clock)
        sync = build_sync(Settings(state_dir=self.tmp, instance="test"), self.store,
                          self.binding, self.provider, backoff=Backoff(random.Random(0)),
                          clock=lambda: self.now)
        sync.applier.sleep = lambda _seconds: None
        poster = sync.reporter.poster
        post = poster.post
        poster.post = lambda run: (self.checks.append(run), post(run))[-1]
        plan_commit = sync.plan_commit

        def planned(tree: DesiredTree) -> Plan:
            inventory, observed = sync.inventory.state(tree.index)
            full = plan(tree.desired(), inventory, observed, sync.options)
            got = plan_commit(tree)
            self.plans.append(PlanSeen(tree.commit, got, full))
            return got

        sync.plan_commit = planned  # type: ignore[method-assign]
        self.sync = sync

    def restart(self) -> None:
        self.store.close()
        self.open()

    def close(self) -> None:
        self.store.close()

    def reconcile(self, force: bool = False) -> tuple[Any, BaseException | None]:
        """One poll, an hour after the last: (the report or None, what it raised)."""
        self.now += 3600
        try:
            return self.sync.reconcile_once(force=force), None
        except Exception as e:  # what the service would log as "sync crashed"
            return None, e

    def inventory(self) -> dict[ResourceKey, Any]:
        return {r.key: r for r in self.store.list_inventory(binding_id=BINDING)}

    def last_sync(self):
        return self.store.last_sync(BINDING)

    def sync_checks(self, commit: str) -> list[CheckRun]:
        """The sync checks posted for `commit` (pending ones left out), oldest first."""
        return [c for c in self.checks if c.commit == commit and c.context.endswith("/sync")
                and c.state.value != "pending"]


def crash_text(e: BaseException | None) -> str:
    """Where an exception came from (its last two frames in files) and what it says."""
    if e is None:
        return ""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if not f.filename.startswith("<")]
    return "".join(traceback.format_list(frames[-2:]) + traceback.format_exception_only(e))


# --- the model of what Git asks for ----------------------------------------------------


@dataclass
class JobModel:
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    cap: int | None = None  # spec.maxCostUSD in dollars
    timeout: str | None = None
    args: tuple[str, ...] = ()  # after `python3 -c pass`
    env: dict[str, str] = field(default_factory=dict)
    image: str = "python:3.12-slim"
    on_change: str | None = None
    prune_disabled: bool = False

    def manifest(self) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": self.name}
        if self.labels:
            metadata["labels"] = dict(self.labels)
        annotations = {}
        if self.on_change:
            annotations[ANNOTATION_ON_CHANGE] = self.on_change
        if self.prune_disabled:
            annotations[ANNOTATION_PRUNE] = "disabled"
        if annotations:
            metadata["annotations"] = annotations
        spec: dict[str, Any] = {"image": self.image,
                                "command": ["python3", "-c", "pass", *self.args]}
        if self.env:
            spec["env"] = dict(self.env)
        if self.cap is not None:
            spec["maxCostUSD"] = f"{self.cap}.00"
        if self.timeout:
            spec["timeout"] = self.timeout
        return {"apiVersion": "nodus.dev/v1", "kind": "Job", "metadata": metadata,
                "spec": spec}


INVALID_TEXTS = {
    "schema": "apiVersion: nodus.dev/v1\nkind: Job\nmetadata:\n  name: broken\nspec:\n"
              "  command: [python3, -c, pass]\n  timeout: 10x\n",
    "yaml": "apiVersion: nodus.dev/v1\nkind: Job\nmetadata: {name: [\n",
}

labels_st = st.dictionaries(st.sampled_from(["team", "tier"]), st.sampled_from(["x", "y"]),
                            max_size=2)
env_st = st.dictionaries(st.sampled_from(["A", "B"]), st.sampled_from(["1", "2"]), max_size=2)
args_st = st.lists(st.sampled_from(["x", "y", "z"]), max_size=3).map(tuple)
caps_st = st.sampled_from([None, 1, 2, 5])
timeouts_st = st.sampled_from([None, "10m", "1h", "2h"])
policies_st = st.sampled_from([None, "Reject", "Replace", "Ignore"])
faults_st = st.one_of(
    st.just({}),
    st.lists(st.tuples(st.tuples(st.sampled_from(["create", "patch", "delete"]),
                                 st.sampled_from(NAMES)),
                       st.sampled_from(["transient", "transient-once", "permanent"])),
             min_size=1, max_size=3).map(dict))  # no unique-key filter: shrinks well
sync_after_st = st.one_of(st.none(), faults_st)  # after a commit: no sync, or one
names_st = st.sampled_from(NAMES)
# What `edit` may change: field -> (JobModel attribute, the values it takes).
EDITS: dict[str, tuple[str, st.SearchStrategy[Any]]] = {
    "labels": ("labels", labels_st),
    "maxCostUSD": ("cap", caps_st),
    "timeout": ("timeout", timeouts_st),
    "image": ("image", st.sampled_from(["python:3.12-slim", "python:3.13-slim"])),
    "command": ("args", args_st),
    "env": ("env", env_st),
    "on-change": ("on_change", policies_st),
    "prune": ("prune_disabled", st.booleans()),
}
changes_st = st.one_of(*(st.tuples(st.just(f), values) for f, (_, values) in EDITS.items()))


# --- the machine -----------------------------------------------------------------------

_SERVER: dict[str, GitHttpServer] = {}


@pytest.fixture(autouse=True, scope="module")
def _served_repos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GitHttpServer]:
    """One smart-HTTP Git server for every example; each example has its own repo."""
    with serve_git_http(tmp_path_factory.mktemp("srv")) as server:
        _SERVER["http"] = server
        yield server
    _SERVER.clear()


class SyncMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        server = _SERVER["http"]
        self.tmp = Path(tempfile.mkdtemp(prefix="sync-machine-"))
        name = f"m-{uuid.uuid4().hex[:10]}"
        self.repo = ManifestRepo(server.root, name, self.tmp / "work")
        self.provider = RecordingProvider()
        self.rig = SyncRig(server.url_for(name), self.tmp, self.provider)
        # What Git asks for: file -> the Jobs in it (in order), and each Job's fields.
        self.files: dict[str, list[str]] = {}
        self.jobs: dict[str, JobModel] = {}
        self.invalid: str | None = None  # the invalid file's text, while it is committed
        # A copy of a Job in COPY_FILE (as when moving it in two commits): the tree is
        # invalid while the original exists; deleting the original leaves the copy.
        self.copy: JobModel | None = None
        self.on_disk: set[str] = set()
        self.notes = 0
        # The binding's folder holds a file that is no manifest, so that it exists even
        # when every manifest is deleted.
        self.repo.write(f"{ROOT}/README.md", "Jobs of team-a\n")
        self.repo.commit("start")
        self.repo.push()

    def teardown(self) -> None:
        self.rig.close()
        shutil.rmtree(self.repo.bare, ignore_errors=True)
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- commits ------------------------------------------------------------------------

    def _file_of(self, name: str) -> str:
        return next(f for f, names in self.files.items() if name in names)

    def _texts(self) -> dict[str, str]:
        texts = {path: "---\n".join(yaml.safe_dump(self.jobs[n].manifest(), sort_keys=False)
                                    for n in names)
                 for path, names in self.files.items() if names}
        if self.invalid is not None:
            texts[INVALID_FILE] = self.invalid
        if self.copy is not None:
            texts[COPY_FILE] = yaml.safe_dump(self.copy.manifest(), sort_keys=False)
        return texts

    def _tip_invalid(self) -> bool:
        return self.invalid is not None or self.copy is not None

    def _forget(self, name: str) -> None:
        """`name`'s manifest is removed from its file: a copy of it becomes the Job."""
        self.files[self._file_of(name)].remove(name)
        del self.jobs[name]
        if self.copy is not None and self.copy.name == name:
            self.jobs[name], self.copy = self.copy, None
            self.files[COPY_FILE] = [name]

    def _publish(self, message: str, sync_after: After = None) -> None:
        """Write the model's files, commit, push; then sync when asked."""
        self.files = {f: names for f, names in self.files.items() if names}
        texts = self._texts()
        for path in sorted(self.on_disk - set(texts)):
            self.repo.remove(f"{ROOT}/{path}")
        for path, text in texts.items():
            self.repo.write(f"{ROOT}/{path}", text)
        self.on_disk = set(texts)
        self.repo.commit(message)
        self.repo.push()
        if sync_after is not None:
            self._sync(sync_after)

    def _job(self, name: str) -> JobModel:
        """`name`'s model; a Job that does not exist yet is created in `<name>.yaml`."""
        if name not in self.jobs:
            self.jobs[name] = JobModel(name)
            self.files.setdefault(f"{name}.yaml", []).append(name)
        return self.jobs[name]

    @rule(name=names_st, path=st.sampled_from(FILES), cap=caps_st, labels=labels_st,
          sync_after=sync_after_st)
    def create_job(self, name: str, path: str, cap: int | None, labels: dict[str, str],
                   sync_after: After) -> None:
        """A new manifest for `name` in `path` (replacing its old one, if any; a copy of
        the old one stays a second definition)."""
        if name in self.jobs:
            self.files[self._file_of(name)].remove(name)
        self.jobs[name] = JobModel(name, cap=cap, labels=labels)
        self.files.setdefault(path, []).append(name)
        self._publish(f"create {name} in {path}", sync_after)

    @rule(name=names_st, change=changes_st, sync_after=sync_after_st)
    def edit(self, name: str, change: tuple[str, Any], sync_after: After) -> None:
        """Change one field of one Job: a label, a scalar of the spec (maxCostUSD up or
        down, timeout, image), a list (command) or mapping (env), an annotation."""
        field_name, value = change
        setattr(self._job(name), EDITS[field_name][0], value)
        self._publish(f"{field_name} of {name}", sync_after)

    @rule(old=st.sampled_from(FILES), new=st.sampled_from(FILES), sync_after=sync_after_st)
    def rename_file(self, old: str, new: str, sync_after: After) -> None:
        """`git mv` a manifest file (a commit that changes nothing when it cannot)."""
        if old in self.files and new not in self.files and new not in self.on_disk:
            self.repo.rename(f"{ROOT}/{old}", f"{ROOT}/{new}")
            self.on_disk = (self.on_disk - {old}) | {new}
            self.files[new] = self.files.pop(old)
        self._publish(f"rename {old} to {new}", sync_after)

    @rule(name=names_st, to=st.sampled_from(FILES), sync_after=sync_after_st)
    def move_resource(self, name: str, to: str, sync_after: After) -> None:
        """Move a Job's manifest to another file, in one commit."""
        if name in self.jobs:
            self.files[self._file_of(name)].remove(name)
        else:
            self.jobs[name] = JobModel(name)
        self.files.setdefault(to, []).append(name)
        self._publish(f"move {name} to {to}", sync_after)

    @rule(name=st.one_of(st.none(), names_st), sync_after=sync_after_st)
    def delete(self, name: str | None, sync_after: After) -> None:
        """Remove one Job's manifest, or (None) every manifest file, the copy too."""
        if name is None:
            self.files.clear()
            self.jobs.clear()
            self.copy = None
        elif name in self.jobs:
            self._forget(name)
        self._publish(f"delete {name or 'every Job'}", sync_after)

    @rule(kind=st.sampled_from(sorted(INVALID_TEXTS)), sync_after=sync_after_st)
    def commit_invalid(self, kind: str, sync_after: After) -> None:
        self.invalid = INVALID_TEXTS[kind]
        self._publish(f"invalid file ({kind})", sync_after)

    @rule(name=names_st, sync_after=sync_after_st)
    def copy_job(self, name: str, sync_after: After) -> None:
        """The first half of moving a Job in two commits: defined twice, invalid."""
        if name in self.jobs and COPY_FILE not in self.files:
            self.copy = replace(self.jobs[name])
        self._publish(f"copy {name} to {COPY_FILE}", sync_after)

    @rule(sync_after=sync_after_st)
    def fix_invalid(self, sync_after: After) -> None:
        self.invalid = self.copy = None
        self._publish("remove the invalid files", sync_after)

    @rule(sync_after=sync_after_st)
    def commit_no_manifest(self, sync_after: After) -> None:
        self.notes += 1
        self.repo.write("README.md", f"notes {self.notes}\n")
        self.repo.commit("touch no manifest")
        self.repo.push()
        if sync_after is not None:
            self._sync(sync_after)

    # -- syncs --------------------------------------------------------------------------

    @rule(faults=faults_st)
    def sync(self, faults: Faults) -> None:
        self._sync(faults)

    def _sync(self, faults: Faults, force: bool = False) -> None:
        """One poll with `faults` armed, then the invariants of a sync."""
        rig, provider = self.rig, self.provider
        before = rig.last_sync()
        provider.arm(faults, set(rig.inventory()))
        rig.plans.clear()
        rig.checks.clear()
        _, crash = rig.reconcile(force)
        failed = provider.failed_calls()
        provider.arm({}, set())
        row = rig.last_sync()
        new_row = row is not None and (before is None or row.id != before.id)
        crashed = crash_text(crash)

        # (1) The incremental plan is the full plan of the same commit and state.
        for seen in rig.plans:
            assert seen.incremental.to_dict(seen.commit) == seen.full.to_dict(seen.commit), \
                "(1) the incremental plan differs from the full plan"
            assert seen.incremental == seen.full, "(1) incremental plan != full plan"
        if not new_row:
            assert crash is None, f"a poll crashed without recording a sync:\n{crashed}"
            return
        assert row is not None
        binding = rig.store.get_binding(BINDING)
        blocked = [f"{a.key.name}: {a.reason}" for seen in rig.plans
                   for a in seen.incremental.actions if a.action == "blocked"]
        # (2) The recorded result agrees with what happened.
        assert row.result != "error" and crash is None, (
            f"(2) the sync crashed: recorded {row.result!r} {row.message!r}, "
            f"lastError {binding.last_error!r}\n{crashed}")
        if failed or blocked:
            assert row.result not in APPLIED, (
                f"(2) recorded {row.result!r} ({row.message!r}) although provider calls "
                f"failed {failed} or actions were blocked {blocked}")
        if self._tip_invalid():
            assert row.result == "invalid", f"(2) an invalid commit recorded {row.result!r}"
        invalid_rows = [s for s in rig.store.list_syncs(BINDING, limit=1000)
                        if s.commit == row.commit and s.result == "invalid"]
        assert len(invalid_rows) <= 1, \
            f"(2) the same invalid commit recorded {len(invalid_rows)} times"
        # (3) The commit's check is success only when every planned action was applied.
        checks = rig.sync_checks(row.commit)
        assert checks, "(3) a recorded sync posted no sync check"
        check = checks[-1]
        if check.state.value == "success":
            assert row.result in APPLIED and not failed and not blocked, (
                f"(3) the check says success ({check.title!r}) but the sync was "
                f"{row.result!r}, failed calls {failed}, blocked {blocked}")
        # The model: an applied commit means the inventory is what Git asks for.
        if row.result in APPLIED:
            inventory = rig.inventory()
            for name, job in self.jobs.items():
                record = inventory.get(key(name))
                assert record is not None, f"(model) applied, but {name} is not in inventory"
                if job.on_change == "Ignore":
                    continue  # a change ignored keeps what runs recorded (invariant 4)
                assert record.spec_hash == spec_hash(job.manifest()), \
                    f"(model) applied, but {name}'s recorded spec is not Git's"
            for k, record in inventory.items():
                if k.name not in self.jobs:
                    assert record.manifest.get("metadata", {}).get("annotations", {}).get(
                        ANNOTATION_PRUNE) == "disabled", \
                        f"(model) applied, but {k.name} is kept though removed from Git"

    # A rule only once `reconciler.adoption` exists (test_restart_rule_is_drawn says when
    # it is not). Not a precondition nor an assume: a rule that is never enabled turns
    # the shrinker's simplest choice (rules without arguments come first) into an
    # invalid example, and shrinking stalls.
    @(rule() if ADOPTION_BUILT else lambda f: f)
    def drop_store_and_restart(self) -> None:
        """Lose the state store, start again and sync: the new store adopts what the
        backend holds; nothing is created twice, nothing deleted, the same inventory."""
        # Settle on the old store first: the commit again, without faults, so that what
        # failed before (even permanently) is done now. (An invalid tip has nothing to
        # redo, and forcing would only judge it again.)
        self._sync({}, force=not self._tip_invalid())
        settled = {k: r.spec_hash for k, r in self.rig.inventory().items()}
        calls = len(self.provider.calls)
        self.rig.restart()
        self._sync({})
        effects = [c for c in self.provider.calls[calls:] if c[0] != "get"]
        assert not self.provider.recreated, \
            f"(7) after a restart, created again: {self.provider.recreated}"
        assert not any(op == "delete" for op, _ in effects), \
            f"(7) after a restart, deleted: {effects}"
        if not self._tip_invalid():
            after = {k: r.spec_hash for k, r in self.rig.inventory().items()}
            assert after == settled, f"(7) after a restart the inventory is {after}, " \
                f"was {settled}"

    # -- invariants after every step ----------------------------------------------------

    @invariant()
    def provider_matches_inventory(self) -> None:
        records = self.rig.store.list_inventory(binding_id=BINDING)
        assert len({r.key for r in records}) == len(records), "(5) a resource recorded twice"
        # A create the backend refused is recorded (to show it), as absent from it.
        refused = {r.key for r in records if r.phase == REFUSED}
        assert not refused & set(self.provider.resources), \
            f"(4) recorded as refused but on the backend: {sorted(refused)}"
        inventory = {r.key: r.spec_hash for r in records if r.key not in refused}
        live = {k: m["metadata"]["annotations"].get(ANNOTATION_SPEC_HASH)
                for k, m in self.provider.manifests.items()}
        assert set(inventory) == set(self.provider.resources), (
            f"(4) the provider holds {sorted(k.name for k in self.provider.resources)}, "
            f"the inventory {sorted(k.name for k in inventory)}")
        assert inventory == live, (
            f"(4) spec hashes differ: inventory {_short(inventory)}, provider {_short(live)}")

    @invariant()
    def nothing_twice_nothing_foreign(self) -> None:
        assert not self.provider.recreated, \
            f"(5) created again while it exists: {self.provider.recreated}"
        assert not self.provider.deleted_outside, \
            f"(6) deleted outside the inventory: {self.provider.deleted_outside}"


def _short(hashes: dict[ResourceKey, Any]) -> dict[str, Any]:
    return {k.name: h for k, h in sorted(hashes.items())}


TestSyncMachine = SyncMachine.TestCase
TestSyncMachine.settings = settings(settings.get_profile(PROFILE))


def test_restart_rule_is_drawn() -> None:
    """Says (as a skip) when the machine runs without its restart rule, invariant 7."""
    if not ADOPTION_BUILT:
        pytest.skip("reconciler.adoption does not exist yet: the machine does not drop "
                    "the store and restart (invariant 7)")

