"""spec.distributed on the local backend: the Job runs as a gang of processes, one per
node, with the rank, world size and rendezvous address in the environment as torchrun
sets them; all start together, one failing fails the gang, and each rank's outputs are
stored under its rank. And the placement fields the backend cannot honour say so."""

from __future__ import annotations

import json

# Every rank reports its environment; rank 0 listens on MASTER_ADDR:MASTER_PORT and
# waits for every other rank to connect and say its rank (so the ranks must run at the
# same time and reach the address they were given), then each writes an output.
RENDEZVOUS = """
import json, os, socket, time
env = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                      "MASTER_PORT", "NODUS_INDEX", "NODUS_COMPLETIONS")}
print("env", json.dumps(env), flush=True)
rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
addr = (env["MASTER_ADDR"], int(env["MASTER_PORT"]))
if rank == 0:
    srv = socket.create_server(addr)
    srv.settimeout(30)
    peers = []
    while len(peers) < world - 1:
        conn, _ = srv.accept()
        peers.append(int(conn.recv(16).decode()))
        conn.close()
    print("peers", sorted(peers), flush=True)
else:
    deadline = time.time() + 30
    while True:
        try:
            socket.create_connection(addr, timeout=1).sendall(str(rank).encode())
            break
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.05)
out = os.environ["NODUS_OUTPUTS_DIR"]
open(os.path.join(out, "result.txt"), "w").write(f"rank {rank}")
"""


def env_of(local, k, rank: int, attempt: int = 1) -> dict:
    log = local.run(k).log_for(rank, attempt).read_text()
    line = next(x for x in log.splitlines() if x.startswith("env "))
    return json.loads(line.removeprefix("env "))


def test_a_gang_runs_every_rank_together_with_torchrun_variables(local):
    k = local.create("gang", RENDEZVOUS, distributed={"nodes": 3},
                     outputs=[{"name": "result", "path": "/nodus/outputs/result.txt"}])
    done = local.wait(k, timeout=60)
    assert done.phase == "Succeeded", (done, local.run(k).read_events())
    envs = [env_of(local, k, rank) for rank in range(3)]
    port = envs[0]["MASTER_PORT"]
    assert port and port.isdigit()
    for rank, env in enumerate(envs):
        assert env == {"RANK": str(rank), "WORLD_SIZE": "3", "LOCAL_RANK": "0",
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port,
                       "NODUS_INDEX": "0", "NODUS_COMPLETIONS": "1"}
    assert "peers [1, 2]" in local.run(k).log_for(0, 1).read_text()
    # one index, one attempt: the gang is one run of the Job
    assert done.status["completedIndexes"] == "0"
    assert done.status["attempts"] == 1
    # each rank's outputs are stored under its rank; rank 0's are the Job's own
    outputs = local.run(k).outputs
    assert (outputs / "result.txt").read_text() == "rank 0"
    assert (outputs / "rank-1" / "result.txt").read_text() == "rank 1"
    assert (outputs / "rank-2" / "result.txt").read_text() == "rank 2"
    # ... and identify their rank where users read them: status.outputs and cp
    assert sorted(done.status["outputs"]) == ["rank-1/result", "rank-2/result", "result"]
    assert done.status["outputs"]["rank-2/result"]["path"] == "/nodus/outputs/rank-2/result.txt"
    copied, _size, _sha = local.provider.copy_output(k, "rank-2/result", local.root / "got")
    assert copied.read_text() == "rank 2"
    started = [e for e in local.run(k).read_events() if e["reason"] == "GangStarted"]
    assert len(started) == 1 and "3 ranks" in started[0]["message"]


# Rank 1 fails at once; the others would run for a minute.
ONE_FAILS = """
import os, sys, time
if os.environ["RANK"] == "1":
    sys.exit(3)
open(os.path.join(os.environ["NODUS_OUTPUTS_DIR"], "partial"), "w").write("x")
time.sleep(60)
"""


def test_one_rank_failing_fails_the_gang(local):
    k = local.create("gang-fails", ONE_FAILS, distributed={"nodes": 3}, backoffLimit=0)
    done = local.wait(k, timeout=60)
    assert done.phase == "Failed", done
    assert done.reason == "BackoffLimitExceeded", done
    assert "rank 1" in done.message, done.message
    # the ranks that were still running were stopped with it, and nothing was stored
    assert done.status["active"] == 0
    assert not any(local.run(k).outputs.iterdir())
    failed = [e for e in local.run(k).read_events() if e["reason"] == "RunFailed"]
    assert len(failed) == 1, failed  # the peers it took down are not failures of their own


# Rank 1 fails on the gang's first attempt only; every rank counts its attempts.
FAILS_ONCE = """
import os, sys, time
rank, tries = os.environ["RANK"], "tries-" + os.environ["RANK"]
os.makedirs(tries, exist_ok=True)
n = len(os.listdir(tries))
open(os.path.join(tries, str(n)), "w").close()
print("attempt", n, "state", sorted(os.listdir(os.environ["NODUS_CHECKPOINT_DIR"])), flush=True)
open(os.path.join(os.environ["NODUS_CHECKPOINT_DIR"], "step"), "w").write("1")
if rank == "1" and n == 0:
    while not os.path.isdir("tries-0") or not os.listdir("tries-0"):  # rank 0 counted its try
        time.sleep(0.02)
    sys.exit(1)
if n == 0:
    time.sleep(60)
"""


def test_a_failed_gang_is_retried_whole_and_fresh(local):
    k = local.create("gang-retry", FAILS_ONCE, distributed={"nodes": 2}, backoffLimit=1)
    done = local.wait(k, timeout=60)
    assert done.phase == "Succeeded", (done, local.run(k).read_events())
    assert done.status["attempts"] == 2
    for rank in range(2):  # both ranks ran twice, the second time without the first's state
        second = local.run(k).log_for(rank, 2).read_text()
        assert "attempt 1 state []" in second, second


def test_a_gang_needs_every_rank_placed_at_once(local_factory):
    from nodus_gitops.providers.local.config import GpuSlot

    local = local_factory(gpu_slots=[GpuSlot("L4", "24Gi", index=i) for i in range(3)])
    k = local.create("gang-gpus", "import os; print('gpu', os.environ['CUDA_VISIBLE_DEVICES'])",
                     distributed={"nodes": 2, "gpusPerNode": 2}, resources={"gpu": "L4"},
                     placement={"queueTimeout": "2s"})
    done = local.wait(k, timeout=30)
    # 4 GPUs for the gang, 3 here: no rank starts, and the Job says why
    assert done.phase == "Failed", done
    assert done.reason == "CapacityUnavailable", done
    assert done.status["attempts"] == 0
    assert "2 ranks" in done.message and "L4 x2" in done.message, done.message


def test_a_gang_with_completions_is_refused(local):
    from nodus_gitops.floor.errors import PermanentError

    try:
        local.create("gang-indexed", "pass", distributed={"nodes": 2}, completions=2)
    except PermanentError as exc:
        assert "spec.distributed" in str(exc) and "completions" in str(exc)
    else:
        raise AssertionError("a distributed Job with completions 2 was accepted")


def test_fields_the_backend_cannot_honour_are_stated(local):
    k = local.create("placed", "pass", placement={"regions": ["eu"], "interruptible": True},
                     completeByTime="2030-01-01T00:00:00Z")
    done = local.wait(k)
    assert done.phase == "Succeeded", done
    events = {e["reason"]: e for e in local.run(k).read_events()}
    assert "NotHonoured" in events, events
    message = events["NotHonoured"]["message"]
    for name in ("placement.regions", "placement.interruptible", "completeByTime"):
        assert name in message, message
    assert events["NotHonoured"]["type"] == "Warning"


def test_a_job_without_those_fields_has_no_such_event(local):
    k = local.create("plain", "pass")
    assert local.wait(k).phase == "Succeeded"
    assert "NotHonoured" not in {e["reason"] for e in local.run(k).read_events()}


# Each rank keeps a step in its checkpoint; the first attempt waits to lose its capacity.
CHECKPOINTED_GANG = """
import os, time
state = os.path.join(os.environ["NODUS_CHECKPOINT_DIR"], "step")
step = open(state).read() if os.path.exists(state) else "none"
print("rank", os.environ["RANK"], "resumes from", step, flush=True)
open(state, "w").write("rank " + os.environ["RANK"])
while step == "none":
    time.sleep(0.1)
"""


def test_a_lost_gang_recovers_whole_from_each_ranks_checkpoint(local):
    from tests.providers.local.test_recovery import kill_supervisor

    k = local.create("gang-lost", CHECKPOINTED_GANG, distributed={"nodes": 2},
                     recovery={"maxAttempts": 2})
    local.wait(k, lambda o: o.status["active"] == 2 and all(
        "resumes" in local.run(k).log_for(r, 1).read_text() for r in range(2)
        if local.run(k).log_for(r, 1).exists()), timeout=30)
    kill_supervisor(local, k)  # the capacity of the whole gang is gone
    done = local.wait(k, timeout=60)
    assert done.phase == "Succeeded", (done, local.run(k).read_events())
    assert done.status["recoveries"] == 1
    for rank in range(2):  # every rank came back, from its own checkpoint
        assert f"resumes from rank {rank}" in local.log(k, rank)
    # and `logs` reaches every rank
    assert local.provider.log_info(k, 1).indexes == 2


def test_a_gang_uses_up_max_attempts_as_one_index(local):
    from tests.providers.local.test_recovery import kill_supervisor

    k = local.create("gang-unlucky", CHECKPOINTED_GANG.replace('while step == "none"', "while 1"),
                     distributed={"nodes": 2}, recovery={"maxAttempts": 1})
    local.wait(k, lambda o: o.status["active"] == 2, timeout=30)
    kill_supervisor(local, k)
    done = local.wait(k, timeout=60)
    assert done.phase == "Failed", done
    assert done.reason == "RecoveryLimitExceeded", done


def test_a_gang_is_estimated_and_charged_for_every_rank(local):
    from decimal import Decimal

    from nodus_gitops.providers.local.config import RateCard
    from nodus_gitops.providers.local.cost import estimate

    from tests.providers.local.conftest import manifest

    rates = RateCard(cpu_core_hour=1.0, memory_gib_hour=0.5, gpu_hour={"L4": 2.0})
    m = manifest("e", resources={"cpu": "2", "memory": "2Gi", "gpu": "L4"},
                 expectedDuration="30m", distributed={"nodes": 3, "gpusPerNode": 2})
    # each rank: 2 cores + 2 GiB + two L4s = $7/h; three ranks for half an hour
    assert estimate(m, rates) == "10.5"
    k = local.create("gang-cost", "import time; time.sleep(1)", distributed={"nodes": 2})
    done = local.wait(k, timeout=30)
    single = local.create("single-cost", "import time; time.sleep(1)")
    alone = local.wait(single, timeout=30)
    assert Decimal(done.cost_usd) > Decimal(alone.cost_usd) * Decimal("1.5"), (done, alone)


# Rank 1 finishes at once; rank 0 saves a step and waits to be stopped on its first run.
SUSPENDED_GANG = """
import os, signal, sys, time
state = os.path.join(os.environ["NODUS_CHECKPOINT_DIR"], "step")
step = open(state).read() if os.path.exists(state) else "none"
print("rank", os.environ["RANK"], "resumes from", step, flush=True)
open(state, "w").write("saved")
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
while os.environ["RANK"] == "0" and step == "none":
    time.sleep(0.05)
"""


def test_a_suspended_gang_resumes_every_rank_together(local):
    k = local.create("gang-pause", SUSPENDED_GANG, distributed={"nodes": 2})
    local.wait(k, lambda o: "resumes" in local.log(k, 1) and "resumes" in local.log(k, 0),
               timeout=30)
    local.patch(k, state="Suspended")
    assert local.wait(k, "Suspended", timeout=30).phase == "Suspended"
    local.patch(k, state="Running")
    done = local.wait(k, timeout=30)
    assert done.phase == "Succeeded", (done, local.run(k).read_events())
    # rank 1 had finished before the suspend, and still runs again with rank 0
    for rank in range(2):
        assert "resumes from saved" in local.log(k, rank), local.log(k, rank)


def test_a_gang_without_a_network_shares_one_loopback(local_factory):
    from tests.providers.local.conftest import HAS_BWRAP

    if not HAS_BWRAP:
        import pytest

        pytest.skip("network: none needs bubblewrap, which is not installed")
    local = local_factory(network="none")
    k = local.create("gang-alone", RENDEZVOUS, distributed={"nodes": 2})
    done = local.wait(k, timeout=30)
    assert done.phase == "Succeeded", (done, local.run(k).read_events())
    assert "peers [1]" in local.log(k, 0)
    events = local.run(k).read_events()
    assert not [e for e in events if e["reason"] == "GangIsolated"], events
    started = [e for e in events if e["reason"] == "GangStarted"]
    assert "a loopback of the gang's own" in started[0]["message"], started
