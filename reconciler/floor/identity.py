"""Resource identity: the one key used by manifests, plan, state and journal."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import NamedTuple

API_VERSION = "nodus.dev/v1"


class Kind(StrEnum):
    JOB = "Job"
    PIPELINE = "Pipeline"
    SWEEP = "Sweep"


KINDS = tuple(k.value for k in Kind)
# metadata.name, as schemas/defs.schema.json has it (a DNS label): also every stage's and
# cell's Job name, so a name given on the command line can be checked before any lookup.
NAME_PATTERN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
MAX_NAME = 63


def is_resource_name(text: str) -> bool:
    return len(text) <= MAX_NAME and NAME_PATTERN.fullmatch(text) is not None


class ResourceKey(NamedTuple):
    """`(kind, project, name)`; the project comes from the repo binding, never the manifest.

    A named tuple rather than a dataclass: keys are hashed and compared tens of thousands
    of times a sync, and tuples do that in C."""

    kind: str
    project: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.project}/{self.name}"

    @property
    def short(self) -> str:
        """`Kind/name`, how people refer to a resource inside one project."""
        return f"{self.kind}/{self.name}"

    @classmethod
    def parse(cls, text: str) -> ResourceKey:
        kind, project, name = text.split("/", 2)
        return cls(kind, project, name)


# Labels and annotations every created resource carries: it deletes only what its own
# inventory says it created, and these say where each resource came from.
LABEL_MANAGED_BY = "nodus.dev/managed-by"
MANAGED_BY_VALUE = "nodus-gitops"
LABEL_INSTANCE = "nodus.dev/instance"
LABEL_PIPELINE = "nodus.dev/pipeline"
LABEL_SWEEP = "nodus.dev/sweep"
ANNOTATION_SOURCE_REPO = "nodus.dev/source-repo"
ANNOTATION_SOURCE_COMMIT = "nodus.dev/source-commit"
ANNOTATION_SOURCE_FILE = "nodus.dev/source-file"
ANNOTATION_SPEC_HASH = "nodus.dev/spec-hash"
# Annotations a user sets on a manifest to steer the reconciler.
ANNOTATION_ON_CHANGE = "nodus.dev/on-change"
ANNOTATION_PRUNE = "nodus.dev/prune"
ANNOTATION_MODEL = "nodus.dev/model"
ANNOTATION_DATASET_BYTES = "nodus.dev/dataset-bytes"


def owned_by(manifest: dict, instance: str) -> bool:
    """Whether a manifest carries this instance's ownership labels (a backend listing
    what is ours; deleting still goes by the inventory, since labels can be copied)."""
    metadata = manifest.get("metadata") if isinstance(manifest, dict) else None
    labels = (metadata or {}).get("labels") or {}
    return labels.get(LABEL_MANAGED_BY) == MANAGED_BY_VALUE and (
        labels.get(LABEL_INSTANCE) == instance)
