"""Where runs go: GPU slots (detected or simulated, one run per slot across Jobs) and
bubblewrap's per-Job /nodus."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import yaml
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.floor.phases import FIXES
from nodus_gitops.floor.quantities import parse_quantity
from nodus_gitops.providers.base import Workload
from nodus_gitops.providers.local.config import GpuSlot
from nodus_gitops.providers.local.gpus import detect
from nodus_gitops.providers.local.spec import parse_job
from nodus_gitops.validation import resource_summary, validate_files

from tests.providers.local.conftest import HAS_BWRAP, PROJECT, manifest

SHOW_GPU = "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])"


def test_a_gpu_no_slot_here_has_fails_at_once_with_capacity_unavailable(local_factory):
    """The slots a Job can use are fixed when it is created: waiting cannot help."""
    local = local_factory(gpu_slots=[GpuSlot("L4", "24Gi")])
    k = local.create("big", resources={"gpu": "H100:8"})
    done = local.wait(k, timeout=30)
    assert (done.phase, done.reason) == ("Failed", "CapacityUnavailable")
    assert "H100 x8" in done.message and "L4 24Gi" in done.message
    assert done.status["attempts"] == 0 and "gpuSlots" in done.fix
    failed = [c for c in done.status["conditions"] if c["type"] == "Failed"]
    assert failed and failed[0]["reason"] == "CapacityUnavailable"


def test_a_busy_gpu_waits_queued_then_fails_capacity_unavailable(local_factory):
    local = local_factory(gpu_slots=[GpuSlot("L4", "24Gi")])
    holder = local.create("holder", "import time; time.sleep(60)", resources={"gpu": "L4"})
    local.wait(holder, "Running")
    k = local.create("late", resources={"gpu": "L4"}, placement={"queueTimeout": "1s"})
    assert local.provider.get(k).phase == "Queued"
    done = local.wait(k, timeout=20)
    assert (done.phase, done.reason, done.fix) == (
        "Failed",
        "CapacityUnavailable",
        FIXES["CapacityUnavailable"],
    )
    assert "L4 x1" in done.message and done.status["attempts"] == 0
    events = local.run(k).read_events()
    assert any(e["reason"] == "WaitingForCapacity" for e in events)
    local.provider.delete(holder)


def _create_annotated(local, name: str, annotations: dict[str, str], code: str = SHOW_GPU,
                      **spec) -> ResourceKey:
    """A Job whose metadata carries `annotations`, as a manifest in Git would."""
    k = ResourceKey("Job", PROJECT, name)
    m = manifest(name, code, **spec)
    m["metadata"]["annotations"] = annotations
    local.keys.append(k)
    local.provider.create(Workload(k, m, "hash"), f"{name}-1")
    return k


ROOMY_LAST = [GpuSlot("L4", "24Gi"), GpuSlot("A10", "24Gi"), GpuSlot("H100", "80Gi")]


@pytest.mark.parametrize(("annotations", "spec"), [
    ({"nodus.dev/model": "meta-llama/Llama-3.1-70B"}, {}),
    ({"nodus.dev/model": "Qwen2-72B-Instruct"}, {"resources": {"gpu": {"count": 1}}}),
    ({"nodus.dev/dataset-bytes": "2Ti"}, {}),
    ({"nodus.dev/model": "llama-8B", "nodus.dev/dataset-bytes": str(3 << 40)}, {}),
])
def test_the_memory_floor_of_annotations_picks_a_slot_that_holds_it(local_factory,
                                                                    annotations, spec):
    """The slots with too little memory come first: only the floor sends the Job on."""
    local = local_factory(gpu_slots=ROOMY_LAST)
    k = _create_annotated(local, "llm", annotations, **spec)
    done = local.wait(k)
    assert done.phase == "Succeeded", (done.reason, done.message)
    assert local.log(k) == "2"
    assert [g["type"] for g in done.status["gpus"]] == ["H100"]


@pytest.mark.parametrize(("annotations", "resources", "slot"), [
    ({"nodus.dev/model": "llama-13B"}, {}, "0"),  # 32Gi: the 40Gi A100, not the 80Gi one
    ({"nodus.dev/model": "llama-70B"}, {"gpu": "L4"}, "1"),  # a type: no floor
    ({"nodus.dev/model": "llama-70B"}, {"gpu": {"minMemory": "20Gi"}}, "1"),  # its own
])
def test_the_floor_applies_only_where_the_job_names_no_gpu_type_or_memory(
        local_factory, annotations, resources, slot):
    local = local_factory(gpu_slots=[GpuSlot("A100", "40Gi"), GpuSlot("L4", "24Gi"),
                                     GpuSlot("H100", "80Gi")])
    local.create("hold-h100", "import time; time.sleep(60)", resources={"gpu": "H100"})
    if slot == "1":  # the A100 is busy too: what is left is the 24Gi L4
        local.create("hold-a100", "import time; time.sleep(60)", resources={"gpu": "A100"})
    for held in local.keys:
        local.wait(held, "Running")
    k = _create_annotated(local, "llm", annotations, resources=resources)
    done = local.wait(k)
    assert done.phase == "Succeeded", (done.reason, done.message)
    assert local.log(k) == slot


def test_a_floor_no_slot_meets_never_runs_and_says_why(local_factory):
    local = local_factory(gpu_slots=[GpuSlot("L4", "24Gi"), GpuSlot("A10", "24Gi")])
    k = _create_annotated(local, "llama-70b", {"nodus.dev/model": "meta-llama/Llama-3.1-70B"},
                          "open('/nodus/outputs/ran', 'w')")
    done = local.wait(k, timeout=30)
    assert (done.phase, done.reason) == ("Failed", "CapacityUnavailable"), done
    assert done.status["attempts"] == 0 and not (local.run(k).outputs / "ran").exists()
    assert "80Gi" in done.message and "nodus.dev/model" in done.message
    assert "L4 24Gi" in done.message and "A10 24Gi" in done.message
    assert "resources.gpu.minMemory" in done.fix and "gpuSlots" in done.fix
    failed = [c for c in done.status["conditions"] if c["type"] == "Failed"]
    assert failed and failed[0]["reason"] == "CapacityUnavailable"


@pytest.mark.parametrize(("spec", "annotations"), [
    ({}, {"nodus.dev/model": "meta-llama/Llama-3.1-8B"}),
    ({}, {"nodus.dev/model": "codellama-34b"}),
    ({}, {"nodus.dev/model": "Qwen2-72B"}),
    ({}, {"nodus.dev/dataset-bytes": str(2 * 2**40)}),
    ({}, {"nodus.dev/dataset-bytes": str(2**40)}),
    ({}, {"nodus.dev/model": "tiny-1B"}),
    ({"resources": {"gpu": "L4"}}, {"nodus.dev/model": "llama-70B"}),
    ({"resources": {"gpu": {"minMemory": "40Gi"}}}, {"nodus.dev/model": "llama-70B"}),
    ({"resources": {"gpu": {"count": 2}}}, {"nodus.dev/model": "llama-13B"}),
])
def test_placement_asks_for_the_floor_validation_shows(spec, annotations):
    """`validate` and the backends read the floor from the same function."""
    m = {"apiVersion": "nodus.dev/v1", "kind": "Job",
         "metadata": {"name": "j", "annotations": annotations},
         "spec": {"command": ["true"], **spec}}
    validated = validate_files([("j.yaml", yaml.safe_dump(m).encode())])
    assert validated.problems == []
    shown = resource_summary(validated.manifests[0]).get("effectiveMinMemory")
    request = parse_job(m).gpu
    asked = request.min_memory if request else None
    assert asked == (parse_quantity(shown) if shown else None)


def test_simulated_gpu_slot_is_handed_out_with_cuda_visible_devices(local_factory):
    local = local_factory(
        gpu_slots=[GpuSlot("L4", "24Gi"), GpuSlot("H100", "80Gi"), GpuSlot("H100", "80Gi")]
    )
    one = local.create("one", SHOW_GPU, resources={"gpu": "H100"})
    two = local.create("two", SHOW_GPU, resources={"gpu": {"type": "H100", "count": 2}})
    roomy = local.create("roomy", SHOW_GPU, resources={"gpu": {"minMemory": "40Gi"}})
    exact = local.create("exact", SHOW_GPU, resources={"gpu": "L4!"})
    for k in (one, two, roomy, exact):
        assert local.wait(k).phase == "Succeeded", local.log(k)
    assert local.log(one) in ("1", "2") and local.log(roomy) in ("1", "2")
    assert local.log(two) == "1,2" and local.log(exact) == "0"
    gpus = local.provider.get(exact).status["gpus"]
    assert gpus == [
        {
            "id": "sim0",
            "index": 0,
            "type": "L4",
            "memory": 24 << 30,
            "simulated": True,
            "name": "L4",
        }
    ]


def test_a_gpu_slot_holds_one_run_at_a_time_across_jobs(local_factory):
    local = local_factory(gpu_slots=[GpuSlot("L4")])
    code = (
        "import json, time\nt = time.time()\ntime.sleep(0.4)\n"
        "print(json.dumps([t, time.time()]))"
    )
    a = local.create("gpu-a", code, resources={"gpu": "L4"})
    b = local.create("gpu-b", code, resources={"gpu": "L4"})
    assert local.wait(a).phase == "Succeeded" and local.wait(b).phase == "Succeeded"
    spans = sorted(json.loads(local.log(k)) for k in (a, b))
    assert spans[0][1] <= spans[1][0]  # the second started after the first released the slot


ISOLATED = """
import json, os, time
me = os.environ["NODUS_JOB"]
open("/nodus/outputs/" + me, "w").write(me)
open("/nodus/state/" + me, "w").write(me)
deadline = time.time() + 30
while not os.path.exists("/nodus/outputs/go") and time.time() < deadline:
    time.sleep(0.02)
try:
    root = sorted(os.listdir(ROOT))
except OSError as exc:
    root = type(exc).__name__
print(json.dumps({"outputs": sorted(os.listdir("/nodus/outputs")),
                  "state": sorted(os.listdir("/nodus/state")), "root": root}))
"""


@pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap is not installed")
def test_bubblewrap_gives_each_job_its_own_nodus(local):
    code = ISOLATED.replace("ROOT", repr(str(local.root)))
    a = local.create("iso-a", code)
    b = local.create("iso-b", code)
    for k, name in ((a, "iso-a"), (b, "iso-b")):  # both run at once, each in its own /nodus
        mine = local.run(k).run_outputs_for(0, 1)  # its run's own outputs, until it succeeded
        local.wait(k, lambda o, mine=mine, name=name: (mine / name).exists())
    for k in (a, b):
        (local.run(k).run_outputs_for(0, 1) / "go").write_text("")
    assert local.wait(a).phase == "Succeeded" and local.wait(b).phase == "Succeeded"
    for k, name in ((a, "iso-a"), (b, "iso-b")):
        seen = json.loads(local.log(k))
        assert seen == {"outputs": sorted(["go", name]),
                        "state": [name], "root": "FileNotFoundError"}
        assert (local.run(k).outputs / name).read_text() == name


USE_NODUS = """
import os
import nodus  # the shim, at /nodus/.shim
open(os.path.join(os.environ["NODUS_OUTPUTS_DIR"], "r.txt"), "w").write(os.getcwd())
print(sorted(n for n in os.listdir("/nodus") if not n.startswith(".")))
"""


@pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap is not installed")
@pytest.mark.parametrize("working_dir", ["/nodus", "/nodus/inputs"])
def test_a_working_dir_above_the_jobs_mounts_leaves_them_in_place(local, working_dir):
    k = local.create("above", USE_NODUS, workingDir=working_dir,
                     outputs=[{"name": "r", "path": "/nodus/outputs/r.txt"}])
    done = local.wait(k)
    assert done.phase == "Succeeded", local.log(k)
    assert (local.run(k).outputs / "r.txt").read_text() == working_dir
    assert {"outputs", "state"} <= set(json.loads(local.log(k).replace("'", '"')))


def test_gpus_reported_by_nvidia_smi_are_real_slots(local_factory, tmp_path, monkeypatch):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text(
        "#!/bin/sh\necho '0, NVIDIA H200, 143771 MiB'\necho '1, NVIDIA L4, 23034 MiB'\n")
    (fake / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    assert [(s.index, s.type, s.memory, s.simulated)
            for s in detect(shutil.which("nvidia-smi"))] == [
        (0, "H200", 143771 << 20, False), (1, "L4", 23034 << 20, False)]
    local = local_factory(detect_gpus=True, gpu_slots=[GpuSlot("A10")])
    big = local.create("on-h200", SHOW_GPU, resources={"gpu": "H200"})
    sim = local.create("on-a10", SHOW_GPU, resources={"gpu": "A10"})
    assert local.wait(big).phase == "Succeeded" and local.wait(sim).phase == "Succeeded"
    assert (local.log(big), local.log(sim)) == ("0", "2")
    assert local.provider.get(big).status["gpus"][0]["simulated"] is False
    assert local.provider.get(sim).status["gpus"][0]["simulated"] is True
