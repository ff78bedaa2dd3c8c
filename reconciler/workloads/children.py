"""The stage and cell Jobs of Pipelines and Sweeps, as Jobs a user reaches by name.

Each stage runs as a Job `<pipeline>-<stage>` and each cell as a Job `<sweep>-<index>`,
and the parent's recorded status names every one (`status.stages[].job`,
`status.cells[].job`, with whether it was `created`). Git declares the parent, not these
Jobs, so the inventory holds only the parent; every Job command (get, describe, logs, cp,
the dashboard) finds a child through it: `children_of` lists a parent's, `find_child`
finds one by its Job's name, and `ChildJob.record` is the child as a resource, from what
its backend says of it now or, when not asked (or gone), from its parent's record.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from nodus_gitops.floor.identity import ANNOTATION_SPEC_HASH, ResourceKey
from nodus_gitops.floor.phases import is_terminal
from nodus_gitops.providers.base import Observed
from nodus_gitops.state.records import InventoryRecord
from nodus_gitops.workloads.pipeline import PipelineController
from nodus_gitops.workloads.sweep import SweepController

# parent kind -> (the status list naming its Jobs, what one entry is, the field naming it)
PARENTS: dict[str, tuple[str, str, str]] = {
    "Pipeline": ("stages", "stage", "name"),
    "Sweep": ("cells", "cell", "index"),
}
# parent kind -> the label its controller puts on every child Job (`nodus.dev/pipeline`)
_CHILD_LABEL = {"Pipeline": PipelineController.child_label,
                "Sweep": SweepController.child_label}
NOT_STARTED = ("Pending", "Skipped")
# What a child's status shows from its parent's entry when its backend is not asked.
_ENTRY_STATUS = ("startTime", "completionTime", "wallSeconds", "unitsPerSecond")


class Resources(Protocol):
    def get_resource(self, key: ResourceKey) -> InventoryRecord | None: ...


@dataclass(frozen=True)
class ChildJob:
    """One stage's or cell's Job: its key, its parent's record and the parent's entry."""

    key: ResourceKey
    parent: InventoryRecord
    role: str  # "stage" or "cell"
    id: str  # the stage's name or the cell's index
    entry: Mapping[str, Any]

    @property
    def created(self) -> bool:
        return was_created(self.entry)

    @property
    def title(self) -> str:
        """`Pipeline/te (stage train)`."""
        return f"{self.parent.key.kind}/{self.parent.key.name} ({self.role} {self.id})"

    @property
    def labels(self) -> dict[str, str]:
        """The labels its Job carries that a selector reads: a Sweep template's own, and
        the one naming its parent (`nodus.dev/pipeline: te`), as the controllers set them."""
        own: dict[str, str] = {}
        if self.parent.key.kind == "Sweep":
            template = (self.parent.manifest.get("spec") or {}).get("template") or {}
            own = dict((template.get("metadata") or {}).get("labels") or {})
        return {**own, _CHILD_LABEL[self.parent.key.kind]: self.parent.key.name}

    def parent_object(self) -> dict[str, str]:
        """The parent as the JSON API and `get -o json` show it."""
        return {"kind": self.parent.key.kind, "project": self.parent.key.project,
                "name": self.parent.key.name, self.role: self.id}

    def record(self, observed: Observed | None = None, asked: bool = False) -> InventoryRecord:
        """This Job as a resource: what its backend reports (`observed`), else what its
        parent recorded of it; `asked`: the backend was asked and has no such Job (its TTL
        or its parent's removed it), so it shows as gone."""
        p = self.parent
        common = dict(binding_id=p.binding_id, source_commit=p.source_commit,
                      source_file=p.source_file, provider=p.provider)
        if observed is not None:
            manifest = observed.manifest or {}
            annotations = (manifest.get("metadata") or {}).get("annotations") or {}
            status = observed.status
            return InventoryRecord(
                self.key, manifest=manifest, spec_hash=annotations.get(ANNOTATION_SPEC_HASH, ""),
                provider_id=observed.provider_id, phase=observed.phase, reason=observed.reason,
                message=observed.message, fix=observed.fix, status=status,
                cost_usd=observed.cost_usd,
                created_at=_time(status.get("createdTime") or status.get("startTime")),
                updated_at=p.updated_at,
                finished_at=_time(status.get("completionTime")) if is_terminal(
                    observed.phase) else None, **common)
        e = self.entry
        phase = e.get("phase")
        known = {"apiVersion": "nodus.dev/v1", "kind": "Job",  # what a listing reads of it
                 "metadata": {"name": self.key.name, "labels": self.labels}}
        return InventoryRecord(
            self.key, manifest=known, spec_hash="", phase=phase, reason=e.get("reason"),
            status={k: e[k] for k in _ENTRY_STATUS if e.get(k) is not None},
            cost_usd=str(e.get("costUSD") or "0"), created_at=_time(e.get("startTime")),
            updated_at=p.updated_at,
            finished_at=_time(e.get("completionTime")) if is_terminal(phase) else None,
            deleted=asked and self.created, **common)


def was_created(entry: Mapping[str, Any]) -> bool:
    """Whether the parent created the Job of this status entry (a stage not yet started,
    or skipped, has none; the Job may be gone since, by its TTL)."""
    if "created" in entry:
        return bool(entry["created"])
    return entry.get("phase") not in NOT_STARTED


def children_of(parent: InventoryRecord) -> list[ChildJob]:
    """Every stage or cell the parent's status names, in its order (none for a Job)."""
    if parent.key.kind not in PARENTS:
        return []
    field, role, id_field = PARENTS[parent.key.kind]
    out = []
    for entry in (parent.status or {}).get(field) or []:
        if isinstance(entry, dict) and entry.get("job"):
            out.append(ChildJob(ResourceKey("Job", parent.key.project, str(entry["job"])),
                                parent, role, str(entry.get(id_field)), entry))
    return out


def find_child(store: Resources, project: str, name: str) -> ChildJob | None:
    """The stage or cell whose Job is `name` in `project`: its parent is named by a
    prefix of `name` up to a `-`, so only those few records are read."""
    for cut in (i for i, ch in enumerate(name) if ch == "-"):
        for kind in PARENTS:
            parent = store.get_resource(ResourceKey(kind, project, name[:cut]))
            if parent is None:
                continue
            for child in children_of(parent):
                if child.key.name == name:
                    return child
    return None


def _time(text: Any) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
