"""What the Pipeline and Sweep controllers share: their records, the child Jobs they
create, and how a composite follows its `spec.state` and cost cap."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from providers.base import Observed, Provider, Workload
from reconciler.errors import NotFoundError, ProviderError
from reconciler.identity import (
    ANNOTATION_SPEC_HASH,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    ResourceKey,
)
from reconciler.phases import Phase, Reason, is_terminal
from reconciler.plan import spec_hash
from reconciler.quantities import parse_usd


@dataclass
class Record:
    """A composite as its controller remembers it."""

    key: ResourceKey
    manifest: dict[str, Any]
    idempotency_key: str
    skipped: list[str] = field(default_factory=list)  # children that will never run
    capped: bool = False  # suspended by the controller at the cost cap

    def to_json(self) -> dict[str, Any]:
        return {"key": str(self.key), "manifest": self.manifest,
                "idempotencyKey": self.idempotency_key, "skipped": self.skipped,
                "capped": self.capped}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Record:
        return cls(ResourceKey.parse(data["key"]), data["manifest"], data["idempotencyKey"],
                   list(data.get("skipped", [])), bool(data.get("capped")))

    @property
    def spec(self) -> dict[str, Any]:
        return self.manifest.get("spec", {})

    @property
    def labels(self) -> dict[str, str]:
        return self.manifest.get("metadata", {}).get("labels", {})

    @property
    def annotations(self) -> dict[str, str]:
        return self.manifest.get("metadata", {}).get("annotations", {})


class RecordStore:
    """One JSON file per composite, written atomically."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def _path(self, key: ResourceKey) -> Path:
        return self.root / key.project / key.kind / f"{key.name}.json"

    def load(self, key: ResourceKey) -> Record | None:
        try:
            return Record.from_json(json.loads(self._path(key).read_text()))
        except FileNotFoundError:
            return None

    def save(self, record: Record) -> None:
        path = self._path(record.key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "w") as f:
            json.dump(record.to_json(), f)
        os.replace(tmp, path)

    def remove(self, key: ResourceKey) -> None:
        self._path(key).unlink(missing_ok=True)

    def keys(self, project: str, kind: str) -> list[ResourceKey]:
        folder = self.root / project / kind
        if not folder.is_dir():
            return []
        return [ResourceKey(kind, project, p.stem) for p in sorted(folder.glob("*.json"))]


@dataclass(frozen=True)
class Child:
    """One stage or cell: its Job's name and spec, and what the composite calls it."""

    id: str  # stage name or cell index
    job: str
    spec: dict[str, Any]
    depends_on: tuple[str, ...] = ()


class Controller:
    """Drives one composite kind. Subclasses say what the children are and how the
    composite's phase and status follow from theirs."""

    kind = ""
    child_label = ""
    default_max_parallel: int | None = None

    def __init__(self, inner: Provider, records: RecordStore) -> None:
        self.inner = inner
        self.records = records

    # --- what a subclass provides ----------------------------------------------------

    def children(self, record: Record) -> list[Child]:
        raise NotImplementedError

    def ready(self, record: Record, child: Child, phases: dict[str, str | None]) -> bool:
        return True

    def on_failures(self, record: Record, children: list[Child],
                    phases: dict[str, str | None]) -> None:
        """Decide what a failed child means for the others (skip, cancel)."""

    def status(self, record: Record, children: list[Child],
               observed: dict[str, Observed | None]) -> tuple[str, str | None, str | None,
                                                           dict[str, Any]]:
        raise NotImplementedError

    def child_inputs(self, record: Record, child: Child) -> list[dict[str, str]]:
        return []

    # --- the Provider operations ----------------------------------------------------------

    def create(self, workload: Workload, idempotency_key: str) -> Observed:
        record = self.records.load(workload.key)
        if record is None or record.idempotency_key != idempotency_key:
            record = Record(workload.key, workload.manifest, idempotency_key)
            self.records.save(record)
        return self._step(record)

    def patch(self, workload: Workload, changes: dict[str, Any]) -> Observed:
        record = self.records.load(workload.key)
        if record is None:
            raise NotFoundError(f"{workload.key.short} does not exist")
        record.manifest = workload.manifest
        cap = parse_usd(record.spec.get("maxCostUSD") or "")
        if record.capped and (cap is None or self._cost(record) < cap):
            record.capped = False  # the cap was raised: carry on
        self.records.save(record)
        return self._step(record)

    def delete(self, key: ResourceKey) -> None:
        record = self.records.load(key)
        if record is None:
            return
        for child in self.children(record):
            self.inner.delete(self._child_key(record, child))
        self.records.remove(key)

    def get(self, key: ResourceKey) -> Observed | None:
        record = self.records.load(key)
        return None if record is None else self._step(record)

    # --- the control loop, run on every read --------------------------------------------

    def _child_key(self, record: Record, child: Child) -> ResourceKey:
        return ResourceKey("Job", record.key.project, child.job)

    def _observe(self, record: Record, children: list[Child]) -> dict[str, Observed | None]:
        return {c.id: self.inner.get(self._child_key(record, c)) for c in children}

    def _cost(self, record: Record, observed: dict[str, Observed | None] | None = None) -> Decimal:
        if observed is None:
            observed = self._observe(record, self.children(record))
        return sum((Decimal(o.cost_usd or "0") for o in observed.values() if o), Decimal(0))

    def _step(self, record: Record) -> Observed:
        children = self.children(record)
        observed = self._observe(record, children)
        phases = {cid: (o.phase if o else None) for cid, o in observed.items()}
        wanted = record.spec.get("state", "Running")
        self.on_failures(record, children, phases)
        cap = parse_usd(record.spec.get("maxCostUSD") or "")
        if cap is not None and not record.capped and self._cost(record, observed) >= cap:
            record.capped = True
        target = "Cancelled" if wanted == "Cancelled" else (
            "Suspended" if wanted == "Suspended" or record.capped else "Running")
        for child in children:
            o = observed[child.id]
            if o is None or is_terminal(o.phase):
                continue
            if child.id in record.skipped and target == "Running":
                self._set_state(record, child, "Cancelled")
            else:
                self._set_state(record, child, target, o)
        if target == "Running":
            self._start_ready(record, children, phases)
        self.records.save(record)
        observed = self._observe(record, children)
        phase, reason, message, status = self.status(record, children, observed)
        if target == "Suspended" and not is_terminal(phase):
            phase = Phase.SUSPENDED
            reason = Reason.MAX_COST_REACHED if record.capped and wanted != "Suspended" else None
        cost = self._cost(record, observed)
        return Observed(record.key, provider_id=f"{self.kind.lower()}/{record.key.name}",
                        phase=phase, reason=reason, message=message,
                        fix=_fix(reason), cost_usd=f"{cost:.6f}".rstrip("0").rstrip(".")
                        if cost else "0", status=status, labels=record.labels,
                        annotations=record.annotations)

    def _set_state(self, record: Record, child: Child, state: str,
                   observed: Observed | None = None) -> None:
        if observed is not None:
            if _follows(observed.phase, state):
                return
            if state == "Running" and observed.reason == Reason.MAX_COST_REACHED:
                return  # a child's own lower cap holds it; raising that cap resumes it
        manifest = self._child_manifest(record, child, state)
        try:
            self.inner.patch(Workload(self._child_key(record, child), manifest,
                                      spec_hash(manifest)), {"spec": {"state": state}})
        except ProviderError:
            pass  # tried again on the next read

    def _start_ready(self, record: Record, children: list[Child],
                     phases: dict[str, str | None]) -> None:
        limit = record.spec.get("maxParallel") or self.default_max_parallel or len(children)
        running = sum(1 for c in children if phases[c.id] is not None
                      and not is_terminal(phases[c.id]))
        for child in children:
            if running >= limit:
                break
            if phases[child.id] is not None or child.id in record.skipped:
                continue
            if not self.ready(record, child, phases):
                continue
            manifest = self._child_manifest(record, child, "Running")
            self.inner.create(Workload(self._child_key(record, child), manifest,
                                       spec_hash(manifest)),
                              f"{record.idempotency_key}/{child.id}")
            phases[child.id] = Phase.QUEUED
            running += 1

    def _child_manifest(self, record: Record, child: Child, state: str) -> dict[str, Any]:
        spec = dict(child.spec)
        inputs = self.child_inputs(record, child)
        if inputs:
            spec["inputs"] = inputs
        if state != "Running":
            spec["state"] = state
        labels = {k: v for k, v in record.labels.items()
                  if k in (LABEL_MANAGED_BY, LABEL_INSTANCE)}
        labels[self.child_label] = record.key.name
        return {"apiVersion": "nodus.dev/v1", "kind": "Job",
                "metadata": {"name": child.job, "labels": labels,
                             "annotations": {ANNOTATION_SPEC_HASH: spec_hash({"spec": spec})}},
                "spec": spec}


def _follows(phase: str | None, state: str) -> bool:
    """Whether a child in `phase` already does what `state` asks."""
    if state == "Suspended":
        return phase in (Phase.SUSPENDED, Phase.SUSPENDING)
    if state == "Cancelled":
        return phase in (Phase.CANCELLED, Phase.CANCELLING)
    return phase not in (Phase.SUSPENDED, Phase.SUSPENDING)


def _fix(reason: str | None) -> str | None:
    from reconciler.phases import FIXES

    return FIXES.get(reason) if reason else None
