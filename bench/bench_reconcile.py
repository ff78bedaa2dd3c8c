"""The reconcile loop on a generated repository of N manifests, against a no-op provider.

Measures, with a local bare remote: a cold full sync (fetch, parse, validate, plan, apply
N creates), a no-change poll, and a 1-file change (fetch + plan + apply one patch); the
1-file change is also measured on a 100-manifest repository for the ratio. Prints JSON.
Targets: poll < 5 ms, 1-file change < 50 ms and within 1.5x of 100 manifests, cold < 5 s.

Run: python bench/bench_reconcile.py [--count 10000] [--changes 15]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import pygit2

from providers.base import FakeProvider
from reconciler.config import Binding, Settings
from reconciler.service import Service
from state.store import Store

JOB = """\
apiVersion: nodus.dev/v1
kind: Job
metadata:
  name: job-{i}
spec:
  image: python:3.12-slim
  command: [python3, -c, "print({i})"]
  resources:
    cpu: "1"
    memory: 512Mi
  timeout: 10m
  maxCostUSD: "{cap}"
"""
SIGNATURE = pygit2.Signature("bench", "bench@example.com")


class Repo:
    """A bare repository written straight through pygit2 (no work tree: fast)."""

    def __init__(self, path: Path, count: int) -> None:
        self.repo = pygit2.init_repository(str(path), bare=True)
        self.count = count
        self.caps = {i: 1 for i in range(count)}
        self.folders: dict[int, dict[str, pygit2.Oid]] = {}
        for i in range(count):
            self._write(i)
        self.commit("generated")

    def _write(self, i: int) -> None:
        blob = self.repo.create_blob(JOB.format(i=i, cap=f"{self.caps[i]}.00").encode())
        self.folders.setdefault(i // 500, {})[f"job-{i}.yaml"] = blob

    def change(self, i: int) -> str:
        self.caps[i] += 1
        self._write(i)
        return self.commit(f"raise the cap of job-{i}")

    def commit(self, message: str) -> str:
        top = self.repo.TreeBuilder()
        for folder, files in self.folders.items():
            sub = self.repo.TreeBuilder()
            for name, blob in files.items():
                sub.insert(name, blob, pygit2.GIT_FILEMODE_BLOB)
            top.insert(f"d{folder:03d}", sub.write(), pygit2.GIT_FILEMODE_TREE)
        manifests = self.repo.TreeBuilder()
        manifests.insert("manifests", top.write(), pygit2.GIT_FILEMODE_TREE)
        tip = self.repo.references.get("refs/heads/main")
        parents = [tip.target] if tip is not None else []
        sha = self.repo.create_commit("refs/heads/main", SIGNATURE, SIGNATURE, message,
                                      manifests.write(), parents)
        return str(sha)


def measure(count: int, changes: int, polls: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        repo = Repo(root / "remote.git", count)
        store = Store.open(None, root / "state")
        binding = Binding(id="bench", url=str(root / "remote.git"), branch="main",
                          path="manifests", project="bench")
        # Commit checks (git notes by default) are left out: the target is fetch, plan
        # and apply; bench_webhook.py measures the whole path with them.
        settings = Settings(state_dir=root / "state", instance="bench", bindings=(binding,),
                            checks={"gitnotes": False})
        provider = FakeProvider()
        service = Service(settings, store, provider_factory=lambda _n: provider)
        service.follow_up = False  # measure the sync alone, not the status reads after it

        start = time.perf_counter()
        report = service.reconcile("bench")
        cold = time.perf_counter() - start
        assert report is not None and report.result == "applied", report
        assert len(provider.resources) == count

        for _ in range(10):  # warm up: the cold sync's writes are still being checkpointed
            service.reconcile("bench")
        poll_times = []
        for _ in range(polls):
            start = time.perf_counter()
            report = service.reconcile("bench")
            poll_times.append(time.perf_counter() - start)
            assert report is not None and report.result == "unchanged"

        for n in range(5):  # warm up the change path too (steady state, as in service)
            repo.change(count - 1 - n)
            service.reconcile("bench")
        change_times = []
        for n in range(changes):
            repo.change(n * 7 % count)
            start = time.perf_counter()
            report = service.reconcile("bench")
            change_times.append(time.perf_counter() - start)
            assert report is not None and report.result == "applied", report.message
            assert report.changes.summary()["patched"] == 1
        store.close()
    return {"manifests": count, "cold_sync_s": round(cold, 3),
            "no_change_poll_ms": round(statistics.median(poll_times) * 1000, 2),
            "one_file_change_ms": round(statistics.median(change_times) * 1000, 2)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--changes", type=int, default=15)
    parser.add_argument("--polls", type=int, default=50)
    args = parser.parse_args()
    large = measure(args.count, args.changes, args.polls)
    small = measure(100, args.changes, args.polls)
    print(json.dumps({
        "benchmark": "reconcile",
        "large": large,
        "small": small,
        "one_file_change_ratio": round(large["one_file_change_ms"]
                                       / small["one_file_change_ms"], 2),
        "targets": {"no_change_poll_ms": 5, "one_file_change_ms": 50,
                    "one_file_change_ratio": 1.5, "cold_sync_s": 5},
    }))


if __name__ == "__main__":
    main()
