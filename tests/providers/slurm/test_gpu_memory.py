"""The GPU memory floor on a real Slurm cluster: Slurm's GRES know GPU types, not their
memory, so the backend's `gpuMemory` says what each type has, and a request with a
floor (its own minMemory, or the one nodus.dev/model / nodus.dev/dataset-bytes sets)
becomes the GRES of a type that holds it, or never reaches the cluster."""

from __future__ import annotations

import pytest
from nodus_gitops.floor.errors import ConfigError
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.floor.phases import Phase, Reason
from nodus_gitops.providers.base import Workload
from nodus_gitops.providers.local.spec import parse_job
from nodus_gitops.providers.slurm import SlurmConfig
from nodus_gitops.providers.slurm.gpus import placed
from nodus_gitops.providers.slurm.submit import Unplaceable

from tests.providers.slurm.conftest import manifest

# As this cluster's config declares them (its A10s are said to hold 48Gi, so that a
# floor between the two types picks the larger one).
GPU_MEMORY = {"L4": "24Gi", "A10": "48Gi"}


def _create_annotated(slurm, name: str, annotations: dict[str, str], **spec) -> ResourceKey:
    k = slurm.key(name)
    m = manifest(name, "pass", **spec)
    m["metadata"]["annotations"] = annotations
    slurm.provider.create(Workload(k, m, "h"), f"{name}-1")
    return k


def _asked_gres(slurm, k: ResourceKey) -> str:
    job_id = slurm.job_ids(k)[0]
    return slurm.cluster.run("squeue", "-h", "-t", "all", "-j", str(job_id), "-o", "%b").strip()


@pytest.mark.slurm
@pytest.mark.parametrize(("annotations", "resources", "gres"), [
    ({"nodus.dev/model": "meta-llama/Llama-3.1-8B"}, {}, "gpu:L4:1"),
    ({"nodus.dev/model": "Qwen-14B"}, {}, "gpu:A10:1"),  # 32Gi: more than an L4 has
    ({"nodus.dev/model": "codellama-34b"}, {"gpu": {"count": 2}}, "gpu:A10:2"),
    ({}, {"gpu": {"minMemory": "30Gi"}}, "gpu:A10:1"),
    ({"nodus.dev/model": "llama-70B"}, {"gpu": "L4"}, "gpu:L4:1"),  # a type: no floor
])
def test_the_floor_becomes_the_gres_of_a_type_that_holds_it(slurm_factory, annotations,
                                                            resources, gres):
    slurm = slurm_factory(gpuMemory=GPU_MEMORY)
    k = _create_annotated(slurm, "llm", annotations, resources=resources)
    o = slurm.wait(k)
    assert o.phase == Phase.SUCCEEDED, o
    assert _asked_gres(slurm, k).endswith(gres)


@pytest.mark.slurm
def test_a_floor_no_gpu_type_holds_fails_before_anything_is_submitted(slurm_factory):
    slurm = slurm_factory(gpuMemory=GPU_MEMORY)
    k = _create_annotated(slurm, "llama-70b", {"nodus.dev/model": "meta-llama/Llama-3.1-70B"})
    o = slurm.provider.get(k)
    assert (o.phase, o.reason) == (Phase.FAILED, Reason.CAPACITY_UNAVAILABLE), o
    assert "80Gi" in o.message and "nodus.dev/model" in o.message
    assert "L4 24Gi" in o.message and "A10 48Gi" in o.message
    assert "resources.gpu.minMemory" in o.fix and "gpuMemory" in o.fix
    assert slurm.job_ids(k) == [] and o.status["attempts"] == 0


@pytest.mark.slurm
def test_without_gpu_memory_a_floor_cannot_be_checked_and_is_refused(slurm_factory):
    slurm = slurm_factory()
    k = _create_annotated(slurm, "llm", {"nodus.dev/model": "llama-8B"})
    o = slurm.provider.get(k)
    assert (o.phase, o.reason) == (Phase.FAILED, Reason.CAPACITY_UNAVAILABLE), o
    assert "gpuMemory" in o.message and "gpuMemory" in o.fix and slurm.job_ids(k) == []
    typed = slurm.create("typed", resources={"gpu": "L4"})  # no floor: runs as before
    assert slurm.wait(typed).phase == Phase.SUCCEEDED


def _spec(annotations=None, **spec):
    m = manifest("j", "pass", **spec)
    m["metadata"]["annotations"] = annotations or {}
    return parse_job(m)


def test_a_named_type_with_too_little_memory_is_refused():
    memory = {"L4": 24 << 30}
    with pytest.raises(Unplaceable, match="L4 has 24Gi per GPU"):
        placed(_spec(resources={"gpu": {"type": "L4", "minMemory": "40Gi"}}), memory)
    with pytest.raises(Unplaceable, match="does not say how much memory an? H100"):
        placed(_spec(resources={"gpu": {"type": "H100", "minMemory": "40Gi"}}), memory)
    same = _spec(resources={"gpu": {"type": "l4", "minMemory": "16Gi"}})
    assert placed(same, memory) == same


def test_equal_memory_takes_the_type_listed_first():
    memory = {"A10": 24 << 30, "L4": 24 << 30, "H100": 80 << 30}
    assert placed(_spec({"nodus.dev/model": "llama-8B"}), memory).gpu.type == "A10"
    assert placed(_spec({"nodus.dev/dataset-bytes": "2Ti"}), memory).gpu.type == "H100"
    plain = _spec()
    assert placed(plain, memory) is plain  # no GPU, no floor: nothing to place


@pytest.mark.parametrize(("value", "problem"), [
    ({"L4": "lots"}, "providers.slurm.gpuMemory.L4: 'lots' is not a quantity"),
    (["L4"], "providers.slurm.gpuMemory: expected a mapping of GPU type: memory"),
])
def test_gpu_memory_settings_are_checked(tmp_path, value, problem):
    with pytest.raises(ConfigError, match=problem.replace(".", r"\.")):
        SlurmConfig.from_settings("slurm", {"root": str(tmp_path), "gpuMemory": value})


def test_gpu_memory_is_read_as_bytes(tmp_path):
    config = SlurmConfig.from_settings("slurm", {"root": str(tmp_path),
                                                 "gpuMemory": {"L4": "24Gi", "H100": 80 << 30}})
    assert config.gpu_memory == {"L4": 24 << 30, "H100": 80 << 30}
