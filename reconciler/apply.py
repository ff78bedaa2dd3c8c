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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from providers.base import Observed, Provider, Workload
from reconciler import failpoints
from reconciler.errors import NotFoundError, PermanentError, ProviderError, TransientError
from reconciler.identity import (
    ANNOTATION_SOURCE_COMMIT,
    ANNOTATION_SOURCE_FILE,
    ANNOTATION_SOURCE_REPO,
    ANNOTATION_SPEC_HASH,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    MANAGED_BY_VALUE,
    ResourceKey,
)
from reconciler.phases import is_terminal
from reconciler.plan import Action, ActionType, Change, Plan
from state.records import IntentRecord, InventoryRecord
from state.store import Store


@dataclass(frozen=True)
class ApplyContext:
    """Who applies what: the binding, its project, this instance, the commit."""

    binding_id: str
    project: str
    instance: str
    repo: str
    commit: str
    sync_id: int | None = None


@dataclass(frozen=True)
class RetryPolicy:
    """Transient provider errors: exponential backoff with jitter, Retry-After honoured."""

    attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 30.0

    def delay(self, attempt: int, hint: float | None, rng: random.Random) -> float:
        if hint is not None:
            return min(hint, self.max_delay)
        ceiling = min(self.base_delay * 2**attempt, self.max_delay)
        return ceiling / 2 + rng.random() * ceiling / 2


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

    def _keys(self, action: ActionType, ok: bool = True) -> list[ResourceKey]:
        return [o.action.key for o in self.outcomes if o.action.action == action and o.ok == ok]

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
        return counts


def idempotency_key(ctx: ApplyContext, action: str, key: ResourceKey, spec_hash: str) -> str:
    raw = f"{ctx.binding_id}\0{ctx.commit}\0{action}\0{key}\0{spec_hash}"
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


def merge_patch(changes: tuple[Change, ...] | list[Change], manifest: dict[str, Any]) -> dict:
    """A JSON merge patch (RFC 7386) carrying the changed top-level fields of `spec` and
    `metadata`: whole values, so a removed field becomes null."""
    patch: dict[str, Any] = {}
    for change in changes:
        section, _, rest = change.path.partition(".")
        field_name = rest.split(".", 1)[0]
        value = manifest.get(section, {}).get(field_name)
        patch.setdefault(section, {})[field_name] = value
    return patch


class Applier:
    """Runs plans for one binding through one provider, recording into the store."""

    def __init__(self, store: Store, provider: Provider, *, retry: RetryPolicy = RetryPolicy(),
                 sleep: Callable[[float], None] = time.sleep,
                 rng: random.Random | None = None) -> None:
        self.store = store
        self.provider = provider
        self.retry = retry
        self.sleep = sleep
        self.rng = rng or random.Random()

    # --- the batch -----------------------------------------------------------------------

    def apply(self, plan: Plan, ctx: ApplyContext) -> ChangeSet:
        changes = ChangeSet()
        for action in plan.actions:
            changes.outcomes.append(self._apply_one(action, ctx))
        return changes

    def _apply_one(self, action: Action, ctx: ApplyContext) -> Outcome:
        try:
            if action.action == ActionType.CREATE:
                observed = self._create(action, ctx)
            elif action.action == ActionType.PATCH:
                observed = self._patch(action, ctx)
            elif action.action == ActionType.REPLACE:
                self._delete(action, ctx)
                observed = self._create(action, ctx)
            elif action.action == ActionType.DELETE:
                self._delete(action, ctx)
                observed = None
            else:
                if action.record:
                    self._record_unchanged(action, ctx)
                return Outcome(action, ok=True)
        except ProviderError as e:
            self.store.add_event(action.key, "Warning", "ApplyFailed", f"{action.action}: {e}")
            return Outcome(action, ok=False, error=str(e),
                           transient=isinstance(e, TransientError))
        return Outcome(action, ok=True, observed=observed)

    # --- one effect each, journaled ------------------------------------------------------

    def _journal(self, action: str, key: ResourceKey, spec_hash: str, ctx: ApplyContext,
                 payload: dict[str, Any]) -> IntentRecord | None:
        """Commit the intent; None when this very intent was already carried out."""
        failpoints.reach(f"before-intent-{action}")
        idem = idempotency_key(ctx, action, key, spec_hash)
        intent_id = self.store.add_intent(ctx.binding_id, ctx.sync_id, action, key, spec_hash,
                                          idem, payload)
        intent = self.store.get_intent(intent_id)
        if intent is not None and intent.state == "done":
            return None
        failpoints.reach(f"after-intent-{action}")
        return intent

    def _create(self, action: Action, ctx: ApplyContext) -> Observed | None:
        assert action.manifest is not None
        payload = {"manifest": action.manifest, "file": action.file, "commit": ctx.commit,
                   "repo": ctx.repo, "instance": ctx.instance}
        intent = self._journal("create", action.key, action.spec_hash, ctx, payload)
        if intent is None:
            return None
        return self._finish_create(intent)

    def _finish_create(self, intent: IntentRecord) -> Observed:
        p = intent.payload
        ctx = ApplyContext(intent.binding_id, intent.key.project, p["instance"], p["repo"],
                           p["commit"])
        workload = workload_for(p["manifest"], intent.key, intent.spec_hash, p["file"], ctx)
        observed = self._call(lambda: self.provider.create(workload, intent.idempotency_key))
        failpoints.reach("after-provider-create")
        self._record(intent.binding_id, intent.key, p["manifest"], intent.spec_hash, p["file"],
                     p["commit"], observed)
        failpoints.reach("after-record-create")
        self.store.complete_intent(intent.id, {"provider_id": observed.provider_id})
        self.store.add_event(intent.key, "Normal", "Created",
                             f"created from {p['file']} at {p['commit'][:12]}")
        return observed

    def _patch(self, action: Action, ctx: ApplyContext) -> Observed | None:
        assert action.manifest is not None
        payload = {"manifest": action.manifest, "file": action.file, "commit": ctx.commit,
                   "repo": ctx.repo, "instance": ctx.instance,
                   "patch": merge_patch(action.changes, action.manifest)}
        intent = self._journal("patch", action.key, action.spec_hash, ctx, payload)
        if intent is None:
            return None
        return self._finish_patch(intent)

    def _finish_patch(self, intent: IntentRecord) -> Observed:
        p = intent.payload
        ctx = ApplyContext(intent.binding_id, intent.key.project, p["instance"], p["repo"],
                           p["commit"])
        workload = workload_for(p["manifest"], intent.key, intent.spec_hash, p["file"], ctx)
        observed = self._call(lambda: self.provider.patch(workload, p["patch"]))
        failpoints.reach("after-provider-patch")
        self._record(intent.binding_id, intent.key, p["manifest"], intent.spec_hash, p["file"],
                     p["commit"], observed)
        self.store.complete_intent(intent.id, {"patch": p["patch"]})
        self.store.add_event(intent.key, "Normal", "Patched",
                             "changed " + ", ".join(f"{s}.{f}" for s, fs in p["patch"].items()
                                                    for f in fs))
        return observed

    def _delete(self, action: Action, ctx: ApplyContext) -> None:
        recorded = self.store.get_resource(action.key)
        payload = {"file": action.file, "commit": ctx.commit}
        spec_hash = recorded.spec_hash if recorded else action.spec_hash
        intent = self._journal("delete", action.key, spec_hash, ctx, payload)
        if intent is not None:
            self._finish_delete(intent)

    def _finish_delete(self, intent: IntentRecord) -> None:
        try:
            self._call(lambda: self.provider.delete(intent.key))
        except NotFoundError:
            pass  # already gone (a finished run removed by its TTL): the goal holds
        failpoints.reach("after-provider-delete")
        self.store.remove_resource(intent.key)
        self.store.complete_intent(intent.id, {})
        self.store.add_event(intent.key, "Normal", "Deleted",
                             f"removed from Git at {intent.payload['commit'][:12]}")

    def _record_unchanged(self, action: Action, ctx: ApplyContext) -> None:
        recorded = self.store.get_resource(action.key)
        if recorded is not None and action.manifest is not None:
            self.store.upsert_resource(dataclasses.replace(
                recorded, manifest=action.manifest, spec_hash=action.spec_hash,
                source_file=action.file, source_commit=ctx.commit))

    def _record(self, binding_id: str, key: ResourceKey, manifest: dict, spec_hash: str,
                file: str, commit: str, observed: Observed) -> None:
        previous = self.store.get_resource(key)
        record = InventoryRecord(
            key=key, binding_id=binding_id, manifest=manifest, spec_hash=spec_hash,
            source_commit=commit, source_file=file, provider=self.provider.name,
            provider_id=observed.provider_id, phase=observed.phase, reason=observed.reason,
            message=observed.message, fix=observed.fix, status=observed.status,
            cost_usd=observed.cost_usd,
        )
        if previous is not None and previous.spec_hash == spec_hash:
            record = dataclasses.replace(record, created_at=previous.created_at)
        self.store.upsert_resource(record)

    # --- retries and recovery ------------------------------------------------------------

    def _call(self, fn: Callable[[], Any]) -> Any:
        for attempt in range(self.retry.attempts):
            try:
                return fn()
            except TransientError as e:
                if attempt == self.retry.attempts - 1:
                    raise
                self.sleep(self.retry.delay(attempt, e.delay, self.rng))
        raise AssertionError("unreachable")

    def resolve_pending(self, binding_id: str | None = None) -> list[IntentRecord]:
        """Finish every intent a killed process left pending, oldest first: whatever the
        provider already did is recorded, whatever it did not is done now, once."""
        pending = self.store.pending_intents(binding_id)
        for intent in pending:
            try:
                if intent.action == "create":
                    existing = self.provider.get(intent.key)
                    if existing is not None:
                        self._record(intent.binding_id, intent.key, intent.payload["manifest"],
                                     intent.spec_hash, intent.payload["file"],
                                     intent.payload["commit"], existing)
                        self.store.complete_intent(intent.id, {"adopted": existing.provider_id})
                    else:
                        self._finish_create(intent)
                elif intent.action == "patch":
                    self._finish_patch(intent)
                elif intent.action == "delete":
                    self._finish_delete(intent)
            except NotFoundError as e:
                self.store.fail_intent(intent.id, {"error": str(e)})
            except PermanentError as e:
                self.store.fail_intent(intent.id, {"error": str(e)})
                self.store.add_event(intent.key, "Warning", "ApplyFailed", str(e))
            except TransientError:
                continue  # stays pending; the next pass tries again
        return pending

    def refresh(self, binding_id: str) -> int:
        """Read the live status of every unfinished resource into the inventory."""
        changed = 0
        for record in self.store.list_inventory(binding_id=binding_id):
            if is_terminal(record.phase) or record.deleted:
                continue
            try:
                observed = self.provider.get(record.key)
            except ProviderError:
                continue
            if observed is None:
                continue
            if (observed.phase, observed.status, observed.cost_usd) != (
                    record.phase, record.status, record.cost_usd):
                self.store.update_status(
                    record.key, observed.phase, observed.reason, observed.message,
                    observed.fix, observed.status, observed.cost_usd)
                if observed.phase != record.phase:
                    self.store.add_event(record.key, "Warning" if observed.phase == "Failed"
                                         else "Normal", observed.reason or observed.phase,
                                         f"{record.phase} -> {observed.phase}"
                                         + (f": {observed.message}" if observed.message else ""))
                changed += 1
        return changed
