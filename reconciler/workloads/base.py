"""The control loop the Pipeline and Sweep controllers share: one step, run on every
read of a composite (and by the TTL sweep), that follows the composite's `spec.state`
and shared cost cap, starts what is ready, and derives its status from its children.

A subclass says what the children are (`children`), when one is ready, what a failure
means for the others, and how the composite's phase and status follow from theirs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from nodus_gitops.floor.errors import NotFoundError, PermanentError, ProviderError
from nodus_gitops.floor.identity import (
    ANNOTATION_SPEC_HASH,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    ResourceKey,
)
from nodus_gitops.floor.phases import FIXES, Phase, Reason, is_terminal
from nodus_gitops.floor.quantities import parse_usd
from nodus_gitops.plan import spec_hash
from nodus_gitops.providers.base import Observed, Provider, Workload
from nodus_gitops.workloads import budget, pricing
from nodus_gitops.workloads.expiry import is_due, ttl_of, without_ttl
from nodus_gitops.workloads.records import (
    Record,
    RecordStore,
    finished_time,
    observed_from,
    result_of,
)

PENDING = "Pending"  # a child whose Job was never created (and may still be)
SKIPPED = "Skipped"  # a stage that will never run because one it needs failed


@dataclass(frozen=True)
class Child:
    """One stage or cell: its Job's name and spec, and what the composite calls it."""

    id: str  # stage name or cell index
    job: str
    spec: dict[str, Any]
    depends_on: tuple[str, ...] = ()


Views = dict[str, Observed | None]  # child id -> its Job now, its recorded result, or None


class Controller:
    """Drives one composite kind over a Job-level backend."""

    kind = ""
    child_label = ""
    default_max_parallel: int | None = None

    def __init__(self, inner: Provider, records: RecordStore,
                 clock: Callable[[], float] = time.time) -> None:
        self.inner = inner
        self.records = records
        self.clock = clock

    # --- what a subclass provides ----------------------------------------------------

    def children(self, record: Record) -> list[Child]:
        raise NotImplementedError

    def ready(self, record: Record, child: Child, phases: dict[str, str | None]) -> bool:
        return True

    def on_failures(self, record: Record, children: list[Child],
                    phases: dict[str, str | None]) -> None:
        """Decide what a failed child means for the others (skip, cancel)."""

    def status(self, record: Record, children: list[Child],
               observed: Views) -> tuple[str, str | None, str | None, dict[str, Any]]:
        raise NotImplementedError

    def child_inputs(self, record: Record, child: Child) -> list[dict[str, str]]:
        return []

    def child_metadata(self, record: Record) -> tuple[dict[str, str], dict[str, str]]:
        """Labels and annotations every child Job carries beside the controller's own."""
        return {}, {}

    def keeps_outputs(self, record: Record, child: Child, observed: Views) -> bool:
        """Whether a finished child's Job must outlive its TTL (its outputs still read)."""
        return False

    # --- helpers for status() ----------------------------------------------------------

    def child_phase(self, record: Record, child: Child, o: Observed | None) -> str:
        if o is not None:
            return o.phase
        if child.id in record.skipped:
            return SKIPPED
        return Phase.CANCELLED if record.cancelled else PENDING

    @staticmethod
    def created(record: Record, child: Child) -> bool:
        """Whether the child's Job was created (it may be gone since, by its TTL)."""
        result = record.results.get(child.id) or {}
        return child.id in (record.started or []) and (
            result.get("reason") != Reason.CREATE_FAILED)

    # --- the Provider operations ----------------------------------------------------------

    def create(self, workload: Workload, idempotency_key: str) -> Observed:
        with self.records.locked(workload.key):
            record = self.records.load(workload.key)
            if record is None or record.idempotency_key != idempotency_key:
                record = Record(workload.key, workload.manifest, idempotency_key)
                self.records.save(record)
            elif record.expired:  # created before and removed by its TTL: never again
                children = self.children(record)
                return self._observed(record, children,
                                      self._observe(record, children, live=False))
            return self._step(record)

    def patch(self, workload: Workload, changes: dict[str, Any]) -> Observed:
        with self.records.locked(workload.key):
            record = self.records.load(workload.key)
            if record is None or record.expired:
                raise NotFoundError(f"{workload.key.short} does not exist")
            record.manifest = workload.manifest
            self.records.save(record)
            return self._step(record)

    def delete(self, key: ResourceKey) -> None:
        with self.records.locked(key):
            record = self.records.load(key)
            if record is None:
                return
            if not record.expired:
                self._delete_children(record)
            self.records.remove(key)

    def get(self, key: ResourceKey) -> Observed | None:
        with self.records.locked(key):
            record = self.records.load(key)
            return None if record is None or record.expired else self._step(record)

    def expire(self, key: ResourceKey) -> bool:
        """Apply the TTLs of a finished composite and its children; True when the
        composite itself was removed."""
        with self.records.locked(key):
            record = self.records.load(key)
            if record is None or record.expired or record.outcome is None:
                return False
            now = self.clock()
            if is_due(record.finished_at, ttl_of(record.spec), now):
                self._delete_children(record)
                record.expired = True
                self.records.save(record)
                return True
            children = self.children(record)
            observed = self._observe(record, children, live=False)
            if self._expire_children(record, children, observed, now):
                self.records.save(record)
            return False

    # --- the step -------------------------------------------------------------------------

    def _step(self, record: Record) -> Observed:
        children = self.children(record)
        if record.outcome is not None:  # finished: only its children's TTLs are left
            observed = self._observe(record, children, live=False)
            if self._expire_children(record, children, observed, self.clock()):
                self.records.save(record)
            return self._observed(record, children, observed)
        wanted = record.spec.get("state", "Running")
        record.cancelled = record.cancelled or wanted == "Cancelled"  # for good
        observed = self._observe(record, children)
        phases = {cid: (o.phase if o else None) for cid, o in observed.items()}
        self.on_failures(record, children, phases)
        target = "Cancelled" if record.cancelled else (
            "Suspended" if wanted == "Suspended" else "Running")
        candidates = self._candidates(record, children, phases) if target == "Running" else []
        leases: dict[str, Decimal] = {}
        cap = parse_usd(record.spec.get("maxCostUSD") or "")
        if cap is None:
            record.capped = False
        elif target == "Running":
            allowance = self._share(record, children, observed, candidates, Decimal(cap))
            record.capped = allowance.at_cap
            candidates, leases = list(allowance.admitted), allowance.leases
            if record.capped:
                target = "Suspended"
        for child in children:
            o = observed[child.id]
            if o is None or is_terminal(o.phase):
                continue
            state = "Cancelled" if child.id in record.skipped else target
            self._follow(record, child, o, state, leases.get(child.id), lift=cap is None)
        by_id = {c.id: c for c in children}
        for cid in candidates:
            self._start(record, by_id[cid], leases.get(cid))
        self._expire_children(record, children, observed, self.clock())
        observed = self._observe(record, children)
        result = self._observed(record, children, observed, target, wanted)
        self.records.save(record)
        return result

    def _observed(self, record: Record, children: list[Child], observed: Views,
                  target: str = "Running", wanted: str = "Running") -> Observed:
        """The composite's Observed; the first terminal phase is kept for good."""
        phase, reason, message, status = self.status(record, children, observed)
        if record.outcome is not None:
            phase, reason, message = (record.outcome["phase"], record.outcome.get("reason"),
                                      record.outcome.get("message"))
        elif record.cancelled and not is_terminal(phase):
            phase, reason, message = Phase.CANCELLING, None, None
        elif target == "Suspended" and not is_terminal(phase):
            phase, message = Phase.SUSPENDED, None
            reason = Reason.MAX_COST_REACHED if record.capped and wanted != "Suspended" else None
            if reason:
                message = "the cost reached the shared spec.maxCostUSD"
        if record.outcome is None and is_terminal(phase):
            ends = [finished_time(r) for r in record.results.values()]
            record.finished_at = max(ends) if ends else self.clock()
            record.outcome = {"phase": phase, "reason": reason, "message": message}
        cost = sum((Decimal(o.cost_usd or "0") for o in observed.values() if o), Decimal(0))
        return Observed(record.key, provider_id=f"{self.kind.lower()}/{record.key.name}",
                        phase=phase, reason=reason, message=message,
                        fix=FIXES.get(reason) if reason else None,
                        cost_usd=f"{cost:.6f}".rstrip("0").rstrip(".") if cost else "0",
                        status=status, labels=record.labels, annotations=record.annotations)

    def _child_key(self, record: Record, child: Child) -> ResourceKey:
        return ResourceKey("Job", record.key.project, child.job)

    def _observe(self, record: Record, children: list[Child], live: bool = True) -> Views:
        """Each child: its recorded result once finished (kept the moment it is first
        seen), else its Job now (`live`), else None."""
        now = self.clock()
        views: Views = {}
        for child in children:
            key = self._child_key(record, child)
            if child.id in record.results:
                views[child.id] = observed_from(key, record.results[child.id])
                continue
            if not live or (record.started is not None and child.id not in record.started):
                views[child.id] = None
                continue
            o = self.inner.get(key)
            if o is not None and is_terminal(o.phase):
                record.results[child.id] = result_of(o, now)
            views[child.id] = o
        if record.started is None:  # a record from before `started` was kept
            record.started = [cid for cid, o in views.items() if o is not None]
        return views

    # --- acting on children ---------------------------------------------------------------

    def _candidates(self, record: Record, children: list[Child],
                    phases: dict[str, str | None]) -> list[str]:
        """The children to start now, in start order, within maxParallel."""
        limit = record.spec.get("maxParallel") or self.default_max_parallel or len(children)
        running = sum(1 for c in children if phases[c.id] is not None
                      and not is_terminal(phases[c.id]))
        out = []
        for child in children:
            if running + len(out) >= limit:
                break
            if phases[child.id] is not None or child.id in record.skipped:
                continue
            if self.ready(record, child, phases):
                out.append(child.id)
        return out

    def _share(self, record: Record, children: list[Child], observed: Views,
               candidates: list[str], cap: Decimal) -> budget.Allowance:
        spends = []
        for child in children:
            o = observed[child.id]
            lease = record.leases.get(child.id)
            own = parse_usd(child.spec.get("maxCostUSD") or "")
            unfinished = o is not None and not is_terminal(o.phase)
            priced = unfinished or child.id in candidates  # only where it matters
            spends.append(budget.Spend(
                child.id, Decimal(o.cost_usd or "0") if o else Decimal(0),
                started=o is not None, finished=o is not None and not unfinished,
                lease=Decimal(lease) if lease is not None else None,
                own_cap=Decimal(own) if own is not None else None,
                estimate=pricing.estimate(self.inner, child.spec) if priced else None,
                rate=pricing.rate(self.inner, child.spec) if priced else None))
        return budget.share(cap, spends, candidates)

    def _follow(self, record: Record, child: Child, o: Observed, state: str,
                lease: Decimal | None, lift: bool) -> None:
        """One patch that brings a child's Job to `state` and its new lease."""
        changes: dict[str, Any] = {}
        if _needs(o, state):
            changes["state"] = state
        new_lease = record.leases.get(child.id)
        if lease is not None and str(lease) != new_lease:
            new_lease = changes["maxCostUSD"] = str(lease)
        elif lift and new_lease is not None:  # the shared cap was removed
            new_lease = None
            changes["maxCostUSD"] = child.spec.get("maxCostUSD")
        if not changes:
            return
        try:
            manifest = self._child_manifest(record, child, state, new_lease)
            self.inner.patch(Workload(self._child_key(record, child), manifest,
                                      spec_hash(manifest)), {"spec": changes})
        except ProviderError:
            return  # tried again at the next step
        if new_lease is None:
            record.leases.pop(child.id, None)
        else:
            record.leases[child.id] = new_lease

    def _start(self, record: Record, child: Child, lease: Decimal | None) -> None:
        if lease is not None:
            record.leases[child.id] = str(lease)
        if child.id not in (record.started or []):
            record.started = [*(record.started or []), child.id]
        self.records.save(record)  # before the create: a crash after it knows to look
        try:
            manifest = self._child_manifest(record, child, "Running",
                                            record.leases.get(child.id))
            self.inner.create(Workload(self._child_key(record, child), manifest,
                                       spec_hash(manifest)),
                              f"{record.idempotency_key}/{child.id}")
        except PermanentError as exc:  # refused, or an input is gone: this child failed
            record.results[child.id] = {"phase": Phase.FAILED.value,
                                        "reason": Reason.CREATE_FAILED.value,
                                        "message": str(exc), "costUSD": "0",
                                        "recordedAt": self.clock(), "status": {}}
        except ProviderError:
            pass  # created again at the next step: the same key finds a Job it made

    def _expire_children(self, record: Record, children: list[Child], observed: Views,
                         now: float) -> bool:
        """Delete the finished children whose own TTL passed; True when any was."""
        changed = False
        for child in children:
            result = record.results.get(child.id)
            if result is None or result.get("expired") or not is_due(
                    finished_time(result), ttl_of(child.spec), now):
                continue
            if self.keeps_outputs(record, child, observed):
                continue
            try:
                self.inner.delete(self._child_key(record, child))
            except ProviderError:
                continue
            result["expired"] = True
            changed = True
        return changed

    def _delete_children(self, record: Record) -> None:
        started = record.started
        for child in self.children(record):
            if started is None or child.id in started:
                self.inner.delete(self._child_key(record, child))

    def _child_manifest(self, record: Record, child: Child, state: str,
                        lease: str | None) -> dict[str, Any]:
        spec = without_ttl(child.spec)
        inputs = self.child_inputs(record, child)
        if inputs:
            spec["inputs"] = inputs
        if state != "Running":
            spec["state"] = state
        if lease is not None:
            spec["maxCostUSD"] = lease  # its share of the composite's cap
        extra_labels, extra_annotations = self.child_metadata(record)
        labels = {**extra_labels, **{k: v for k, v in record.labels.items()
                                     if k in (LABEL_MANAGED_BY, LABEL_INSTANCE)}}
        labels[self.child_label] = record.key.name  # the controller's own labels win
        annotations = {**extra_annotations, ANNOTATION_SPEC_HASH: spec_hash({"spec": spec})}
        return {"apiVersion": "nodus.dev/v1", "kind": "Job",
                "metadata": {"name": child.job, "labels": labels, "annotations": annotations},
                "spec": spec}


def _needs(o: Observed, state: str) -> bool:
    """Whether a child's Job must be asked for `state`: it was last asked for another
    (a Job held at its cap is still asked to run; it resumes when the cap is raised)."""
    if o.manifest is not None:
        return (o.manifest.get("spec") or {}).get("state", "Running") != state
    if state == "Running" and o.reason == Reason.MAX_COST_REACHED:
        return False  # held at a cap, as far as a backend that keeps no manifest says
    return not _follows(o.phase, state)


def _follows(phase: str | None, state: str) -> bool:
    """Whether a child in `phase` already does what `state` asks."""
    if state == "Suspended":
        return phase in (Phase.SUSPENDED, Phase.SUSPENDING)
    if state == "Cancelled":
        return phase in (Phase.CANCELLED, Phase.CANCELLING)
    return phase not in (Phase.SUSPENDED, Phase.SUSPENDING)


def held_by_budget(entries: list[dict[str, Any]], what: str) -> tuple[str, str, str] | None:
    """(Suspended, BudgetExceeded, why) when nothing of a Pipeline or Sweep runs and a
    child waits Suspended because the backend holds its project to the budget: the parent
    shows the hold, not a bare Queued."""
    if any(e["phase"] in (Phase.RUNNING, Phase.PROVISIONING, Phase.RECOVERING)
           for e in entries):
        return None
    held = [e for e in entries if e["phase"] in (Phase.SUSPENDED, Phase.SUSPENDING)
            and e.get("reason") == Reason.BUDGET_EXCEEDED]
    if not held:
        return None
    names = ", ".join(str(e.get("name", e.get("index"))) for e in held)
    return (Phase.SUSPENDED, Reason.BUDGET_EXCEEDED,
            f"the project's budget holds {what} {names}")
