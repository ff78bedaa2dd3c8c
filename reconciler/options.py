"""The annotations a user sets to steer the reconciler, parsed once into a value."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from nodus_gitops.floor.identity import ANNOTATION_ON_CHANGE, ANNOTATION_PRUNE


class OnChange(StrEnum):
    REJECT = "Reject"
    REPLACE = "Replace"
    IGNORE = "Ignore"


@dataclass(frozen=True)
class ResourceOptions:
    on_change: OnChange = OnChange.REJECT
    prune: bool = True

    @classmethod
    def from_manifest(cls, manifest: dict[str, Any]) -> ResourceOptions:
        meta = manifest.get("metadata") if isinstance(manifest, dict) else None
        annotations = meta.get("annotations") if isinstance(meta, dict) else None
        annotations = annotations if isinstance(annotations, dict) else {}
        on_change = annotations.get(ANNOTATION_ON_CHANGE, OnChange.REJECT)
        return cls(
            on_change=OnChange(on_change) if on_change in OnChange.__members__.values()
            else OnChange.REJECT,
            prune=annotations.get(ANNOTATION_PRUNE) != "disabled",
        )
