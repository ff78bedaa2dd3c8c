"""The Nodus API's objects, as pure functions: where a resource lives, the bodies the
provider sends (a create, a merge patch) and what it reads back (Observed, the estimate,
the GPU memory floor). No I/O here, so every rule is tested without a server.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any
from urllib.parse import quote

from nodus_gitops.floor.errors import PermanentError
from nodus_gitops.floor.identity import (
    ANNOTATION_SOURCE_COMMIT,
    ANNOTATION_SOURCE_FILE,
    ANNOTATION_SOURCE_REPO,
    ANNOTATION_SPEC_HASH,
    API_VERSION,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    ResourceKey,
)
from nodus_gitops.floor.phases import Phase
from nodus_gitops.providers.base import Observed, Workload

PLURALS = {"Job": "jobs", "Pipeline": "pipelines", "Sweep": "sweeps"}
_OWNED_ANNOTATIONS = (ANNOTATION_SOURCE_REPO, ANNOTATION_SOURCE_COMMIT, ANNOTATION_SOURCE_FILE,
                      ANNOTATION_SPEC_HASH)


def api_path(kind: str, project: str, name: str | None = None) -> str:
    """The collection (or, with `name`, the item) path of a kind in a project."""
    if kind not in PLURALS:
        raise PermanentError(f"the Nodus API has no kind {kind!r}")
    path = f"/apis/{API_VERSION}/namespaces/{quote(project, safe='')}/{PLURALS[kind]}"
    return f"{path}/{quote(name, safe='')}" if name is not None else path


def create_body(workload: Workload) -> dict[str, Any]:
    """The manifest as created: namespace set to the binding's project, never the file's."""
    body = copy.deepcopy(workload.manifest)
    body.setdefault("apiVersion", API_VERSION)
    body.setdefault("kind", workload.key.kind)
    body.setdefault("metadata", {})["namespace"] = workload.key.project
    body["metadata"]["name"] = workload.key.name
    body.pop("status", None)
    return body


def patch_body(workload: Workload, changes: dict[str, Any]) -> dict[str, Any]:
    """The reconciler's merge patch plus the ownership labels and source annotations, so
    a patched resource still records the commit and spec hash it now runs."""
    body = copy.deepcopy(changes)
    meta = workload.manifest.get("metadata") or {}
    labels = {k: v for k, v in (meta.get("labels") or {}).items()
              if k in (LABEL_MANAGED_BY, LABEL_INSTANCE)}
    notes = {k: v for k, v in (meta.get("annotations") or {}).items() if k in _OWNED_ANNOTATIONS}
    patch_meta = body.setdefault("metadata", {})
    for section, ours in (("labels", labels), ("annotations", notes)):
        if ours:
            # `null` would drop the whole map, ownership included: send ours instead.
            patch_meta[section] = {**(patch_meta.get(section) or {}), **ours}
    if not patch_meta:
        del body["metadata"]
    return body


def dry_run_key(body: dict[str, Any]) -> str:
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return "dry-run-" + hashlib.sha256(text.encode()).hexdigest()[:32]


def observed_from(obj: dict[str, Any], key: ResourceKey) -> Observed:
    """The API object as the reconciler sees it."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    cost = status.get("costUSD")
    return Observed(
        key=key,
        provider_id=str(meta.get("uid") or meta.get("name") or key.name),
        # No status yet: the platform's controller has not seen it; it is waiting.
        phase=str(status.get("phase") or Phase.QUEUED),
        reason=status.get("reason"),
        message=status.get("message"),
        fix=status.get("fix"),
        cost_usd=str(cost) if cost is not None else "0",
        status=status,
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        manifest={k: v for k, v in obj.items() if k != "status"},  # as the server keeps it
    )


def estimate_of(obj: dict[str, Any]) -> str | None:
    """`status.estimate.costUSD` (or a bare `status.estimate` string)."""
    estimate = (obj.get("status") or {}).get("estimate")
    if isinstance(estimate, dict):
        estimate = estimate.get("costUSD")
    return str(estimate) if estimate is not None else None


def gpu_floors(obj: dict[str, Any]) -> dict[str, str]:
    """Every `resources.gpu.minMemory` in the object, by field path: the floor the server
    picked from nodus.dev/model or nodus.dev/dataset-bytes shows up here."""
    spec = obj.get("spec") or {}
    specs: list[tuple[str, Any]] = [("spec", spec), ("spec.defaults", spec.get("defaults")),
                                    ("spec.template.spec", (spec.get("template") or {}).get(
                                        "spec") if obj.get("kind") != "Pipeline" else None)]
    for i, stage in enumerate(spec.get("stages") or []):
        if isinstance(stage, dict):
            specs.append((f"spec.stages[{i}].template", stage.get("template")))
    floors = {}
    for where, job in specs:
        gpu = ((job or {}).get("resources") or {}).get("gpu") if isinstance(job, dict) else None
        if isinstance(gpu, dict) and gpu.get("minMemory"):
            floors[f"{where}.resources.gpu.minMemory"] = str(gpu["minMemory"])
    return floors
