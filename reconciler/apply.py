"""Apply: executes a Plan through a provider, each effect through the intent journal.

Before each provider call an intent (action, resource, spec hash, idempotency key, and
everything needed to finish the job) is committed; after the call the inventory is
updated and the intent marked done. A process killed anywhere in between leaves a
pending intent, which `resolve_pending` finishes before anything else runs, by asking
the provider what exists. Each action yields an Outcome value; nothing raises mid-batch.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple

from nodus_gitops import failpoints
from nodus_gitops.floor.errors import NotFoundError, ProviderError, TransientError
from nodus_gitops.floor.identity import (
    ANNOTATION_SOURCE_COMMIT,
    ANNOTATION_SOURCE_FILE,
    ANNOTATION_SOURCE_REPO,
    ANNOTATION_SPEC_HASH,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    MANAGED_BY_VALUE,
    ResourceKey,
)
from nodus_gitops.floor.phases import FIXES, Phase, Reason, is_terminal
from nodus_gitops.floor.results import ActionType, JournalOp
from nodus_gitops.floor.retry import RetryPolicy
from nodus_gitops.plan import Action, Plan, merge_patch
from nodus_gitops.providers.base import Observed, Provider, Workload
from nodus_gitops.state.records import IntentRecord, InventoryRecord
from nodus_gitops.state.store import Store


@dataclass(frozen=True)
class ApplyContext:
    """Who applies what: the binding, its project, this instance, the commit."""

    binding_id: str
    project: str
    instance: str
    repo: str
    commit: str
    sync_id: int | None = None


# Transient provider errors: 4 attempts, equal-jitter backoff from 0.5 s doubling up to
# 30 s; a backend's Retry-After is honoured, capped at 30 s.
PROVIDER_RETRY = RetryPolicy(attempts=4, base_delay=0.5, max_delay=30.0)


class Refreshed(NamedTuple):
    """What a status refresh changed in the inventory."""

    changed: list[ResourceKey]
    missing: list[ResourceKey]  # unfinished, and gone from the backend


@dataclass(frozen=True)
class Outcome:
    action: Action
    ok: bool
    error: str | None = None
    transient: bool = False
    observed: Observed | None = None


@dataclass
class ChangeSet:
    """What one apply did, grouped as people read it."""

    outcomes: list[Outcome] = field(default_factory=list)
    unchanged: int = 0  # in sync, with no action in the plan

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.ok]

    def summary(self) -> dict[str, int]:
        counts = {"created": 0, "patched": 0, "replaced": 0, "deleted": 0, "unchanged": 0,
                  "blocked": 0, "failed": 0}
        names = {ActionType.CREATE: "created", ActionType.PATCH: "patched",
                 ActionType.REPLACE: "replaced", ActionType.DELETE: "deleted",
                 ActionType.NOOP: "unchanged", ActionType.BLOCKED: "blocked"}
        for o in self.outcomes:
            counts[names[o.action.action] if o.ok else "failed"] += 1
        counts["unchanged"] += self.unchanged
        return counts


def idempotency_key(ctx: ApplyContext, action: str, key: ResourceKey, spec_hash: str,
                    salt: str = "") -> str:
    # The instance too: two instances fed by one repository never share a create.
    raw = f"{ctx.instance}\0{ctx.binding_id}\0{ctx.commit}\0{action}\0{key}\0{spec_hash}"
    raw += f"\0{salt}" if salt else ""
    return hashlib.sha256(raw.encode()).hexdigest()[:32]


def workload_for(manifest: dict[str, Any], key: ResourceKey, spec_hash: str, file: str,
                 ctx: ApplyContext) -> Workload:
    """The manifest as created: Git's manifest plus the ownership labels and annotations."""
    metadata = dict(manifest.get("metadata", {}))
    metadata["labels"] = {**metadata.get("labels", {}), LABEL_MANAGED_BY: MANAGED_BY_VALUE,
                          LABEL_INSTANCE: ctx.instance}
    metadata["annotations"] = {
        **metadata.get("annotations", {}), ANNOTATION_SOURCE_REPO: ctx.repo,
        ANNOTATION_SOURCE_COMMIT: ctx.commit, ANNOTATION_SOURCE_FILE: file,
        ANNOTATION_SPEC_HASH: spec_hash,
    }
    return Workload(key, {**manifest, "metadata": metadata}, spec_hash)


def _key_of(step: _Step, ctx: ApplyContext) -> str:
    return idempotency_key(ctx, step.op, step.action.key, step.spec_hash,
                           step.payload.get("salt", ""))


@dataclass
class _Step:
    """One provider call of an action (a replace is a delete step, then a create step)."""

    action: Action
    op: str  # create | patch | delete
    payload: dict[str, Any]
    spec_hash: str
    intent_id: int = 0
    skip: bool = False  # this very intent was carried out before (a re-run of the commit)
    observed: Observed | None = None
    error: ProviderError | None = None


@dataclass
class _Results:
    """What a chunk's provider calls did, written to the store together."""

    upserts: list[InventoryRecord] = field(default_factory=list)
    removed: list[ResourceKey] = field(default_factory=list)
    intents: list[tuple[int, bool, dict[str, Any]]] = field(default_factory=list)
    events: list[tuple[ResourceKey, str, str, str]] = field(default_factory=list)

    def write(self, store: Store) -> None:
        store.upsert_resources(self.upserts)
        # A replace deletes then creates under one key: the new record stays.
        written = {r.key for r in self.upserts}
        store.remove_resources([k for k in self.removed if k not in written])
        store.finish_intents(self.intents)
        store.add_events(self.events)


EFFECTS = {ActionType.CREATE: (JournalOp.CREATE,), ActionType.PATCH: (JournalOp.PATCH,),
           ActionType.REPLACE: (JournalOp.DELETE, JournalOp.CREATE),
           ActionType.DELETE: (JournalOp.DELETE,)}
# Intents are journaled, and results recorded, in chunks: each chunk's intents commit in
# one transaction before its first provider call, and its results in one after the last.
CHUNK = 200


class Applier:
    """Runs plans for one binding through one provider, recording into the store."""

    def __init__(self, store: Store, provider: Provider, *, retry: RetryPolicy = PROVIDER_RETRY,
                 sleep: Callable[[float], None] = time.sleep,
                 rng: random.Random | None = None,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC),
                 fence: Callable[[], bool] = lambda: True) -> None:
        self.clock = clock
        self.fence = fence
        self.store = store
        self.provider = provider
        self.retry = retry
        self.sleep = sleep
        self.rng = rng or random.Random()

    # --- the batch -----------------------------------------------------------------------

    def apply(self, plan: Plan, ctx: ApplyContext) -> ChangeSet:
        changes = ChangeSet(unchanged=plan.unchanged)
        effects = [a for a in plan.actions if a.action in EFFECTS and not a.forget]
        failed: dict[Action, ProviderError] = {}
        for i in range(0, len(effects), CHUNK):
            if not self.fence():  # another replica holds the binding now: stop here
                lost = TransientError("this replica lost the binding's lease")
                failed.update({a: lost for a in effects[i:]})
                break
            failed.update(self._apply_chunk(effects[i:i + CHUNK], ctx))
        unchanged = [a for a in plan.actions if a.action == ActionType.NOOP and a.record]
        forgotten = [a.key for a in plan.actions if a.forget]
        if unchanged or forgotten:
            with self.store.batch():
                for action in unchanged:
                    self._record_unchanged(action, ctx)
                self.store.remove_resources(forgotten)
        for action in plan.actions:
            error = failed.get(action)
            changes.outcomes.append(Outcome(action, ok=True) if error is None else Outcome(
                action, ok=False, error=str(error), transient=isinstance(error, TransientError)))
        return changes

    def _steps(self, action: Action, ctx: ApplyContext) -> list[_Step]:
        base = {"file": action.file, "commit": ctx.commit, "repo": ctx.repo,
                "instance": ctx.instance}
        steps = []
        for op in EFFECTS[action.action]:
            payload = dict(base)
            spec_hash = action.spec_hash
            if op in ("create", "patch"):
                payload["manifest"] = action.manifest
            if action.heal:  # a new run of this commit: not the one the backend lost
                payload["salt"] = f"heal {ctx.sync_id}"
            if op == "patch":
                payload["patch"] = merge_patch(action.changes, action.manifest or {})
            steps.append(_Step(action, op, payload, spec_hash))
        return steps

    def _apply_chunk(self, actions: list[Action], ctx: ApplyContext) -> dict[Action,
                                                                              ProviderError]:
        steps = [step for a in actions for step in self._steps(a, ctx)]
        # 1. Journal every intent of the chunk; one commit before any provider call.
        for step in steps:
            failpoints.reach(f"before-intent-{step.op}")
        journaled = self.store.add_intents([
            {"binding_id": ctx.binding_id, "sync_id": ctx.sync_id, "action": step.op,
             "key": step.action.key, "spec_hash": step.spec_hash, "payload": step.payload,
             "idempotency_key": _key_of(step, ctx)} for step in steps])
        for step in steps:
            step.intent_id, state = journaled[_key_of(step, ctx)]
            step.skip = state == "done"  # carried out by an earlier run of this commit
        # 2. The provider calls, in plan order; a failed delete stops its replace.
        broken: set[Action] = set()
        for step in steps:
            if step.skip or step.action in broken:
                continue
            failpoints.reach(f"after-intent-{step.op}")
            try:
                step.observed = self._call_step(step, ctx)
            except NotFoundError:
                if step.op != "delete":
                    step.error = NotFoundError(f"{step.action.key.short} is missing from the "
                                               "backend")
            except ProviderError as e:
                step.error = e
            if step.error is not None:
                broken.add(step.action)
            failpoints.reach(f"after-provider-{step.op}")
        # 3. Record every result; one commit.
        results = _Results()
        for step in steps:
            if step.skip:
                continue
            if step.error is None and step.action in broken and step.op != "delete":
                # Never tried: the step before it failed. Closed, so that no restart
                # carries out half of a replace.
                results.intents.append((step.intent_id, False, {"error": "not attempted"}))
                continue
            self._record_step(step, ctx, results)
        with self.store.batch():
            results.write(self.store)
        for step in steps:
            if not step.skip and step.error is None and step.action not in broken:
                failpoints.reach(f"after-record-{step.op}")
        return {s.action: s.error for s in steps if s.error is not None}

    def _call_step(self, step: _Step, ctx: ApplyContext) -> Observed | None:
        key = step.action.key
        if step.op == "delete":
            self._call(lambda: self.provider.delete(key))
            return None
        workload = workload_for(step.payload["manifest"], key, step.spec_hash,
                                step.payload["file"], ctx)
        if step.op == "create":
            idem = _key_of(step, ctx)
            return self._call(lambda: self.provider.create(workload, idem))
        return self._call(lambda: self.provider.patch(workload, step.payload["patch"]))

    def _record_step(self, step: _Step, ctx: ApplyContext, results: _Results) -> None:
        key = step.action.key
        if step.error is not None:
            results.intents.append((step.intent_id, False, {"error": str(step.error)}))
            results.events.append((key, "Warning", "ApplyFailed", f"{step.op}: {step.error}"))
            if step.op == JournalOp.CREATE:
                # Shown with what happened until a later commit's create succeeds (never
                # over another binding's record of the same name: that one is its own).
                existing = self.store.get_resource(key)
                if existing is None or existing.binding_id == ctx.binding_id:
                    results.upserts.append(self._refused_record(step, ctx))
            return
        if step.op == "delete":
            results.removed.append(key)
            results.intents.append((step.intent_id, True, {}))
            results.events.append((key, "Normal", "Deleted",
                                   f"{step.action.reason or 'deleted'} at {ctx.commit[:12]}"))
            return
        assert step.observed is not None
        results.upserts.append(self._inventory_record(
            ctx.binding_id, key, step.payload["manifest"], step.spec_hash, step.payload["file"],
            ctx.commit, step.observed))
        results.intents.append((step.intent_id, True,
                                {"provider_id": step.observed.provider_id}))
        if step.op == "create":
            results.events.append((key, "Normal", "Created", f"created from "
                                   f"{step.payload['file']} at {ctx.commit[:12]}"))
        else:
            changed = ", ".join(f"{s}.{f}" for s, fs in step.payload["patch"].items() for f in fs)
            results.events.append((key, "Normal", "Patched", f"changed {changed}"))

    def _record_unchanged(self, action: Action, ctx: ApplyContext) -> None:
        recorded = self.store.get_resource(action.key)
        if recorded is not None and action.manifest is not None:
            self.store.upsert_resource(dataclasses.replace(
                recorded, manifest=action.manifest, spec_hash=action.spec_hash,
                source_file=action.file, source_commit=ctx.commit))

    def _refused_record(self, step: _Step, ctx: ApplyContext) -> InventoryRecord:
        """A resource Git asks for that the backend refused to create."""
        return InventoryRecord(
            key=step.action.key, binding_id=ctx.binding_id, manifest=step.payload["manifest"],
            spec_hash=step.spec_hash, source_commit=ctx.commit,
            source_file=step.payload["file"], provider=self.provider.name, provider_id=None,
            phase=Phase.CREATE_FAILED, reason=Reason.CREATE_FAILED,
            message=f"the backend refused to create it: {step.error}",
            fix=FIXES[Reason.CREATE_FAILED], status={}, cost_usd="0")

    def _inventory_record(self, binding_id: str, key: ResourceKey, manifest: dict,
                          spec_hash: str, file: str, commit: str,
                          observed: Observed) -> InventoryRecord:
        return InventoryRecord(
            key=key, binding_id=binding_id, manifest=manifest, spec_hash=spec_hash,
            source_commit=commit, source_file=file, provider=self.provider.name,
            provider_id=observed.provider_id, phase=observed.phase, reason=observed.reason,
            message=observed.message, fix=observed.fix, status=observed.status,
            cost_usd=observed.cost_usd,
        )

    # --- retries and recovery ------------------------------------------------------------

    def _call(self, fn: Callable[[], Any]) -> Any:
        """`fn()`, with a TransientError retried as the policy says; the last one raised.

        The first attempt runs bare: building the retry loop costs more than a fast
        backend's answer (a cold sync makes one call per resource), so it is built only
        once an attempt failed, and replays that failure as its own first attempt."""
        try:
            return fn()
        except TransientError as exc:
            failed: list[TransientError] = [exc]

        def attempt() -> Any:
            if failed:
                raise failed.pop()
            return fn()

        retrying = self.retry.retrying(TransientError, sleep=self.sleep, rng=self.rng,
                                       hint=lambda e: getattr(e, "delay", None))
        return retrying(attempt)

    def resolve_pending(self, binding_id: str | None = None) -> list[IntentRecord]:
        """Finish every intent a killed process left pending, oldest first: whatever the
        provider already did is recorded, whatever it did not is done now, once."""
        pending = self.store.pending_intents(binding_id)
        for intent in pending:
            p = intent.payload
            ctx = ApplyContext(intent.binding_id, intent.key.project, p["instance"], p["repo"],
                               p["commit"])
            step = _Step(Action(ActionType(intent.action), intent.key, p["file"],
                                manifest=p.get("manifest")),
                         intent.action, p, intent.spec_hash, intent.id)
            try:
                existing = self.provider.get(intent.key) if intent.action == "create" else None
                step.observed = existing or self._call_step(step, ctx)
            except NotFoundError as e:
                if intent.action != "delete":
                    step.error = e
            except TransientError:
                continue  # stays pending; the next pass tries again
            except ProviderError as e:
                step.error = e
            results = _Results()
            self._record_step(step, ctx, results)
            with self.store.batch():
                results.write(self.store)
        return pending

    def refresh(self, binding_id: str,
                keys: Iterable[ResourceKey] | None = None) -> Refreshed:
        """Read the live status of the binding's unfinished resources (or only `keys`)
        into the inventory; returns the keys whose status changed, and of those the ones
        the backend no longer has."""
        changed: list[ResourceKey] = []
        missing: list[ResourceKey] = []
        records = self.store.list_unfinished(binding_id) if keys is None else [
            r for k in keys if (r := self.store.get_resource(k)) is not None]
        for record in records:
            if is_terminal(record.phase) or record.deleted or (
                    record.phase == Phase.CREATE_FAILED):  # nothing on the backend to read
                continue
            try:
                observed = self.provider.get(record.key)
            except ProviderError:
                continue
            if observed is None:  # gone from the backend before it finished
                self.store.update_status(record.key, record.phase, "Missing", "the backend "
                                         "no longer has this resource", None, record.status,
                                         record.cost_usd, None, deleted=True)
                self.store.add_event(record.key, "Warning", "Missing", "the backend no longer "
                                     "has this unfinished resource")
                changed.append(record.key)
                missing.append(record.key)
                continue
            if (observed.phase, observed.status, observed.cost_usd, observed.reason) == (
                    record.phase, record.status, record.cost_usd, record.reason):
                continue
            finished = self.clock() if is_terminal(observed.phase) else None
            self.store.update_status(record.key, observed.phase, observed.reason,
                                     observed.message, observed.fix, observed.status,
                                     observed.cost_usd, finished)
            if observed.phase != record.phase:
                self.store.add_event(
                    record.key, "Warning" if observed.phase == "Failed" else "Normal",
                    observed.reason or observed.phase, f"{record.phase} -> {observed.phase}"
                    + (f": {observed.message}" if observed.message else ""))
            changed.append(record.key)
        return Refreshed(changed, missing)
