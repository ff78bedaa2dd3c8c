"""The provider interface: a small Protocol over plain dataclasses, and the optional
capabilities a backend may declare.

A provider runs resources on one compute backend. The reconciler core talks to
nothing else: every backend error becomes `TransientError(delay)` (retry later) or
`PermanentError` (record it, never retry in a loop) inside the provider, in one place.
Deleting something that is already gone is not an error.

`Provider` is what every backend has. What only some have is a small protocol of its
own (`Estimates`, `DryRuns`, `HasLogs`, `HasOutputs`, `HasEvents`, `Suspends`,
`ExpiresFinished`, `HoldsBudgets`, listed in `CAPABILITIES`): a backend class names
the ones it implements among its bases, and callers ask `isinstance(provider, HasLogs)`,
never `getattr`/`hasattr`. A wrapper (the metrics wrapper, the workload controllers) derives
from `Wrapper`, whose instances have exactly the capabilities of what they wrap.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from nodus_gitops.floor.errors import NotFoundError
from nodus_gitops.floor.identity import ResourceKey, owned_by
from nodus_gitops.floor.phases import TERMINAL_PHASES, Phase


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


@dataclass(frozen=True)
class LogInfo:
    """What a backend holds of one index's logs: how many indexes the Job runs, the
    attempts of this index that wrote a log (in order), and the Job's phase when the
    backend knows it without asking anything (None otherwise)."""

    indexes: int
    attempts: tuple[int, ...]
    phase: str | None = None


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
        annotations); `workload` is the full new manifest. Suspending and resuming are
        such a change (`spec.state`), done in place by a backend that declares `Suspends`;
        Cancelled is one too, and every backend stops the Job for it."""

    def delete(self, key: ResourceKey) -> None:
        """Stop and remove the resource and its outputs. Already gone is success."""

    def get(self, key: ResourceKey) -> Observed | None:
        """The resource's live status, or None when the backend has no such resource."""

    def list_owned(self, project: str, instance: str) -> list[Observed]:
        """Every resource in the project carrying this instance's ownership labels, each
        with its `manifest` as created."""

    def close(self) -> None:
        """Release what the provider holds (HTTP clients, pre-started processes); running
        resources keep running. Called once, at shutdown."""


# -- optional capabilities ------------------------------------------------------------


@runtime_checkable
class Estimates(Protocol):
    """A backend that can price a manifest before it runs."""

    def estimate(self, manifest: dict[str, Any]) -> str:
        """The expected cost in US dollars; ValueError (or "unknown") when it cannot tell."""
        ...


@runtime_checkable
class DryRuns(Protocol):
    """A backend with a server-side dry run: what it would default or reject."""

    def dry_run(self, workload: Workload, changes: dict[str, Any] | None = None) -> Any:
        """What a create (or, with `changes`, a patch) would do; nothing is changed."""
        ...


@runtime_checkable
class HasLogs(Protocol):
    """A backend whose Jobs' output can be read, one index at a time (a Pipeline's stage
    and a Sweep's cell are Jobs: read them by their Job's key)."""

    def logs(self, key: ResourceKey, index: int | None = None,
             follow: bool = False) -> Iterator[str]:
        """The lines (without the newline) of the latest attempt of `index` (0 by
        default); following waits for more until that Job (or attempt) ends.
        NotFoundError when the Job has not run on this backend."""
        ...

    def log_info(self, key: ResourceKey, index: int = 0) -> LogInfo:
        """Read-only facts about the logs of `index`; NotFoundError when not run here."""
        ...


@runtime_checkable
class HasOutputs(Protocol):
    """A backend that stores a succeeded Job's declared outputs with their SHA-256."""

    def output_location(self, key: ResourceKey, output_name: str) -> Path:
        """Where the stored output is (a Pipeline stage's input); NotFoundError if none."""
        ...

    def copy_output(self, key: ResourceKey, output_name: str,
                    dest: Path | str) -> tuple[Path, int, str]:
        """Copy it to `dest`, checked against the recorded SHA-256: (path, size, sha256)."""
        ...


@runtime_checkable
class HasEvents(Protocol):
    """A backend that keeps its own event log per Job."""

    def events(self, key: ResourceKey) -> list[dict[str, Any]]:
        """The Job's events, oldest first."""
        ...


@runtime_checkable
class Suspends(Protocol):
    """A backend that can suspend a running Job in place (`spec.state: Suspended`) and
    resume it, where `can_suspend()` says so (Slurm: only with scontrol on this host)."""

    def can_suspend(self) -> bool:
        ...


@runtime_checkable
class ExpiresFinished(Protocol):
    """A provider that removes finished resources whose TTL passed when asked."""

    def expire_finished(self) -> list[ResourceKey]:
        """Remove what is due; returns the keys removed."""
        ...


@runtime_checkable
class HoldsBudgets(Protocol):
    """A backend that holds a project to its budget: told on every status tick whether
    the project spent its budget, it suspends the project's running Jobs (saving their
    state, reason BudgetExceeded) and starts none of them while the hold lasts, and
    resumes them once it is lifted."""

    def hold_budget(self, project: str, exceeded: bool, message: str) -> None:
        """Hold (`exceeded`) or release `project`; `message` says why, for its Jobs."""
        ...


CAPABILITIES: tuple[type, ...] = (Estimates, DryRuns, HasLogs, HasOutputs, HasEvents,
                                  Suspends, ExpiresFinished, HoldsBudgets)


def capabilities_of(provider: object) -> frozenset[type]:
    """The optional capabilities `provider` has."""
    return frozenset(c for c in CAPABILITIES if isinstance(provider, c))


# -- wrappers that keep what they wrap can do -----------------------------------------


class Wrapper:
    """The base of a provider that wraps another (`inner`) and has exactly its
    capabilities, no more and no fewer.

    Constructing a subclass `W(inner, ...)` returns an instance of a subclass of `W`
    built once per set of capabilities: `W` plus one forwarding mixin per capability
    `inner` has (`_FORWARDERS`), each calling `self._forward(operation, bound method,
    *args)`. So `isinstance(W(inner), HasLogs) == isinstance(inner, HasLogs)` for every
    capability, with no `__getattr__`. A method `W` defines itself wins over the mixin
    (it comes first in the bases): such a capability is `W`'s own, whatever `inner`
    has. Override `_forward` to do something around every forwarded call (metrics)."""

    inner: Any
    _base: ClassVar[type | None] = None  # set on the generated subclasses

    def __new__(cls, inner: object, *args: Any, **kwargs: Any) -> Any:
        return object.__new__(_wrapper_class(cls._base or cls, capabilities_of(inner)))

    def _forward(self, operation: str, fn: Callable[..., Any], *args: Any,
                 **kwargs: Any) -> Any:
        return fn(*args, **kwargs)


class _ForwardEstimates(Estimates):
    def estimate(self, manifest: dict[str, Any], *args: Any, **kwargs: Any) -> str:
        return self._forward("estimate", self.inner.estimate, manifest,  # type: ignore
                             *args, **kwargs)


class _ForwardDryRuns(DryRuns):
    def dry_run(self, workload: Workload, changes: dict[str, Any] | None = None) -> Any:
        return self._forward("dry_run", self.inner.dry_run, workload, changes)  # type: ignore


class _ForwardLogs(HasLogs):
    def logs(self, key: ResourceKey, index: int | None = None,
             follow: bool = False) -> Iterator[str]:
        return self._forward("logs", self.inner.logs, key, index, follow)  # type: ignore

    def log_info(self, key: ResourceKey, index: int = 0) -> LogInfo:
        return self._forward("log_info", self.inner.log_info, key, index)  # type: ignore


class _ForwardOutputs(HasOutputs):
    def output_location(self, key: ResourceKey, output_name: str) -> Path:
        return self._forward("output_location", self.inner.output_location,  # type: ignore
                             key, output_name)

    def copy_output(self, key: ResourceKey, output_name: str,
                    dest: Path | str) -> tuple[Path, int, str]:
        return self._forward("copy_output", self.inner.copy_output,  # type: ignore
                             key, output_name, dest)


class _ForwardEvents(HasEvents):
    def events(self, key: ResourceKey) -> list[dict[str, Any]]:
        return self._forward("events", self.inner.events, key)  # type: ignore


class _ForwardSuspends(Suspends):
    def can_suspend(self) -> bool:
        return self.inner.can_suspend()  # type: ignore[attr-defined]


class _ForwardExpiry(ExpiresFinished):
    def expire_finished(self) -> list[ResourceKey]:
        return self._forward("expire", self.inner.expire_finished)  # type: ignore


class _ForwardBudgets(HoldsBudgets):
    def hold_budget(self, project: str, exceeded: bool, message: str) -> None:
        return self._forward("hold_budget", self.inner.hold_budget,  # type: ignore
                             project, exceeded, message)


_FORWARDERS: dict[type, type] = {
    Estimates: _ForwardEstimates, DryRuns: _ForwardDryRuns, HasLogs: _ForwardLogs,
    HasOutputs: _ForwardOutputs, HasEvents: _ForwardEvents, Suspends: _ForwardSuspends,
    ExpiresFinished: _ForwardExpiry, HoldsBudgets: _ForwardBudgets,
}


@cache
def _wrapper_class(base: type, caps: frozenset[type]) -> type:
    """`base` with the forwarding mixin of each capability in `caps` (one class per set)."""
    names = [c.__name__ for c in CAPABILITIES if c in caps]
    return type(f"{base.__name__}[{'+'.join(names)}]" if names else base.__name__,
                (base, *(_FORWARDERS[c] for c in CAPABILITIES if c in caps)),
                {"_base": base, "__module__": base.__module__, "__doc__": base.__doc__})

Handler = Callable[[str, ResourceKey, Any], Observed | None]


def _as_stored(observed: Observed, manifest: dict[str, Any]) -> Observed:
    """`observed` running `manifest`: its labels, annotations and, for a Job asked to stop,
    the Cancelled phase (a finished Job keeps the phase it ended in)."""
    meta = manifest.get("metadata") or {}
    phase = observed.phase
    asked = (manifest.get("spec") or {}).get("state")
    if asked == Phase.CANCELLED and phase not in TERMINAL_PHASES:
        phase = Phase.CANCELLED
    return replace(observed, phase=phase, labels=dict(meta.get("labels") or {}),
                   annotations=dict(meta.get("annotations") or {}), manifest=manifest)


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
        self.closed = False

    def _call(self, op: str, key: ResourceKey, arg: Any) -> Observed | None:
        self.calls.append((op, key))
        return self._handler(op, key, arg) if self._handler else None

    def create(self, workload: Workload, idempotency_key: str) -> Observed:
        if workload.key in self.resources:
            return self.resources[workload.key]
        observed = self._call("create", workload.key, workload) or _as_stored(Observed(
            workload.key, provider_id=f"fake-{len(self.resources) + 1}", phase="Running"),
            workload.manifest)
        self.resources[workload.key] = observed
        self.manifests[workload.key] = workload.manifest
        return observed

    def patch(self, workload: Workload, changes: dict[str, Any]) -> Observed:
        """The patched manifest is what `get` shows from now on; `spec.state: Cancelled`
        cancels an unfinished Job, as every backend does."""
        if workload.key not in self.resources:
            raise NotFoundError(f"{workload.key.short} does not exist")
        observed = self._call("patch", workload.key, changes) or _as_stored(
            self.resources[workload.key], workload.manifest)
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

    def close(self) -> None:
        self.closed = True

    def list_owned(self, project: str, instance: str) -> list[Observed]:
        owned = []
        for k, o in sorted(self.resources.items()):
            manifest = self.manifests.get(k)
            marks = manifest if manifest is not None else {"metadata": {"labels": o.labels}}
            if k.project == project and owned_by(marks, instance):
                owned.append(replace(o, manifest=manifest))
        return owned
