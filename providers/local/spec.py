"""A Job manifest's `spec` read once into a frozen value: durations, quantities, GPU
requests, outputs, inputs, recovery and placement, with the platform's defaults.

Pure parsing; no I/O. Anything malformed raises `SpecError` naming the field.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from typing import Any

from nodus_gitops.floor.gpu import memory_floor
from nodus_gitops.floor.quantities import DurationError, duration, parse_quantity
from nodus_gitops.floor.quantities import parse_cpu as floor_parse_cpu

OUTPUTS_MOUNT = "/nodus/outputs"
STATE_MOUNT = "/nodus/state"
INPUTS_MOUNT = "/nodus/inputs"

DEFAULT_BACKOFF_LIMIT = 6
DEFAULT_RECOVERY_ATTEMPTS = 3
DEFAULT_CPU = 1.0
DEFAULT_MEMORY = 1 << 30

_ENV_NAME = re.compile(r"[^A-Za-z0-9_]")


class SpecError(ValueError):
    """The manifest cannot be run as written; the message names the field."""


def parse_duration(value: Any, field_name: str = "duration") -> float:
    """Seconds in a duration (`1s`, `10m`, `1h30m`, `500ms`, `15`, a YAML number): the
    floor's one grammar; anything else is a SpecError naming the field."""
    try:
        return duration(value, field_name)
    except DurationError as exc:
        raise SpecError(str(exc)) from None


def parse_memory(value: Any, field_name: str = "memory") -> int:
    """`4Gi`, `512Mi`, `1G` or a byte count -> bytes: the schemas' quantity grammar
    (floor.quantities), for manifests and settings alike."""
    found = parse_quantity(value.strip() if isinstance(value, str) else value)
    if found is None:
        raise SpecError(f"{field_name}: {value!r} is not a quantity such as 512Mi or 4Gi")
    return found


def parse_cpu(value: Any) -> float:
    """`2`, `0.5` or `500m` -> cores (floor.quantities' grammar)."""
    found = floor_parse_cpu(value.strip() if isinstance(value, str) else value)
    if found is None:
        raise SpecError(f"resources.cpu: {value!r} is not a CPU quantity such as 2 or 500m")
    return found


def parse_money(value: Any, field_name: str = "maxCostUSD") -> Decimal:
    try:
        money = Decimal(str(value))
    except InvalidOperation:
        raise SpecError(f"{field_name}: {value!r} is not an amount in USD") from None
    if money < 0 or not money.is_finite():
        raise SpecError(f"{field_name}: {value!r} must be a positive amount")
    return money


def env_suffix(name: str) -> str:
    """The `<NAME>` in NODUS_INPUT_<NAME>: upper case, other characters become `_`."""
    return _ENV_NAME.sub("_", name).upper()


@dataclass(frozen=True)
class GpuRequest:
    """`L4`, `H100:8`, `H100!` or `{type, count, minMemory}`."""

    type: str | None = None
    count: int = 1
    min_memory: int | None = None
    exact: bool = False
    floor_from: str | None = None  # the annotation that set min_memory, if one did

    def describe(self) -> str:
        parts = [f"{self.type or 'any GPU'}{'!' if self.exact else ''} x{self.count}"]
        if self.min_memory:
            parts.append(f"with at least {self.min_memory / (1 << 30):g}Gi")
        if self.floor_from:
            parts.append(f"(the memory floor for {self.floor_from})")
        return " ".join(parts)


def parse_gpu(value: Any) -> GpuRequest | None:
    if value is None or value == "" or value == {}:
        return None
    if isinstance(value, str):
        text, count = value.strip(), 1
        if ":" in text:
            text, _, num = text.partition(":")
            if not num.strip().isdigit() or int(num) < 1:
                raise SpecError(f"resources.gpu: {value!r}: the count after ':' must be a number")
            count = int(num)
        exact = text.endswith("!")
        return GpuRequest(type=text.rstrip("!") or None, count=count, exact=exact)
    if isinstance(value, dict):
        gpu_type = value.get("type")
        exact = bool(value.get("exact", False))
        if isinstance(gpu_type, str) and gpu_type.endswith("!"):
            gpu_type, exact = gpu_type[:-1], True
        count = int(value.get("count", 1))
        if count < 1:
            raise SpecError("resources.gpu.count must be at least 1")
        min_mem = value.get("minMemory")
        return GpuRequest(
            type=gpu_type or None,
            count=count,
            min_memory=parse_memory(min_mem, "resources.gpu.minMemory") if min_mem else None,
            exact=exact,
        )
    raise SpecError(f"resources.gpu: {value!r} is not a GPU request such as L4 or H100:8")


def gpu_with_floor(spec: dict[str, Any], annotations: Any) -> GpuRequest | None:
    """`resources.gpu`, with the floor `nodus.dev/model` or `nodus.dev/dataset-bytes`
    sets when it names neither a type nor minMemory (a Job with a floor needs a GPU)."""
    request = parse_gpu((spec.get("resources") or {}).get("gpu"))
    floor = memory_floor(spec, annotations)
    if floor is None or (request is not None and request.min_memory):
        return request
    return replace(request or GpuRequest(), floor_from=floor.source,
                   min_memory=parse_memory(floor.quantity, "the GPU memory floor"))


@dataclass(frozen=True)
class Output:
    name: str
    path: str  # as declared, under /nodus/outputs

    @property
    def relative(self) -> str:
        """The path below the outputs directory; `SpecError` when it is not under it."""
        norm = "/" + "/".join(p for p in self.path.split("/") if p not in ("", "."))
        if ".." in norm.split("/"):
            raise SpecError(f"outputs[{self.name}]: {self.path!r} must not contain '..'")
        if norm == OUTPUTS_MOUNT:
            return ""
        if not norm.startswith(OUTPUTS_MOUNT + "/"):
            raise SpecError(f"outputs[{self.name}]: {self.path!r} is not under {OUTPUTS_MOUNT}")
        return norm[len(OUTPUTS_MOUNT) + 1 :]


@dataclass(frozen=True)
class Input:
    name: str
    path: str | None  # host path, filled in by the Pipeline controller


@dataclass(frozen=True)
class Recovery:
    continuity: str = "Checkpointed"  # Checkpointed | Restartable | Ephemeral
    on_interruption: str = "Recover"  # Recover | Fail
    max_attempts: int = DEFAULT_RECOVERY_ATTEMPTS
    min_progress_seconds: float | None = None
    # Directories saved and restored across recoveries and suspends; the first is
    # NODUS_CHECKPOINT_DIR. Normalised, without repeats.
    checkpoint_paths: tuple[str, ...] = (STATE_MOUNT,)


@dataclass(frozen=True)
class Distributed:
    """spec.distributed: the Job runs as a gang of `nodes` members, each with
    `gpus_per_node` GPUs (None: each member gets resources.gpu as written)."""

    nodes: int
    gpus_per_node: int | None = None


def _positive(value: Any, name: str, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise SpecError(f"{name}: {value!r} must be a whole number of at least {least}")
    return value


def parse_distributed(value: Any, completions: int) -> Distributed | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise SpecError("spec.distributed: expected a mapping such as {nodes: 2}")
    nodes = _positive(value.get("nodes"), "spec.distributed.nodes", 2)
    per_node = value.get("gpusPerNode")
    if completions != 1:
        # a gang is the Job's one run: its ranks take the place of indexes
        raise SpecError("spec.distributed: a distributed Job runs once, as one gang of "
                        f"{nodes} nodes; spec.completions must be 1 (it is {completions})")
    return Distributed(nodes, None if per_node is None
                       else _positive(per_node, "spec.distributed.gpusPerNode", 1))


def gang_gpu(request: GpuRequest | None, distributed: Distributed | None) -> GpuRequest | None:
    """What each member of a gang gets: distributed.gpusPerNode GPUs of resources.gpu's
    type (any GPU when it names none)."""
    if distributed is None or distributed.gpus_per_node is None:
        return request
    return replace(request or GpuRequest(), count=distributed.gpus_per_node)


@dataclass(frozen=True)
class GitSource:
    repo: str
    ref: str = "main"
    path: str | None = None


@dataclass(frozen=True)
class JobSpec:
    name: str
    command: tuple[str, ...]
    image: str | None = None
    working_dir: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    dropped_env: tuple[str, ...] = ()
    completions: int = 1
    parallelism: int = 1
    backoff_limit: int = DEFAULT_BACKOFF_LIMIT
    timeout: float | None = None
    max_cost: Decimal | None = None
    state: str = "Running"
    cpu: float = DEFAULT_CPU
    memory: int = DEFAULT_MEMORY
    memory_limit: int | None = None  # only when resources.memory is set
    gpu: GpuRequest | None = None
    queue_timeout: float | None = None
    expected_duration: float | None = None
    ttl_after_finished: float | None = None
    outputs: tuple[Output, ...] = ()
    inputs: tuple[Input, ...] = ()
    recovery: Recovery = field(default_factory=Recovery)
    source: GitSource | None = None
    distributed: Distributed | None = None
    # Where and how the Job asked to run, which a backend honours as far as it can
    regions: tuple[str, ...] = ()
    interruptible: bool | None = None
    complete_by: str | None = None

    @property
    def members(self) -> int:
        """The runs that make up one run of the Job: the gang's ranks, else 1."""
        return self.distributed.nodes if self.distributed else 1


def _env_pairs(raw: Any) -> list[tuple[str, str]]:
    if raw is None:
        return []
    if isinstance(raw, dict):
        return [(str(k), "" if v is None else str(v)) for k, v in raw.items()]
    if isinstance(raw, list):
        pairs = []
        for item in raw:
            if not isinstance(item, dict) or "name" not in item:
                raise SpecError("env: each entry needs a name and a value")
            pairs.append((str(item["name"]), str(item.get("value", ""))))
        return pairs
    raise SpecError("env: expected a mapping of NAME: value or a list of {name, value}")


def _timeout(spec: dict[str, Any]) -> float | None:
    if spec.get("timeout") is not None:
        return parse_duration(spec["timeout"], "timeout")
    if spec.get("activeDeadlineSeconds") is not None:
        return parse_duration(spec["activeDeadlineSeconds"], "activeDeadlineSeconds")
    return None


def parse_job(manifest: dict[str, Any]) -> JobSpec:
    """The manifest of a Job (or a stage/cell Job built by a controller) -> JobSpec."""
    meta = manifest.get("metadata") or {}
    spec = manifest.get("spec") or {}
    command = spec.get("command")
    if isinstance(command, str):
        command = [command]
    if not command or not all(isinstance(c, str | int | float) for c in command):
        raise SpecError("spec.command: a non-empty list of arguments is required")
    command = [str(c) for c in command] + [str(a) for a in spec.get("args") or []]
    if any("\0" in arg for arg in command):
        raise SpecError("spec.command: an argument cannot hold a NUL character")
    env, dropped = [], []
    for name, value in _env_pairs(spec.get("env")):
        if "\0" in name or "\0" in value or "=" in name:
            raise SpecError(f"spec.env.{name.split(chr(0))[0]}: a name cannot hold '=' and "
                            "neither a name nor a value can hold a NUL character")
        if name.startswith("NODUS_") and not name.startswith("NODUS_PARAM_"):
            dropped.append(name)
        else:
            env.append((name, value))
    resources = spec.get("resources") or {}
    completions = int(spec.get("completions") or 1)
    parallelism = int(spec.get("parallelism") or 1)
    if completions < 1 or parallelism < 1:
        raise SpecError("spec.completions and spec.parallelism must be at least 1")
    rec = spec.get("recovery") or {}
    min_progress = rec.get("minProgressDuration")
    placement = spec.get("placement") or {}
    git = (spec.get("source") or {}).get("git")
    ttl = spec.get("ttlSecondsAfterFinished")
    distributed = parse_distributed(spec.get("distributed"), completions)
    return JobSpec(
        name=str(meta.get("name", "")),
        command=tuple(command),
        image=spec.get("image"),
        working_dir=spec.get("workingDir"),
        env=tuple(env),
        dropped_env=tuple(dropped),
        completions=completions,
        parallelism=min(parallelism, completions),
        backoff_limit=int(spec.get("backoffLimit", DEFAULT_BACKOFF_LIMIT)),
        timeout=_timeout(spec),
        max_cost=parse_money(spec["maxCostUSD"]) if spec.get("maxCostUSD") is not None else None,
        state=str(spec.get("state") or "Running"),
        cpu=parse_cpu(resources["cpu"]) if resources.get("cpu") is not None else DEFAULT_CPU,
        memory=parse_memory(resources["memory"], "resources.memory")
        if resources.get("memory") is not None
        else DEFAULT_MEMORY,
        memory_limit=parse_memory(resources["memory"], "resources.memory")
        if resources.get("memory") is not None
        else None,
        gpu=gang_gpu(gpu_with_floor(spec, meta.get("annotations")), distributed),
        queue_timeout=parse_duration(placement["queueTimeout"], "placement.queueTimeout")
        if placement.get("queueTimeout") is not None
        else None,
        expected_duration=parse_duration(spec["expectedDuration"], "expectedDuration")
        if spec.get("expectedDuration") is not None
        else None,
        ttl_after_finished=float(ttl) if ttl is not None else None,
        outputs=tuple(Output(str(o["name"]), str(o["path"])) for o in spec.get("outputs") or []),
        inputs=tuple(Input(str(i["name"]), i.get("path")) for i in spec.get("inputs") or []),
        recovery=Recovery(
            continuity=str(rec.get("continuity", "Checkpointed")),
            on_interruption=str(rec.get("onInterruption", "Recover")),
            max_attempts=int(rec.get("maxAttempts", DEFAULT_RECOVERY_ATTEMPTS)),
            min_progress_seconds=parse_duration(min_progress, "recovery.minProgressDuration")
            if min_progress is not None
            else None,
            checkpoint_paths=_checkpoint_paths(rec.get("checkpointPaths")),
        ),
        source=GitSource(str(git["repo"]), str(git.get("ref") or "main"), git.get("path"))
        if git
        else None,
        distributed=distributed,
        regions=tuple(str(r) for r in placement.get("regions") or ()),
        interruptible=placement.get("interruptible"),
        complete_by=str(spec["completeByTime"]) if spec.get("completeByTime") else None,
    )


def _checkpoint_paths(value: Any) -> tuple[str, ...]:
    if value is None:
        return (STATE_MOUNT,)
    if not isinstance(value, list) or not value:
        raise SpecError("recovery.checkpointPaths: a non-empty list of absolute paths is required")
    paths: list[str] = []
    for i, path in enumerate(value):
        if not isinstance(path, str) or not path.startswith("/") or "\0" in path:
            raise SpecError(f"recovery.checkpointPaths.{i}: {path!r} is not an absolute path")
        norm = posixpath.normpath(path)
        norm = "/" + norm.lstrip("/")  # normpath keeps a leading //
        if norm not in paths:
            paths.append(norm)
    return tuple(paths)


def compact_indexes(indexes: list[int] | set[int]) -> str:
    """[0, 1, 2, 5] -> `0-2,5`."""
    out: list[str] = []
    items = sorted(set(indexes))
    i = 0
    while i < len(items):
        j = i
        while j + 1 < len(items) and items[j + 1] == items[j] + 1:
            j += 1
        out.append(str(items[i]) if i == j else f"{items[i]}-{items[j]}")
        i = j + 1
    return ",".join(out)


def parse_workload(manifest: dict[str, Any]) -> JobSpec:
    """`parse_job` for a provider: a manifest it cannot run is a `PermanentError` (the
    local and slurm backends read Jobs the same way)."""
    from nodus_gitops.floor.errors import PermanentError

    try:
        return parse_job(manifest)
    except SpecError as exc:
        raise PermanentError(str(exc)) from None
