"""GPU requests and the minMemory floor the platform derives from annotations: the one
place validation, the plan and every backend's placement read the floor from."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, NamedTuple

from nodus_gitops.floor.identity import ANNOTATION_DATASET_BYTES, ANNOTATION_MODEL
from nodus_gitops.floor.quantities import TIB, parse_quantity

_REQUEST = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*?)(!?)(?::([1-9][0-9]*))?$")
# The seeds' table: model size in billions of parameters -> minimum memory per GPU.
# Sizes between two rows take the larger floor: a 30B model does not fit where 14B does.
_MODEL_FLOORS = ((8, "24Gi"), (14, "32Gi"), (40, "48Gi"), (72, "80Gi"))
_SMALLEST_FLOORED_MODEL = 7
_MODEL_SIZE = re.compile(r"(?<![0-9.])(\d+(?:\.\d+)?)[bB](?![a-zA-Z0-9])")
_DATASET_FLOOR = "80Gi"


@dataclass(frozen=True)
class GpuRequest:
    type: str | None
    count: int = 1
    exact: bool = False
    min_memory: str | None = None


def parse_gpu_request(value: Any) -> GpuRequest | None:
    """`L4`, `H100:8`, `H100!` or `{type, count, minMemory}`; None when malformed."""
    if isinstance(value, str):
        m = _REQUEST.match(value)
        if not m:
            return None
        return GpuRequest(m.group(1), int(m.group(3) or 1), bool(m.group(2)))
    if isinstance(value, dict):
        gpu_type = value.get("type")
        exact = isinstance(gpu_type, str) and gpu_type.endswith("!")
        return GpuRequest(
            gpu_type.rstrip("!") if isinstance(gpu_type, str) else None,
            int(value.get("count", 1)) if isinstance(value.get("count", 1), int) else 1,
            exact,
            value.get("minMemory"),
        )
    return None


def model_floor(model: str) -> str | None:
    """The floor for a model name such as `meta-llama/Llama-3.1-8B`."""
    sizes = [float(m) for m in _MODEL_SIZE.findall(model)]
    if not sizes:
        return None
    size = max(sizes)
    if size < _SMALLEST_FLOORED_MODEL:
        return None
    for limit, floor in _MODEL_FLOORS:
        if size <= limit:
            return floor
    return _MODEL_FLOORS[-1][1]


class MemoryFloor(NamedTuple):
    """The minimum GPU memory a Job gets, and what set it (for messages)."""

    quantity: str  # such as 80Gi
    source: str  # `resources.gpu.minMemory`, or the annotation and its value


def memory_floor(spec: dict[str, Any], annotations: dict[str, Any] | None) -> MemoryFloor | None:
    """The Job's own `minMemory`, or, when it names neither a GPU type nor minMemory,
    the floor from `nodus.dev/model` and `nodus.dev/dataset-bytes` (the larger one)."""
    resources = spec.get("resources") if isinstance(spec, dict) else None
    gpu = resources.get("gpu") if isinstance(resources, dict) else None
    request = parse_gpu_request(gpu) if gpu is not None else None
    if request is not None and request.min_memory:
        return MemoryFloor(request.min_memory, "resources.gpu.minMemory")
    if request is not None and request.type:
        return None
    annotations = annotations if isinstance(annotations, dict) else {}
    floors = []
    model = annotations.get(ANNOTATION_MODEL)
    if isinstance(model, str) and (floor := model_floor(model)):
        floors.append(MemoryFloor(floor, f"{ANNOTATION_MODEL}: {model}"))
    dataset = annotations.get(ANNOTATION_DATASET_BYTES)
    dataset_bytes = parse_quantity(str(dataset)) if dataset is not None else None
    if dataset_bytes is not None and dataset_bytes > TIB:
        floors.append(MemoryFloor(_DATASET_FLOOR, f"{ANNOTATION_DATASET_BYTES}: {dataset}"))
    return max(floors, key=lambda f: parse_quantity(f.quantity)) if floors else None


def effective_min_memory(spec: dict[str, Any], annotations: dict[str, Any] | None) -> str | None:
    """The minimum GPU memory a Job gets (`memory_floor` without its source)."""
    floor = memory_floor(spec, annotations)
    return floor.quantity if floor else None
