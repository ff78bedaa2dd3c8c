"""Which Job a Job command means, and what its backend says of it now.

`get`, `describe`, `logs` and `cp` take `job/NAME`: a Job Git declares (in the
inventory), or a Pipeline's stage or a Sweep's cell Job (found through its parent,
`workloads.children`). The inventory holds what the reconciler last recorded; a stage's
or a cell's Job is read from its backend, where the backend answers, and any Job's
backend may keep events of its own (`HasEvents`: how its runs started, ended, what
contained them). `Backends` builds each backend a command reads once and closes them; a
backend that cannot be built or does not answer leaves a note, never an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nodus_gitops.floor.errors import ConfigError, NodusGitopsError
from nodus_gitops.output import backend_events
from nodus_gitops.providers.base import HasEvents, Provider
from nodus_gitops.state.records import EventRecord, InventoryRecord
from nodus_gitops.workloads.children import ChildJob, find_child

if TYPE_CHECKING:  # types only: `get` reads through state.quick_read, not the Store
    from nodus_gitops.config import Settings
    from nodus_gitops.state.quick_read import QuickReader
    from nodus_gitops.state.store import Store


class JobNotFound(ConfigError):
    """No Job of that name in the store: neither one it records nor a stage's or cell's."""


def find_job(store: Store | QuickReader, name: str
             ) -> tuple[InventoryRecord | None, ChildJob | None]:
    """The Job `name`: one the inventory records, else a stage's or a cell's Job (in the
    first project that has one). JobNotFound when there is none; ConfigError when its
    Pipeline or Sweep has not created it (yet)."""
    records = store.list_inventory()
    for r in records:
        if r.key.kind == "Job" and r.key.name == name:
            return r, None
    for project in sorted({r.key.project for r in records}):
        child = find_child(store, project, name)
        if child is not None and not child.created:
            raise ConfigError(f"job/{name} not found: {child.title} has not created its Job "
                              f"({child.entry.get('phase') or 'not started'})")
        if child is not None:
            return None, child
    raise JobNotFound(f"job/{name} not found")


def owner_of(job: InventoryRecord | ChildJob) -> InventoryRecord:
    """The record whose backend runs the Job: its own, or its Pipeline's or Sweep's."""
    return job.parent if isinstance(job, ChildJob) else job


def backend_name(settings: Settings, owner: InventoryRecord | None) -> str:
    """The configured backend that runs `owner`'s Jobs: its binding's, else the provider
    it records; for no record, the only one configured, else `local`."""
    by_id = {b.id: b.provider for b in settings.bindings}
    name = (by_id.get(owner.binding_id) or owner.provider) if owner is not None else None
    if name is None:
        names = sorted(set(by_id.values())) or sorted(settings.providers)
        name = names[0] if len(names) == 1 else "local"
    return name


def job_backend(settings: Settings, owner: InventoryRecord | None) -> Provider:
    """That backend, as `build_backend` makes it; the caller closes it."""
    from nodus_gitops.backends import build_backend  # what runs Jobs: only when needed

    name = backend_name(settings, owner)
    return build_backend(name, settings.provider_settings(name), settings.state_dir)


@dataclass
class Backends:
    """The backends one command reads, each built once; `notes` says which could not be
    read, and why. Use as a context manager: leaving it closes them."""

    settings: Settings
    notes: list[str] = field(default_factory=list)
    _built: dict[str, Provider | None] = field(default_factory=dict)

    def of(self, owner: InventoryRecord) -> Provider | None:
        name = backend_name(self.settings, owner)
        if name not in self._built:
            try:
                self._built[name] = job_backend(self.settings, owner)
            except NodusGitopsError as exc:
                self._built[name] = None
                self.notes.append(f"the {name} backend was not read: {exc}")
        return self._built[name]

    def __enter__(self) -> Backends:
        return self

    def __exit__(self, *_exc: Any) -> None:
        for backend in self._built.values():
            if backend is not None:
                backend.close()

    def child_now(self, child: ChildJob) -> InventoryRecord:
        """A stage's or a cell's Job as its backend has it now, else as its parent
        recorded it."""
        backend = self.of(child.parent)
        if backend is None:
            return child.record()
        try:
            return child.record(backend.get(child.key), asked=True)
        except NodusGitopsError as exc:
            self.notes.append(f"the {backend.name} backend did not answer for "
                              f"{child.key.name}: {exc}")
            return child.record()

    def events(self, job: InventoryRecord | ChildJob) -> list[EventRecord]:
        """The events the Job's backend keeps of it (none where it keeps none)."""
        backend = self.of(owner_of(job))
        if not isinstance(backend, HasEvents):
            return []
        try:
            return backend_events(backend.events(job.key), job.key)
        except NodusGitopsError as exc:
            self.notes.append(f"the {backend.name} backend kept no events of "
                              f"{job.key.name} here: {exc}")
            return []
