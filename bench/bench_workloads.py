"""The Sweep controller's overhead on the local backend: a 256-cell Sweep of trivial cells
with maxParallel 16, reconciled from a commit, against the same 256 cell Jobs created
directly on the backend with at most 16 running. Both sides poll every 0.2 s. Prints JSON;
target: within 1.2x.

Run: python bench/bench_workloads.py [--cells 256] [--parallel 16]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import pygit2
from nodus_gitops.backends import build_backend as build_provider
from nodus_gitops.config import Binding, Settings
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.floor.phases import is_terminal
from nodus_gitops.plan import spec_hash
from nodus_gitops.providers.base import Workload
from nodus_gitops.state.store import Store
from nodus_gitops.wiring import build_service
from nodus_gitops.workloads.base import Record
from nodus_gitops.workloads.sweep import SweepController

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.local_runs import stop_local_runs  # noqa: E402

POLL = 0.2
SIG = pygit2.Signature("bench", "bench@example.com")
LOCAL = {"type": "local", "prestartSupervisor": True}


def sweep_manifest(cells: int, parallel: int) -> str:
    values = ", ".join(f'"{i}"' for i in range(cells // 4))
    return (f"apiVersion: nodus.dev/v1\nkind: Sweep\nmetadata:\n  name: bench\nspec:\n"
            f"  maxParallel: {parallel}\n  repetitions: 4\n  matrix:\n    params:\n"
            f"      N: [{values}]\n  template:\n    kind: Job\n    spec:\n"
            f"      command: [python3, -c, pass]\n")


def through_the_controller(root: Path, cells: int, parallel: int) -> float:
    repo = pygit2.init_repository(str(root / "remote.git"), bare=True)
    blob = repo.create_blob(sweep_manifest(cells, parallel).encode())
    tree = repo.TreeBuilder()
    tree.insert("sweep.yaml", blob, pygit2.GIT_FILEMODE_BLOB)
    repo.create_commit("refs/heads/main", SIG, SIG, "sweep", tree.write(), [])
    state = root / "state-a"
    store = Store.open(None, state)
    binding = Binding(id="bench", url=str(root / "remote.git"), project="p")
    service = build_service(Settings(state_dir=state, bindings=(binding,)), store,
                      provider_factory=lambda n: build_provider(n, LOCAL, state))
    start = time.perf_counter()
    assert service.reconcile("bench").result == "applied"
    key = ResourceKey("Sweep", "p", "bench")
    while True:
        service.refresh_all()
        record = store.get_resource(key)
        if is_terminal(record.phase):
            assert record.phase == "Succeeded", record.status
            return time.perf_counter() - start
        time.sleep(POLL)


def directly(root: Path, cells: int, parallel: int) -> float:
    state = root / "state-b"
    provider = build_provider("local", LOCAL, state).inner
    record = Record(ResourceKey("Sweep", "p", "bench"), {"spec": _spec(cells, parallel)}, "k")
    jobs = SweepController(provider, None).children(record)  # the very same cell specs
    pending = list(jobs)
    running: list[ResourceKey] = []
    start = time.perf_counter()
    while pending or running:
        running = [k for k in running if not is_terminal(provider.get(k).phase)]
        while pending and len(running) < parallel:
            child = pending.pop(0)
            key = ResourceKey("Job", "p", child.job)
            manifest = {"apiVersion": "nodus.dev/v1", "kind": "Job",
                        "metadata": {"name": child.job}, "spec": child.spec}
            provider.create(Workload(key, manifest, spec_hash(manifest)), child.job)
            running.append(key)
        if pending or running:
            time.sleep(POLL)
    return time.perf_counter() - start


def _spec(cells: int, parallel: int) -> dict:
    import yaml

    return yaml.safe_load(sweep_manifest(cells, parallel))["spec"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cells", type=int, default=256)
    parser.add_argument("--parallel", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        try:
            controller = through_the_controller(root, args.cells, args.parallel)
            direct = directly(root, args.cells, args.parallel)
        finally:  # each Job's filesystem is a mount: the folder cannot go before them
            for state in ("state-a", "state-b"):
                stop_local_runs(root / state / "local")
    print(json.dumps({"benchmark": "workloads", "cells": args.cells,
                      "max_parallel": args.parallel,
                      "sweep_controller_s": round(controller, 2),
                      "jobs_directly_s": round(direct, 2),
                      "ratio": round(controller / direct, 2), "target_ratio": 1.2}))


if __name__ == "__main__":
    main()
