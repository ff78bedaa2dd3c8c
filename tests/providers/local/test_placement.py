"""Where runs go: GPU slots (detected or simulated, one run per slot across Jobs) and
bubblewrap's per-Job /nodus."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from nodus_gitops.floor.phases import FIXES
from nodus_gitops.providers.local.config import GpuSlot
from nodus_gitops.providers.local.gpus import detect

from tests.providers.local.conftest import HAS_BWRAP

SHOW_GPU = "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])"


def test_unsatisfiable_gpu_waits_queued_then_fails_capacity_unavailable(local_factory):
    local = local_factory(gpu_slots=[GpuSlot("L4", "24Gi")])
    k = local.create("big", resources={"gpu": "H100:8"}, placement={"queueTimeout": "1s"})
    queued = local.provider.get(k)
    assert queued.phase == "Queued"
    done = local.wait(k, timeout=10)
    assert (done.phase, done.reason, done.fix) == (
        "Failed",
        "CapacityUnavailable",
        FIXES["CapacityUnavailable"],
    )
    assert "H100 x8" in done.message and done.status["attempts"] == 0
    events = local.run(k).read_events()
    assert any(
        e["reason"] == "WaitingForCapacity" and "no GPU slot" in e["message"] for e in events
    )


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
        local.wait(k, lambda o, k=k, name=name: (local.run(k).outputs / name).exists())
    for k in (a, b):
        (local.run(k).outputs / "go").write_text("")
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
