"""Workload controllers: Pipelines and Sweeps run as Jobs on backends that only run Jobs.

`CompositeProvider` wraps a Job-level provider and presents all three kinds. A kind the
backend runs natively passes straight through; a Pipeline or Sweep is driven by its
controller (one module per kind, picked from `CONTROLLERS`), which creates the stage or
cell Jobs on the backend and derives the composite's status from theirs each time it
is read. The composite's own record (its manifest, what it decided, such as a stage
skipped, and each finished child's result) is a small JSON file, so a restarted
reconciler carries on where it stopped. Nothing reads a finished composite by itself:
`expire_finished()` is the periodic step that applies the TTLs (`expiry`).

`CompositeProvider` is a `providers.base.Wrapper`: it has exactly the optional
capabilities of the backend it wraps (its logs, outputs and estimates are the backend's,
read by the Job's key, a stage's or a cell's Job included), plus `ExpiresFinished`,
which is its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from nodus_gitops.floor.errors import NotFoundError, ProviderError
from nodus_gitops.floor.identity import ResourceKey, owned_by
from nodus_gitops.providers.base import (
    ExpiresFinished,
    Observed,
    Provider,
    Workload,
    Wrapper,
)
from nodus_gitops.workloads.base import Controller
from nodus_gitops.workloads.pipeline import PipelineController
from nodus_gitops.workloads.records import RecordStore
from nodus_gitops.workloads.sweep import SweepController

CONTROLLERS: dict[str, type[Controller]] = {
    "Pipeline": PipelineController,
    "Sweep": SweepController,
}


class CompositeProvider(Wrapper, ExpiresFinished):
    """Presents Job, Pipeline and Sweep on top of `inner`, whatever it runs natively;
    every optional capability of `inner` is forwarded (see `Wrapper`)."""

    def __init__(self, inner: Provider, state_dir, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.inner = inner
        self.name = inner.name
        self.native_kinds = frozenset({"Job", "Pipeline", "Sweep"})
        self.records = RecordStore(state_dir)
        self.clock = clock

    def _controller(self, kind: str) -> Controller | None:
        if kind in self.inner.native_kinds or kind not in CONTROLLERS:
            return None
        return CONTROLLERS[kind](self.inner, self.records, self.clock)

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
                if record is None or record.expired or not owned_by(record.manifest,
                                                                    instance):
                    continue  # not read: reading a composite steps it
                observed = self.get(key)
                if observed is not None:
                    owned.append(replace(observed, manifest=record.manifest))
        return owned

    def expire_finished(self) -> list[ResourceKey]:
        """Remove every finished composite whose ttlSecondsAfterFinished has passed, with
        its child Jobs, and the finished children whose own TTL has (and whatever the
        inner backend removes the same way). The service calls this periodically: no
        read of a finished composite ever comes by itself."""
        removed = self.inner.expire_finished() if isinstance(
            self.inner, ExpiresFinished) else []
        for kind in CONTROLLERS:
            controller = self._controller(kind)
            for key in self.records.all_keys(kind) if controller else []:
                try:
                    if controller.expire(key):
                        removed.append(key)
                except ProviderError:
                    continue  # tried again at the next call
        return removed

    def close(self) -> None:
        self.inner.close()


__all__ = ["CompositeProvider", "CONTROLLERS", "NotFoundError"]
