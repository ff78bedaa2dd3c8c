"""Benchmark of the slurm backend on the test cluster (tests/providers/slurm/start.sh, started or
reused here); prints one JSON object.

- submit_to_running_ms: from `create()` to the command running (it writes the time it
  started), median and p90 of N Jobs created one after another; `observed_running_ms`
  is from `create()` to the provider's get() first saying Running (polled every 20 ms).
  Baselines: the same stamp from a bare script POSTed to slurmrestd (`rest_plain_ms`)
  and from `sbatch --wrap` (`sbatch_ms`), so the provider's own share is visible.
- sweep64: a 64-cell Sweep of trivial cells (`true`, maxParallel 64) driven by the
  reconciler's Sweep controller through `CompositeProvider(SlurmProvider)` and polled
  every 0.2 s, from create() to Succeeded, against the same 64 jobs submitted by a plain
  `sbatch` loop and polled with squeue; `ratio_vs_sbatch_loop` is controllers / loop.

    python bench/bench_slurm.py [--quick]
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
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from nodus_gitops.floor.identity import ResourceKey  # noqa: E402
from nodus_gitops.floor.phases import Phase, is_terminal  # noqa: E402
from nodus_gitops.providers.base import Workload  # noqa: E402
from nodus_gitops.providers.slurm import SlurmConfig, SlurmProvider  # noqa: E402
from nodus_gitops.workloads import CompositeProvider  # noqa: E402


def start_cluster() -> dict[str, str]:
    out = subprocess.run([str(REPO / "tests" / "providers" / "slurm" / "start.sh")],
                         capture_output=True,
                         text=True, check=True, timeout=300).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def job(name: str, command: list[str]) -> dict:
    return {"apiVersion": "nodus.dev/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"command": command}}


def submit_to_running(provider: SlurmProvider, n: int) -> dict:
    started, observed = [], []
    for i in range(n):
        key = ResourceKey("Job", "bench", f"lat-{i}")
        cmd = ["/bin/sh", "-c", 'date +%s.%N > "$NODUS_OUTPUTS_DIR/t"; sleep 1']
        t0 = time.time()
        provider.create(Workload(key, job(key.name, cmd), "h"), f"lat-{i}")
        while True:
            o = provider.get(key)
            if o.phase in (Phase.RUNNING, Phase.SUCCEEDED):
                observed.append((time.time() - t0) * 1000)
                break
            time.sleep(0.02)
        stamp = provider.root / "bench" / key.name / "outputs" / "t"
        while not stamp.exists() or not stamp.read_text().strip():
            time.sleep(0.01)
        started.append((float(stamp.read_text()) - t0) * 1000)
        while not is_terminal(provider.get(key).phase):
            time.sleep(0.1)

    def summary(xs: list[float]) -> dict:
        xs = sorted(xs)
        return {"median": round(statistics.median(xs), 1),
                "p90": round(xs[int(0.9 * (len(xs) - 1))], 1), "n": len(xs)}
    return {"submit_to_running_ms": summary(started), "observed_running_ms": summary(observed)}


def baselines(env: dict[str, str], provider: SlurmProvider, n: int, workdir: Path) -> dict:
    cenv = {**os.environ, "SLURM_CONF": env["SLURM_CONF"]}
    cenv.pop("SLURM_JWT", None)
    rest, sbatch = [], []
    for i in range(n):
        for kind, out in (("rest", rest), ("sbatch", sbatch)):
            stamp = workdir / f"{kind}-{i}"
            line = f"date +%s.%N > {stamp}"
            t0 = time.time()
            if kind == "rest":
                provider.client.submit(f"#!/bin/sh\n{line}\n", {
                    "name": "bench-base", "current_working_directory": str(workdir),
                    "environment": {"PATH": "/usr/bin:/bin"}, "standard_output": "/dev/null"})
            else:
                subprocess.run(["sbatch", "-Q", "-J", "bench-base", "-o", "/dev/null", "-D",
                                str(workdir), "--wrap", line], env=cenv, check=True)
            while not stamp.exists() or not stamp.read_text().strip():
                time.sleep(0.01)
            out.append((float(stamp.read_text()) - t0) * 1000)
            time.sleep(1.2)  # let the node go idle again
    return {"rest_plain_ms": round(statistics.median(rest), 1),
            "sbatch_ms": round(statistics.median(sbatch), 1)}


def sweep(composite: CompositeProvider, cells: int) -> float:
    key = ResourceKey("Sweep", "bench", f"sw{uuid.uuid4().hex[:6]}")
    spec = {"maxParallel": cells, "matrix": {"params": {"X": [str(i) for i in range(cells)]}},
            "template": {"kind": "Job", "spec": {"command": ["true"]}}}
    manifest = {"apiVersion": "nodus.dev/v1", "kind": "Sweep", "metadata": {"name": key.name},
                "spec": spec}
    t0 = time.monotonic()
    composite.create(Workload(key, manifest, "h"), key.name)
    while True:
        o = composite.get(key)
        if is_terminal(o.phase):
            assert o.phase == Phase.SUCCEEDED, o
            return time.monotonic() - t0
        time.sleep(0.2)


def sbatch_loop(env: dict[str, str], cells: int, workdir: Path) -> float:
    cenv = {**os.environ, "SLURM_CONF": env["SLURM_CONF"]}
    cenv.pop("SLURM_JWT", None)
    name = f"loop{uuid.uuid4().hex[:6]}"
    t0 = time.monotonic()
    for _ in range(cells):
        subprocess.run(["sbatch", "--parsable", "-J", name, "-o", "/dev/null", "-D",
                        str(workdir), "--wrap", "true"], env=cenv, check=True,
                       capture_output=True)
    while True:
        out = subprocess.run(["squeue", "-h", "-t", "all", "--name", name, "-o", "%T"],
                             env=cenv, capture_output=True, text=True).stdout.split()
        if len(out) == cells and all(s == "COMPLETED" for s in out):
            return time.monotonic() - t0
        time.sleep(0.2)


def main() -> None:
    quick = "--quick" in sys.argv
    env = start_cluster()
    root = Path(env["NODUS_SLURM_ROOT"]) / f"bench-{uuid.uuid4().hex[:6]}"
    settings = {"type": "slurm", "url": env["SLURM_URL"], "user": env["SLURM_USER"],
                "tokenFile": env["NODUS_SLURM_TOKEN_FILE"], "root": str(root),
                "slurmConf": env["SLURM_CONF"], "tokenEnv": "NODUS_BENCH_UNSET"}
    provider = SlurmProvider(SlurmConfig.from_settings("slurm", settings))
    results: dict = {"cluster": "single node, 32 advertised CPUs, Slurm 22.05",
                     "cpus_real": os.cpu_count()}
    results.update(submit_to_running(provider, 5 if quick else 15))
    root.mkdir(parents=True, exist_ok=True)
    results["baselines"] = baselines(env, provider, 3 if quick else 5, root)
    cells = 16 if quick else 64
    with tempfile.TemporaryDirectory() as tmp:
        controllers = sweep(CompositeProvider(provider, Path(tmp) / "workloads"), cells)
        loop = sbatch_loop(env, cells, root)
    results[f"sweep{cells}"] = {"controllers_s": round(controllers, 2),
                                "sbatch_loop_s": round(loop, 2),
                                "ratio_vs_sbatch_loop": round(controllers / loop, 2)}
    shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
