"""The provider interface: a small Protocol over plain dataclasses.

A provider runs resources on one compute backend. The reconciler core talks to
nothing else: every backend error becomes `TransientError(delay)` (retry later) or
`PermanentError` (record it, never retry in a loop) inside the provider, in one place.
Deleting something that is already gone is not an error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from nodus_gitops.floor.errors import NotFoundError
from nodus_gitops.floor.identity import ResourceKey, owned_by


@dataclass(frozen=True)
class Workload:
    """What to run: the full manifest, ownership labels and annotations already set."""

    key: ResourceKey
    manifest: dict[str, Any]
    spec_hash: str


@dataclass(frozen=True)
class Observed:
    """What the backend reports for one resource."""

    key: ResourceKey
    provider_id: str
    phase: str
    reason: str | None = None
    message: str | None = None
    fix: str | None = None
    cost_usd: str = "0"
    status: dict[str, Any] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    # The manifest as created (ownership labels and annotations included), from what the
    # backend stored: what a reconciler that lost its state store adopts.
    manifest: dict[str, Any] | None = None


@runtime_checkable
class Provider(Protocol):
    """A compute backend. `native_kinds` are the kinds it runs itself (others are
    driven by the reconciler's own workload controllers as Jobs)."""

    name: str
    native_kinds: frozenset[str]

    def create(self, workload: Workload, idempotency_key: str) -> Observed:
        """Start the resource. Creating the same idempotency key twice returns the first."""

    def patch(self, workload: Workload, changes: dict[str, Any]) -> Observed:
        """Apply an in-place change (a JSON merge patch of `spec`, metadata labels and
        annotations); `workload` is the full new manifest."""

    def delete(self, key: ResourceKey) -> None:
        """Stop and remove the resource and its outputs. Already gone is success."""

    def get(self, key: ResourceKey) -> Observed | None:
        """The resource's live status, or None when the backend has no such resource."""

    def list_owned(self, project: str, instance: str) -> list[Observed]:
        """Every resource in the project carrying this instance's ownership labels, each
        with its `manifest` as created."""


Handler = Callable[[str, ResourceKey, Any], Observed | None]


class FakeProvider:
    """An in-memory provider built from one handler function, for tests of the core
    (like httpx's MockTransport). The handler sees `(operation, key, argument)` and may
    raise provider errors; by default every resource is created Running and kept."""

    def __init__(
        self, handler: Handler | None = None, *, native_kinds: frozenset[str] | None = None
    ) -> None:
        self.name = "fake"
        self.native_kinds = (
            native_kinds if native_kinds is not None else frozenset({"Job", "Pipeline", "Sweep"})
        )
        self.resources: dict[ResourceKey, Observed] = {}
        self.manifests: dict[ResourceKey, dict[str, Any]] = {}
        self.calls: list[tuple[str, ResourceKey]] = []
        self._handler = handler

    def _call(self, op: str, key: ResourceKey, arg: Any) -> Observed | None:
        self.calls.append((op, key))
        return self._handler(op, key, arg) if self._handler else None

    def create(self, workload: Workload, idempotency_key: str) -> Observed:
        if workload.key in self.resources:
            return self.resources[workload.key]
        meta = workload.manifest.get("metadata", {})
        observed = self._call("create", workload.key, workload) or Observed(
            workload.key,
            provider_id=f"fake-{len(self.resources) + 1}",
            phase="Running",
            labels=dict(meta.get("labels", {})),
            annotations=dict(meta.get("annotations", {})),
            manifest=workload.manifest,
        )
        self.resources[workload.key] = observed
        self.manifests[workload.key] = workload.manifest
        return observed

    def patch(self, workload: Workload, changes: dict[str, Any]) -> Observed:
        if workload.key not in self.resources:
            raise NotFoundError(f"{workload.key.short} does not exist")
        observed = self._call("patch", workload.key, changes) or self.resources[workload.key]
        self.resources[workload.key] = observed
        self.manifests[workload.key] = workload.manifest
        return observed

    def delete(self, key: ResourceKey) -> None:
        self._call("delete", key, None)
        self.resources.pop(key, None)
        self.manifests.pop(key, None)

    def get(self, key: ResourceKey) -> Observed | None:
        self._call("get", key, None)
        return self.resources.get(key)

    def list_owned(self, project: str, instance: str) -> list[Observed]:
        owned = []
        for k, o in sorted(self.resources.items()):
            manifest = self.manifests.get(k)
            marks = manifest if manifest is not None else {"metadata": {"labels": o.labels}}
            if k.project == project and owned_by(marks, instance):
                owned.append(replace(o, manifest=manifest))
        return owned
