"""Which GRES type a Job's GPU request gets. Slurm's GRES name GPU types, never their
memory, so the backend's `gpuMemory` setting says what one GPU of each type holds; a
request with a memory floor (its own `minMemory`, or the one `nodus.dev/model` and
`nodus.dev/dataset-bytes` set) gets the type with the least memory that holds the
floor (the first listed among equals), or is refused before it reaches the cluster."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from nodus_gitops.providers.local.spec import GpuRequest, JobSpec
from nodus_gitops.providers.slurm.submit import Unplaceable

_SET_IT = "the slurm backend's gpuMemory (GPU type: memory of one GPU)"


def _gi(size: int) -> str:
    return f"{size / (1 << 30):.4g}Gi"


def _what_asks(req: GpuRequest) -> str:
    return req.floor_from or "resources.gpu.minMemory"


def _fix(req: GpuRequest) -> str:
    return (f"{_what_asks(req)} needs GPUs of at least {_gi(req.min_memory or 0)}: set "
            "resources.gpu.minMemory or resources.gpu.type to a GPU the cluster has, or "
            f"list a type with that memory in {_SET_IT}")


def _typed(req: GpuRequest, memory: Mapping[str, int]) -> GpuRequest:
    """A named type must hold the floor, as gpuMemory says."""
    assert req.type and req.min_memory
    have = {t.lower(): m for t, m in memory.items()}.get(req.type.lower())
    if have is None:
        article = "an" if req.type[:1].upper() in "AEFHILMNORSX" else "a"
        raise Unplaceable(f"{_SET_IT} does not say how much memory {article} {req.type} has, "
                          f"so {_what_asks(req)} ({_gi(req.min_memory)}) cannot be checked",
                          fix=_fix(req))
    if have < req.min_memory:
        raise Unplaceable(f"{req.type} has {_gi(have)} per GPU in {_SET_IT}, less than the "
                          f"{_gi(req.min_memory)} {_what_asks(req)} asks", fix=_fix(req))
    return req


def placed(spec: JobSpec, memory: Mapping[str, int]) -> JobSpec:
    """`spec` with the GPU type its memory floor gets (unchanged without a floor);
    Unplaceable, with a fix, when no type holds it."""
    req = spec.gpu
    if req is None or not req.min_memory:
        return spec
    if req.type:
        _typed(req, memory)
        return spec
    listed = list(memory.items())
    fitting = sorted((m, i, t) for i, (t, m) in enumerate(listed) if m >= req.min_memory)
    if not fitting:
        known = ", ".join(f"{t} {_gi(m)}" for t, m in listed) or f"none: set {_SET_IT}"
        raise Unplaceable(f"no GPU type of the cluster holds {req.describe()}; its types: "
                          f"{known}", fix=_fix(req))
    return replace(spec, gpu=replace(req, type=fitting[0][2]))
