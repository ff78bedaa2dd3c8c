"""Jobs on a real Slurm cluster: a plain Job with outputs, an Indexed Job as a job array,
retries up to backoffLimit, the timeout, cancel, suspend and resume through scontrol,
and requests the cluster cannot place."""

from __future__ import annotations

import hashlib
import json
import time
from decimal import Decimal

import pytest
from nodus_gitops.floor.errors import PermanentError
from nodus_gitops.floor.phases import Phase, Reason

pytestmark = pytest.mark.slurm

WRITE_REPORT = """
import json, os, time
time.sleep(1.2)
out = os.environ["NODUS_OUTPUTS_DIR"]
with open(os.path.join(out, "report.json"), "w") as f:
    json.dump({"gpu": os.environ.get("CUDA_VISIBLE_DEVICES"), "job": os.environ["NODUS_JOB"],
               "index": os.environ["NODUS_INDEX"], "secret": os.environ.get("HOME")}, f)
"""


def test_job_runs_on_a_gpu_and_records_outputs_with_hashes(slurm):
    k = slurm.create("report", WRITE_REPORT, resources={"gpu": "L4"},
                     outputs=[{"name": "report", "path": "/nodus/outputs/report.json"}])
    o = slurm.wait(k)
    assert o.phase == Phase.SUCCEEDED, o
    rec = o.status["outputs"]["report"]
    path = slurm.provider.output_location(k, "report")
    data = path.read_bytes()
    assert rec["sha256"] == hashlib.sha256(data).hexdigest() and rec["size"] == len(data)
    report = json.loads(data)
    assert report["job"] == "report" and report["index"] == "0"
    assert report["gpu"] not in (None, "")  # Slurm set CUDA_VISIBLE_DEVICES for gpu:L4:1
    assert Decimal(o.cost_usd) > 0 and o.status["wallSeconds"] >= 1
    assert o.status["startTime"] and o.status["completionTime"]
    assert slurm.slurm_states(slurm.job_ids(k)[0]) == ["COMPLETED"]
    # the same idempotency key finds the same job; another one is refused
    again = slurm.provider.create(_workload(slurm, k), "report-1")
    assert again.provider_id == o.provider_id
    with pytest.raises(PermanentError, match="another idempotency key"):
        slurm.provider.create(_workload(slurm, k), "report-2")
    assert [x.key for x in slurm.provider.list_owned("team-a", "test")] == [k]
    slurm.provider.delete(k)
    assert slurm.provider.get(k) is None


def _workload(slurm, k):
    from nodus_gitops.providers.base import Workload

    doc = json.loads((slurm.root / k.project / k.name / "job.json").read_text())
    return Workload(k, doc["manifest"], "h")


INDEXED = """
import os, time
i = int(os.environ["NODUS_INDEX"])
assert os.environ["JOB_COMPLETION_INDEX"] == str(i) and os.environ["NODUS_COMPLETIONS"] == "4"
d = os.path.join(os.environ["NODUS_OUTPUTS_DIR"], "shards")
os.makedirs(d, exist_ok=True)
start = time.time(); time.sleep(1.5)
with open(os.path.join(d, f"part-{i}.txt"), "w") as f:
    f.write(f"{start} {time.time()}")
"""


def test_indexed_job_runs_a_job_array_at_most_parallelism_at_once(slurm):
    k = slurm.create("indexed", INDEXED, completions=4, parallelism=2,
                     outputs=[{"name": "shards", "path": "/nodus/outputs/shards"}])
    seen = []
    o = slurm.wait(k, lambda o: seen.append(o.status["completedIndexes"]) or
                   o.phase in (Phase.SUCCEEDED, Phase.FAILED))
    assert o.phase == Phase.SUCCEEDED, o
    assert o.status["completedIndexes"] == "0-3" and o.status["succeeded"] == 4
    assert any(s not in ("", "0-3") for s in seen)  # indexes complete one by one
    shards = slurm.provider.output_location(k, "shards")
    spans = [tuple(map(float, (shards / f"part-{i}.txt").read_text().split())) for i in range(4)]
    overlap = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert overlap <= 2
    assert o.status["outputs"]["shards"]["type"] == "directory"
    # indexes finishing together store into one folder: none failed at it, none ran again
    assert o.status["attempts"] == 1 and o.status["failed"] == 0, o.status


FLAKY = """
import os, sys
i, attempt = int(os.environ["NODUS_INDEX"]), int(os.environ["NODUS_ATTEMPT"])
if i == 1 and attempt == 0:
    sys.exit(3)
"""


def test_failed_index_is_resubmitted_and_backoff_limit_fails_the_job(slurm):
    flaky = slurm.create("flaky", FLAKY, completions=3, parallelism=3, backoffLimit=2)
    broken = slurm.create("broken", "import os, sys; sys.exit(int(os.environ['NODUS_INDEX']))",
                          completions=2, parallelism=2, backoffLimit=2)
    o = slurm.wait(flaky)
    assert o.phase == Phase.SUCCEEDED, o
    assert o.status["failed"] == 1 and o.status["attempts"] == 2
    assert o.status["completedIndexes"] == "0-2"
    b = slurm.wait(broken)
    assert b.phase == Phase.FAILED and b.reason == Reason.BACKOFF_LIMIT_EXCEEDED, b
    assert b.status["failed"] == 3 and b.status["attempts"] == 3
    assert "exited with code 1" in b.message and "backoffLimit 2" in b.message
    assert b.status["completedIndexes"] == "0" and b.fix


def test_timeout_fails_with_deadline_exceeded_and_sets_the_slurm_limit(slurm):
    k = slurm.create("slow", "import time; time.sleep(120)", timeout="4s")
    job_id = slurm.job_ids(k)[0]
    assert slurm.provider.client.job(job_id)  # known to slurmctld
    limit = slurm.cluster.run("squeue", "-h", "-j", str(job_id), "-o", "%l").strip()
    assert limit == "1:00"  # 4 s rounded up to Slurm's minute
    started = time.monotonic()
    o = slurm.wait(k, timeout=40)
    assert o.phase == Phase.FAILED and o.reason == Reason.DEADLINE_EXCEEDED, o
    assert time.monotonic() - started < 30
    assert slurm.slurm_states(job_id) == ["CANCELLED"]


def test_cancel_stops_the_slurm_job(slurm):
    k = slurm.create("cancel-me", "import time; time.sleep(120)")
    slurm.wait(k, Phase.RUNNING)
    o = slurm.patch(k, state="Cancelled")
    assert o.phase in (Phase.CANCELLING, Phase.CANCELLED)
    o = slurm.wait(k)
    assert o.phase == Phase.CANCELLED
    assert slurm.slurm_states(slurm.job_ids(k)[0]) == ["CANCELLED"]


TICKER = """
import os, time
path = os.path.join(os.environ["NODUS_CHECKPOINT_DIR"], "ticks")
for n in range(60):
    with open(path, "a") as f:
        f.write(f"{time.time()}\\n")
    time.sleep(0.1)
"""


def test_suspend_and_resume_through_scontrol(slurm):
    assert slurm.provider.can_suspend() is True
    k = slurm.create("pausable", TICKER)
    slurm.wait(k, lambda o: o.phase == Phase.RUNNING and _ticks(slurm, k) > 3)
    o = slurm.patch(k, state="Suspended")
    o = slurm.wait(k, Phase.SUSPENDED, timeout=15)
    job_id = slurm.job_ids(k)[0]
    assert slurm.slurm_states(job_id) == ["SUSPENDED"]
    time.sleep(0.3)  # slurmd stops the processes just after slurmctld records SUSPENDED
    n = _ticks(slurm, k)
    time.sleep(1.5)
    assert _ticks(slurm, k) <= n + 1  # stopped (one write may have been in flight)
    slurm.patch(k, state="Running")
    slurm.wait(k, Phase.RUNNING, timeout=15)
    o = slurm.wait(k)
    assert o.phase == Phase.SUCCEEDED, o
    assert _ticks(slurm, k) == 60
    span = _seconds(o.status["completionTime"]) - _seconds(o.status["startTime"])
    assert o.status["wallSeconds"] <= span - 1.0  # the time Suspended is left out


def _seconds(rfc3339: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def _ticks(slurm, k) -> int:
    p = slurm.root / k.project / k.name / "state" / "0" / "ticks"
    return len(p.read_text().splitlines()) if p.exists() else 0


def test_a_run_over_its_memory_is_oom_killed(slurm):
    # Without cgroups Slurm samples memory every second (JobAcctGatherFrequency): hold it.
    hungry = "import time; x = bytearray(400 << 20); x[::4096] = b'1' * len(x[::4096]); " \
             "time.sleep(20)"
    k = slurm.create("hungry", hungry, resources={"memory": "128Mi"})
    o = slurm.wait(k)
    assert o.phase == Phase.FAILED and o.reason == Reason.OOM_KILLED, o
    assert "memory" in o.fix and o.status["failed"] == 1 and o.status["attempts"] == 1


def test_requests_the_cluster_cannot_place_fail_with_capacity_unavailable(slurm):
    k = slurm.create("mars", placement={"regions": ["mars"]})
    o = slurm.provider.get(k)
    assert o.phase == Phase.FAILED and o.reason == Reason.CAPACITY_UNAVAILABLE
    assert "region 'mars'" in o.message and "partitions" in o.message
    h = slurm.create("h100", resources={"gpu": "H100:8"})
    o = slurm.provider.get(h)
    assert o.phase == Phase.FAILED and o.reason == Reason.CAPACITY_UNAVAILABLE, o
    assert "cannot run this Job" in o.message
    eu = slurm.create("in-eu", "pass", placement={"regions": ["eu"]})
    o = slurm.wait(eu)
    assert o.phase == Phase.SUCCEEDED and o.status["slurm"]["partition"] == "eu"
    assert o.status["offering"] == "slurm/eu"  # get -o wide: OFFERING and RATE
    assert Decimal(o.status["rateUSDPerHour"]) == Decimal(
        slurm.provider.config.rates.per_second(1.0, 1 << 30, []) * 3600).quantize(Decimal("1e-6"))


def test_without_a_working_scontrol_suspend_is_refused_or_reported(slurm_factory):
    blind = slurm_factory(scontrol=None)
    assert blind.provider.can_suspend() is False
    k = blind.create("no-suspend", "import time; time.sleep(60)")
    with pytest.raises(PermanentError, match="cannot suspend"):
        blind.patch(k, state="Suspended")
    broken = slurm_factory(scontrol="/bin/false")  # runs, and fails every time
    j = broken.create("suspend-fails", "import time; time.sleep(60)")
    broken.wait(j, Phase.RUNNING)
    o = broken.patch(j, state="Suspended")
    assert o.reason == Reason.SUSPEND_FAILED and "scontrol suspend" in o.message
    assert broken.slurm_states(broken.job_ids(j)[0]) == ["RUNNING"]
    o = broken.patch(j, state="Cancelled")
    assert o.phase in (Phase.CANCELLING, Phase.CANCELLED) and o.reason is None
