"""Workload controllers: Pipelines and Sweeps run as Jobs on backends that only run Jobs.

`CompositeProvider` wraps a Job-level provider and presents all three kinds. A kind the
backend runs natively passes straight through; a Pipeline or Sweep is driven by its
controller (one module per kind, picked from `CONTROLLERS`), which creates the stage or
cell Jobs on the backend and derives the composite's status from theirs each time it
is read. The composite's own record (its manifest and what it decided, such as a stage
skipped) is a small JSON file, so a restarted reconciler carries on where it stopped.
"""

from __future__ import annotations

from dataclasses import replace

from providers.base import Observed, Provider, Workload
from reconciler.errors import NotFoundError
from reconciler.identity import ResourceKey, owned_by
from reconciler.workloads.base import Controller, RecordStore
from reconciler.workloads.pipeline import PipelineController
from reconciler.workloads.sweep import SweepController

CONTROLLERS: dict[str, type[Controller]] = {
    "Pipeline": PipelineController,
    "Sweep": SweepController,
}


class CompositeProvider:
    """Presents Job, Pipeline and Sweep on top of `inner`, whatever it runs natively."""

    def __init__(self, inner: Provider, state_dir) -> None:
        self.inner = inner
        self.name = inner.name
        self.native_kinds = frozenset({"Job", "Pipeline", "Sweep"})
        self.records = RecordStore(state_dir)

    def _controller(self, kind: str) -> Controller | None:
        if kind in self.inner.native_kinds or kind not in CONTROLLERS:
            return None
        return CONTROLLERS[kind](self.inner, self.records)

    def create(self, workload: Workload, idempotency_key: str) -> Observed:
        controller = self._controller(workload.key.kind)
        if controller is None:
            return self.inner.create(workload, idempotency_key)
        return controller.create(workload, idempotency_key)

    def patch(self, workload: Workload, changes: dict) -> Observed:
        controller = self._controller(workload.key.kind)
        if controller is None:
            return self.inner.patch(workload, changes)
        return controller.patch(workload, changes)

    def delete(self, key: ResourceKey) -> None:
        controller = self._controller(key.kind)
        if controller is None:
            return self.inner.delete(key)
        controller.delete(key)

    def get(self, key: ResourceKey) -> Observed | None:
        controller = self._controller(key.kind)
        if controller is None:
            return self.inner.get(key)
        return controller.get(key)

    def list_owned(self, project: str, instance: str) -> list[Observed]:
        driven = [kind for kind in CONTROLLERS if self._controller(kind) is not None]
        # A stage or cell Job is part of its composite, not a resource of its own.
        child_labels = [CONTROLLERS[kind].child_label for kind in driven]
        owned = [o for o in self.inner.list_owned(project, instance)
                 if not any(label in o.labels for label in child_labels)]
        for kind in driven:
            for key in self.records.keys(project, kind):
                record = self.records.load(key)
                if record is None or not owned_by(record.manifest, instance):
                    continue  # not read: reading a composite steps it
                observed = self.get(key)
                if observed is not None:
                    owned.append(replace(observed, manifest=record.manifest))
        return owned

    def __getattr__(self, name: str):  # estimate(), output_location() and the like
        return getattr(self.inner, name)


__all__ = ["CompositeProvider", "CONTROLLERS", "NotFoundError"]
