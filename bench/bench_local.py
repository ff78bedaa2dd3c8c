"""Benchmark of the local backend; prints one JSON object.

- apply_to_running_ms: from `create()` to the first index's process running (the
  supervisor records the time its process started), median and p90 of 20 Jobs created
  half a second apart, with a pre-started supervisor (the default) and without one
  (an interpreter start and the supervisor's imports on the way).
- indexed: one Job of 256 trivial indexes (`python -c pass`), parallelism 16, from
  `create()` to Succeeded, against the same 256 processes started by a plain Python
  loop with 16 at a time; `ratio_vs_plain_loop` is local / loop.

Each is measured with the runs contained by bubblewrap (when it works here: their own
user, namespaces and files, `sandbox: bubblewrap`, the default), with their own network
through slirp4netns (`network: shared`, the default) and with the host's
(`network: host`, tagged `-network-host`), and without a sandbox (`sandbox: none`).

    python bench/bench_local.py [--quick]
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from nodus_gitops.floor.identity import ResourceKey  # noqa: E402
from nodus_gitops.floor.phases import is_terminal  # noqa: E402
from nodus_gitops.providers.base import Workload  # noqa: E402
from nodus_gitops.providers.jsonfiles import read_json  # noqa: E402
from nodus_gitops.providers.local import LocalConfig, LocalProvider  # noqa: E402
from nodus_gitops.providers.local.rundir import RunDir  # noqa: E402
from nodus_gitops.providers.local.runuser import resolve as run_user  # noqa: E402
from nodus_gitops.providers.local.settings import find_helper, probe  # noqa: E402

TRIVIAL = [sys.executable, "-c", "pass"]


def manifest(name: str, **spec: object) -> dict:
    return {"apiVersion": "nodus.dev/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"command": TRIVIAL, **spec}}


def wait_status(run: RunDir, until, timeout: float = 120.0, poll: float = 0.02) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = read_json(run.status)
        if st is not None and until(st):
            return st
        time.sleep(poll)
    raise TimeoutError(f"{run.path} did not get there in {timeout}s")


def apply_to_running(provider: LocalProvider, tag: str, n: int) -> dict:
    latencies = []
    for i in range(n):
        key = ResourceKey("Job", "bench", f"{tag}-lat-{i}")
        t0 = time.time()
        provider.create(Workload(key, manifest(key.name), "h"), key.name)
        run = RunDir.for_key(provider.root, key)
        st = wait_status(run, lambda s: s.get("startTime") is not None)
        latencies.append((st["startTime"] - t0) * 1000)
        wait_status(run, lambda s: is_terminal(s["phase"]), poll=0.01)
        time.sleep(0.5)  # Jobs are applied apart, not back to back
    latencies.sort()
    return {"median": round(statistics.median(latencies), 1),
            "p90": round(latencies[int(0.9 * (len(latencies) - 1))], 1),
            "min": round(latencies[0], 1)}


def indexed(provider: LocalProvider, tag: str, completions: int, parallelism: int) -> float:
    key = ResourceKey("Job", "bench", f"{tag}-indexed")
    t0 = time.time()
    provider.create(Workload(key, manifest(key.name, completions=completions,
                                           parallelism=parallelism), "h"), key.name)
    st = wait_status(RunDir.for_key(provider.root, key), lambda s: is_terminal(s["phase"]),
                     poll=0.01)
    assert st["phase"] == "Succeeded" and st["succeeded"] == completions, st["phase"]
    return st["completionTime"] - t0


def plain_loop(completions: int, parallelism: int) -> float:
    t0 = time.time()
    started = 0
    running: dict[int, subprocess.Popen] = {}
    while started < completions or running:
        while len(running) < parallelism and started < completions:
            p = subprocess.Popen(TRIVIAL, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.STDOUT)
            running[p.pid] = p
            started += 1
        pid, status = os.wait()
        running.pop(pid).returncode = os.waitstatus_to_exitcode(status)
    return time.time() - t0


def main() -> None:
    quick = "--quick" in sys.argv
    n_latency = 5 if quick else 20
    completions, parallelism = (64, 16) if quick else (256, 16)
    tmp = Path(tempfile.mkdtemp(prefix="nodus-bench-"))
    results: dict = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
                     "completions": completions, "parallelism": parallelism}
    try:
        baseline = min(plain_loop(completions, parallelism) for _ in range(2))
        results["plain_loop_seconds"] = round(baseline, 3)
        works = probe(find_helper("bwrap"), run_user(None, None), "shared") is None
        # (sandbox, network): the default's own network (slirp4netns) beside the host's
        setups = [("none", "shared")] + (
            [("bubblewrap", "shared"), ("bubblewrap", "host")] if works else [])
        for sandbox, network in setups:
            for prestart in (True, False):
                tag = f"{sandbox}-{'prestarted' if prestart else 'cold'}"
                if sandbox != "none" and network != "shared":
                    tag += f"-network-{network}"
                provider = LocalProvider(tmp / tag, LocalConfig(
                    sandbox=sandbox, network=network, detect_gpus=False,
                    prestart_supervisor=prestart))
                row = {"apply_to_running_ms": apply_to_running(provider, tag, n_latency)}
                if prestart:
                    local = indexed(provider, tag, completions, parallelism)
                    row["indexed_seconds"] = round(local, 3)
                    row["ratio_vs_plain_loop"] = round(local / baseline, 2)
                results[tag] = row
                del provider
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
