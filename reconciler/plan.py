"""The plan: a pure diff of what Git asks for against what the reconciler recorded.

`plan(desired, inventory, observed, options) -> Plan`. No I/O, no clock, no randomness:
the same inputs give the same plan, byte for byte. The pull-request check, the `plan`
command and the applying loop all call this one function.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.floor.phases import Phase, is_terminal
from nodus_gitops.floor.quantities import parse_usd
from nodus_gitops.floor.results import ActionType
from nodus_gitops.frozen import freeze, thaw
from nodus_gitops.options import OnChange, ResourceOptions

__all__ = ["ActionType", "Action", "Change", "Desired", "Live", "Plan", "PlanOptions",
           "Recorded", "diff", "merge_patch", "plan", "spec_hash"]

# Fields the platform changes on a live resource (seeds); everything else is immutable.
PATCHABLE_SPEC_FIELDS = frozenset(
    {"maxCostUSD", "timeout", "activeDeadlineSeconds", "state", "ttlSecondsAfterFinished"}
)
PATCHABLE_METADATA_FIELDS = frozenset({"labels", "annotations"})


# Apply order: deletes last, so a failed create never follows a delete of its replacement.
_ORDER = {ActionType.CREATE: 0, ActionType.REPLACE: 1, ActionType.PATCH: 2, ActionType.NOOP: 3,
          ActionType.BLOCKED: 4, ActionType.DELETE: 5}


def spec_hash(manifest: Mapping[str, Any]) -> str:
    """Identity of a run: the spec only (labels and annotations patch in place)."""
    canonical = json.dumps(manifest.get("spec", {}), sort_keys=True, separators=(",", ":"),
                           ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Desired:
    """One valid manifest from the commit being planned."""

    key: ResourceKey
    manifest: dict[str, Any]
    file: str
    spec_hash: str

    @classmethod
    def of(cls, key: ResourceKey, manifest: dict[str, Any], file: str) -> Desired:
        return cls(key, manifest, file, spec_hash(manifest))


@dataclass(frozen=True)
class Recorded:
    """What the inventory says the reconciler created."""

    key: ResourceKey
    manifest: dict[str, Any]
    spec_hash: str
    file: str
    phase: str | None = None


@dataclass(frozen=True)
class Live:
    """What the backend reports now; absent from `observed` when not looked up."""

    exists: bool
    phase: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class PlanOptions:
    """The binding's prune guards and drift policy, from its settings."""

    allow_empty: bool = False
    max_deletions: int = 10
    self_heal: bool = False


@dataclass(frozen=True)
class Change:
    """One changed field. Its values are frozen (tuples and FrozenMaps), so a Change, an
    Action and a Plan can be hashed and compared whatever the field held."""

    path: str
    old: Any
    new: Any

    def __post_init__(self) -> None:
        object.__setattr__(self, "old", freeze(self.old))
        object.__setattr__(self, "new", freeze(self.new))

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "old": thaw(self.old), "new": thaw(self.new)}


@dataclass(frozen=True)
class Action:
    action: ActionType
    key: ResourceKey
    file: str
    changes: tuple[Change, ...] = ()
    reason: str = ""
    spec_hash: str = ""
    manifest: dict[str, Any] | None = field(default=None, compare=False)
    # A noop that still updates the inventory (a renamed file, an ignored change).
    record: bool = False
    # A delete of a record only: the backend holds nothing of it (a refused create).
    forget: bool = False
    # A create of a run the backend lost: a new run, not the commit's first.
    heal: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "action": self.action.value,
            "kind": self.key.kind,
            "name": self.key.name,
            "file": self.file,
            "changes": [c.as_dict() for c in self.changes],
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Plan:
    """The actions, in apply order. Resources in sync with nothing to say (no drift, no
    moved file) are only counted, in `unchanged`: a 10,000-resource repository with one
    change plans one action, not 10,000."""

    actions: tuple[Action, ...]
    unchanged: int = 0

    def by_type(self, action: ActionType) -> list[Action]:
        return [a for a in self.actions if a.action == action]

    @property
    def has_changes(self) -> bool:
        return any(a.action not in (ActionType.NOOP, ActionType.BLOCKED) for a in self.actions)

    @property
    def blocked(self) -> list[Action]:
        return self.by_type(ActionType.BLOCKED)

    def summary(self) -> dict[str, int]:
        counts = {t.value: 0 for t in ActionType}
        for a in self.actions:
            counts[a.action.value] += 1
        counts[ActionType.NOOP.value] += self.unchanged
        return counts

    def to_dict(self, commit: str, problems: Iterable[dict] = (), *,
                quiet_noops: bool = False) -> dict[str, Any]:
        """The plan as JSON data; `quiet_noops` leaves out noops that carry no reason (what
        a sync records: the changes, not every unchanged resource)."""
        actions = [a.as_dict() for a in self.actions
                   if not (quiet_noops and a.action == ActionType.NOOP and not a.reason)]
        return {"commit": commit, "actions": actions, "problems": list(problems),
                "summary": self.summary()}

    def to_json(self, commit: str, problems: Iterable[dict] = ()) -> str:
        return json.dumps(self.to_dict(commit, problems), sort_keys=True, indent=2,
                          ensure_ascii=False, default=str)


def diff(old: Any, new: Any, path: str = "") -> list[Change]:
    """Field-level changes between two JSON values, in a stable order."""
    if isinstance(old, dict) and isinstance(new, dict):
        changes = []
        for k in sorted(set(old) | set(new), key=str):
            sub = f"{path}.{k}" if path else str(k)
            if k not in old:
                changes.append(Change(sub, None, new[k]))
            elif k not in new:
                changes.append(Change(sub, old[k], None))
            else:
                changes.extend(diff(old[k], new[k], sub))
        return changes
    return [] if old == new else [Change(path, old, new)]


def _patchable(change: Change) -> bool:
    parts = change.path.split(".")
    if parts[0] == "spec":
        return len(parts) >= 2 and parts[1] in PATCHABLE_SPEC_FIELDS
    if parts[0] == "metadata":
        return len(parts) >= 2 and parts[1] in PATCHABLE_METADATA_FIELDS
    return False


def _lowered_cap(changes: list[Change]) -> Change | None:
    for c in changes:
        if c.path == "spec.maxCostUSD" and c.new is not None:
            old = parse_usd(c.old) if c.old is not None else None
            new = parse_usd(c.new)
            # No cap before means unlimited: any new cap lowers it.
            if new is not None and (old is None or Decimal(new) < Decimal(old)):
                return c
    return None


def _plan_changed(d: Desired, r: Recorded, live: Live | None) -> Action:
    changes = diff(r.manifest, d.manifest)
    phase = live.phase if live and live.exists else r.phase
    base = {"key": d.key, "file": d.file, "changes": tuple(changes), "spec_hash": d.spec_hash,
            "manifest": d.manifest}
    immutable = [c for c in changes if not _patchable(c)]
    if immutable:
        policy = ResourceOptions.from_manifest(d.manifest).on_change
        fields = ", ".join(c.path for c in immutable)
        if policy == OnChange.REPLACE:
            return Action(ActionType.REPLACE, reason=f"{fields} cannot change in place "
                          "(nodus.dev/on-change: Replace): the old run is deleted with its "
                          "outputs, then a new run is created", **base)
        if policy == OnChange.IGNORE:
            return _plan_ignored(d, r, phase, changes, fields)
        return Action(ActionType.BLOCKED, reason=f"{fields} cannot change on an existing "
                      f"{d.key.kind}; set the annotation nodus.dev/on-change: Replace to delete "
                      "and re-create it, or Ignore to keep the current run", **base)
    lowered = _lowered_cap(changes)
    if lowered is not None:
        return Action(ActionType.BLOCKED, reason=f"spec.maxCostUSD {lowered.old or 'unset'} -> "
                      f"{lowered.new}: the cap can only be raised", **base)
    if is_terminal(phase):
        return Action(ActionType.NOOP, reason=f"finished ({phase}): in-place changes have no "
                      "effect on a finished run", record=True, **base)
    return Action(ActionType.PATCH, **base)


def _plan_ignored(d: Desired, r: Recorded, phase: str | None, changes: list[Change],
                  fields: str) -> Action:
    """`nodus.dev/on-change: Ignore`: the immutable changes are not applied, so the
    inventory keeps what runs (a later Replace still sees the difference); the fields the
    platform changes in place (spec.state, the cap, labels, ...) still patch."""
    ignored = f"change to {fields} ignored (nodus.dev/on-change: Ignore)"
    patchable = [c for c in changes if _patchable(c)]
    running = _patched(r.manifest, merge_patch(patchable, d.manifest))
    lowered = _lowered_cap(patchable)
    if lowered is not None:
        return Action(ActionType.BLOCKED, d.key, d.file, tuple(changes), spec_hash=d.spec_hash,
                      manifest=d.manifest, reason=f"spec.maxCostUSD {lowered.old or 'unset'} "
                      f"-> {lowered.new}: the cap can only be raised")
    if patchable and not is_terminal(phase):
        return Action(ActionType.PATCH, d.key, d.file, tuple(patchable),
                      reason=f"{ignored}; the rest patches in place",
                      spec_hash=spec_hash(running), manifest=running)
    return Action(ActionType.NOOP, d.key, d.file, tuple(changes), reason=ignored,
                  spec_hash=spec_hash(running), manifest=running,
                  record=bool(patchable) or r.file != d.file)


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


def _patched(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """`base` after the backend applies the merge patch `patch` (null removes)."""
    out = {**base}
    for section, fields in patch.items():
        part = dict(out.get(section) or {})
        for name, value in fields.items():
            if value is None:
                part.pop(name, None)
            else:
                part[name] = value
        out[section] = part
    return out


def _plan_unchanged(d: Desired, r: Recorded, live: Live | None,
                    options: PlanOptions) -> Action | None:
    """None when the resource is in sync and there is nothing to say about it."""
    record = r.file != d.file
    if not record and (is_terminal(r.phase) or live is None or (
            live.exists and live.phase in _QUIET_PHASES)):
        return None
    base = {"key": d.key, "file": d.file, "spec_hash": d.spec_hash, "manifest": d.manifest,
            "record": record}
    moved = f"moved from {r.file}" if record else ""
    quiet = Action(ActionType.NOOP, reason=moved, **base) if record else None
    if is_terminal(r.phase) or live is None:
        return quiet
    wanted = d.manifest.get("spec", {}).get("state", "Running")
    if not live.exists:
        # Git asks for a run the backend no longer has (removed outside the reconciler):
        # never a green noop. selfHeal creates it again; otherwise the check says so.
        if options.self_heal:
            return Action(ActionType.CREATE, reason="self-heal: missing from the backend",
                          heal=True, **{k: v for k, v in base.items() if k != "record"})
        return Action(ActionType.BLOCKED, reason="drift: missing from the backend (removed "
                      "outside the reconciler); set selfHeal: true on the binding to create "
                      "it again", **{k: v for k, v in base.items() if k != "record"})
    drift = _drift(wanted, live)
    if not drift:
        return quiet
    if options.self_heal and live.phase not in (Phase.CANCELLED, Phase.CANCELLING):
        return Action(ActionType.PATCH, reason=f"self-heal: {drift}",
                      changes=(Change("spec.state", live.phase, wanted),),
                      **{k: v for k, v in base.items() if k != "record"})
    return Action(ActionType.NOOP, reason=f"drift: {drift}", **base)


# Live phases that agree with any spec.state without a closer look (the common case).
_QUIET_PHASES = frozenset({Phase.RUNNING, Phase.QUEUED, Phase.PROVISIONING,
                           Phase.RECOVERING, Phase.SUCCEEDED, Phase.FAILED})


def _drift(wanted: str, live: Live) -> str:
    """Where the live phase contradicts `spec.state` in Git (changed from outside)."""
    phase = live.phase
    if phase in (Phase.CANCELLED, Phase.CANCELLING) and wanted != "Cancelled":
        return f"live phase {phase} but spec.state is {wanted}"
    if phase in (Phase.SUSPENDED, Phase.SUSPENDING) and wanted == "Running" and (
            live.reason not in ("MaxCostReached", "InsufficientCredits", "BudgetExceeded")):
        return f"live phase {phase} but spec.state is Running"
    if wanted == "Suspended" and phase in (Phase.RUNNING, Phase.QUEUED):
        return f"live phase {phase} but spec.state is Suspended"
    return ""


def _plan_prunes(stale: list[Recorded], desired_empty: bool, options: PlanOptions) -> list[Action]:
    # A resource the backend never created has nothing to keep or guard, and nothing on
    # the backend is its (what holds that name there is someone else's): it is forgotten.
    never = [r for r in stale if r.phase == Phase.CREATE_FAILED]
    stale = [r for r in stale if r.phase != Phase.CREATE_FAILED]
    keep = [r for r in stale if not ResourceOptions.from_manifest(r.manifest).prune]
    delete = [r for r in stale if ResourceOptions.from_manifest(r.manifest).prune]
    actions = [Action(ActionType.BLOCKED, r.key, r.file, reason="removed from Git but kept: "
                      "nodus.dev/prune: disabled") for r in keep]
    actions += [Action(ActionType.DELETE, r.key, r.file, reason="removed from Git (the "
                       "backend had refused to create it: only its record goes)",
                       spec_hash=r.spec_hash, forget=True) for r in never]
    refusal = ""
    if delete and desired_empty and not options.allow_empty:
        refusal = ("this commit would delete every resource of the binding; set allowEmpty: "
                   "true on the binding if that is intended")
    elif len(delete) > options.max_deletions:
        refusal = (f"{len(delete)} deletions exceed the binding's maxDeletions "
                   f"({options.max_deletions}); raise maxDeletions to allow them")
    for r in delete:
        if refusal:
            actions.append(Action(ActionType.BLOCKED, r.key, r.file, reason=f"prune refused: "
                                  f"{refusal}"))
        else:
            actions.append(Action(ActionType.DELETE, r.key, r.file, reason="removed from Git",
                                  spec_hash=r.spec_hash))
    return actions


def plan(
    desired: Iterable[Desired],
    inventory: Iterable[Recorded],
    observed: Mapping[ResourceKey, Live] | None = None,
    options: PlanOptions = PlanOptions(),
    *,
    tree_size: int | None = None,
) -> Plan:
    """Every action that brings the backend to what Git asks for, in apply order.

    `desired` and `inventory` may be a part of the binding (an incremental plan); the
    guards that judge the whole binding then read `tree_size`, the number of resources
    the whole commit asks for (default: all of `desired`)."""
    observed = observed or {}
    wanted = {d.key: d for d in desired}
    recorded = {r.key: r for r in inventory}
    actions: list[Action] = []
    unchanged = 0
    for key, d in wanted.items():
        r = recorded.get(key)
        if r is None or r.phase == Phase.CREATE_FAILED:
            actions.append(Action(ActionType.CREATE, key, d.file, spec_hash=d.spec_hash,
                                  manifest=d.manifest, reason="" if r is None else
                                  "the backend refused the last create; trying again"))
        elif r.spec_hash != d.spec_hash or r.manifest.get("metadata") != d.manifest.get(
                "metadata"):
            actions.append(_plan_changed(d, r, observed.get(key)))
        elif (action := _plan_unchanged(d, r, observed.get(key), options)) is not None:
            actions.append(action)
        else:
            unchanged += 1
    stale = [r for key, r in recorded.items() if key not in wanted]
    desired_empty = not wanted if tree_size is None else tree_size == 0
    actions.extend(_plan_prunes(stale, desired_empty, options))
    actions.sort(key=lambda a: (_ORDER[a.action], a.key))
    return Plan(tuple(actions), unchanged)
