"""The reconcile loop on a generated repository of N manifests, against a no-op provider.

Measures a cold full sync (fetch, parse, validate, plan, apply N creates), a no-change
poll, and a 1-file change (fetch + plan + apply one patch); the 1-file change is also
measured on a 100-manifest repository for the ratio. With `--kinds mixed` the repository
holds Jobs, Pipelines and Sweeps in turn (as valid as examples-repo/'s); else Jobs only.
Each remote is measured in a process of its own, whose peak RSS (getrusage) is reported
with the part of it taken before the first sync (generating the repository, imports).
Prints JSON.
Targets: poll < 5 ms, 1-file change < 50 ms and within 1.5x of 100 manifests; cold < 5 s
at 10,000 manifests and < 30 s at 100,000, peak RSS < 1 GB.

The remote is a bare repository served by Git over HTTP on 127.0.0.1 (`git
http-backend`, as a Git host serves it), and the same repository by its path (the
mirror then reads its objects in place). With HTTP, `server_ms` is the time the server
took to answer, within the figures: a Git host's share, not the reconciler's.

Run: python bench/bench_reconcile.py [--count 10000] [--changes 30] [--remote http|path]
                                    [--kinds jobs|mixed]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import pygit2

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from nodus_gitops.config import Binding, Settings  # noqa: E402
from nodus_gitops.providers.base import FakeProvider  # noqa: E402
from nodus_gitops.state.store import Store  # noqa: E402
from nodus_gitops.wiring import build_service  # noqa: E402

from tests.fixtures_git import serve_git_http  # noqa: E402

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
PIPELINE = """\
apiVersion: nodus.dev/v1
kind: Pipeline
metadata:
  name: pipeline-{i}
spec:
  maxCostUSD: "{cap}"
  failurePolicy: FailFast
  defaults:
    image: python:3.12-slim
    timeout: 15m
    resources:
      cpu: "1"
      memory: 512Mi
  stages:
    - name: prepare
      template:
        command: [python3, -c, "print('prepare {i}')"]
        outputs:
          - name: shards
            path: /nodus/outputs/shards
    - name: train
      dependsOn: [prepare]
      inputs:
        - name: data
          fromStage: prepare
          output: shards
      template:
        command: [python3, -c, "print('train {i}')"]
"""
SWEEP = """\
apiVersion: nodus.dev/v1
kind: Sweep
metadata:
  name: sweep-{i}
spec:
  maxCostUSD: "{cap}"
  maxParallel: 2
  matrix:
    params:
      BATCH_SIZE: ["32", "64", "128"]
  template:
    kind: Job
    spec:
      image: python:3.12-slim
      timeout: 10m
      resources:
        cpu: "1"
        memory: 512Mi
      command: [python3, -c, "print({i})"]
"""
# Manifest i's kind and template: Jobs only, or Jobs, Pipelines and Sweeps in turn.
KINDS = {"jobs": (("job", JOB),),
         "mixed": (("job", JOB), ("pipeline", PIPELINE), ("sweep", SWEEP))}
SIGNATURE = pygit2.Signature("bench", "bench@example.com")


class Repo:
    """A bare repository written straight through pygit2 (no work tree: fast)."""

    def __init__(self, path: Path, count: int, kinds: str = "jobs") -> None:
        self.repo = pygit2.init_repository(str(path), bare=True)
        self.count = count
        self.kinds = KINDS[kinds]
        self.caps = {i: 1 for i in range(count)}
        self.folders: dict[int, dict[str, pygit2.Oid]] = {}
        for i in range(count):
            self._write(i)
        self.commit("generated")

    def _write(self, i: int) -> None:
        name, template = self.kinds[i % len(self.kinds)]
        blob = self.repo.create_blob(template.format(i=i, cap=f"{self.caps[i]}.00").encode())
        self.folders.setdefault(i // 500, {})[f"{name}-{i}.yaml"] = blob

    def change(self, i: int) -> str:
        self.caps[i] += 1
        self._write(i)
        return self.commit(f"raise the cap of manifest {i}")

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


class Setup:
    """One remote of `count` manifests and a service syncing it (a fresh state store)."""

    def __init__(self, root: Path, count: int, remote: str, kinds: str,
                 stack: ExitStack) -> None:
        self.count = count
        self.repo = Repo(root / "srv" / "remote.git", count, kinds)
        url = str(root / "srv" / "remote.git")
        self.server = None
        if remote == "http":
            self.server = stack.enter_context(serve_git_http(root / "srv"))
            url = self.server.url_for("remote")
        self.store = stack.enter_context(Store.open(None, root / "state"))
        binding = Binding(id="bench", url=url, branch="main", path="manifests",
                          project="bench")
        # Commit checks (git notes by default) are left out: the target is fetch, plan
        # and apply; bench_webhook.py measures the whole path with them.
        settings = Settings(state_dir=root / "state", instance="bench", bindings=(binding,),
                            checks={"gitnotes": False})
        self.provider = FakeProvider()
        self.service = build_service(settings, self.store,
                                     provider_factory=lambda _n: self.provider)
        self.service.follow_up = False  # the sync alone, not the status reads after it
        self.changes = 0
        self.times: dict[str, list[float]] = {"poll": [], "change": []}
        self.server_seconds = {"poll": 0.0, "change": 0.0}

    def cold(self) -> float:
        start = time.perf_counter()
        report = self.service.reconcile("bench")
        elapsed = time.perf_counter() - start
        assert report is not None and report.result == "applied", report
        assert len(self.provider.resources) == self.count
        return elapsed

    def poll(self, record: bool = True) -> None:
        self._timed("poll" if record else None, "unchanged")

    def change(self, record: bool = True) -> None:
        self.changes += 1
        self.repo.change(self.changes * 7 % self.count)
        report = self._timed("change" if record else None, "applied")
        assert report.changes.summary()["patched"] == 1

    def _timed(self, what: str | None, expected: str):
        busy = self.server.busy_seconds if self.server else 0.0
        start = time.perf_counter()
        report = self.service.reconcile("bench")
        elapsed = time.perf_counter() - start
        assert report is not None and report.result == expected, report
        if what is not None:
            self.times[what].append(elapsed)
            if self.server:  # the Git server's share of that wait
                self.server_seconds[what] += self.server.busy_seconds - busy
        return report

    def figures(self, cold: float) -> dict:
        result = {"manifests": self.count, "cold_sync_s": round(cold, 3)}
        for what, label in (("poll", "no_change_poll_ms"), ("change", "one_file_change_ms")):
            result[label] = round(statistics.median(self.times[what]) * 1000, 2)
        if self.server:  # mean time the server spent answering, within those figures
            result["server_ms"] = {
                label: round(self.server_seconds[what] / len(self.times[what]) * 1000, 2)
                for what, label in (("poll", "no_change_poll"), ("change", "one_file_change"))}
        return result


def measure(count: int, changes: int, polls: int, remote: str, kinds: str) -> dict:
    """The large and the small repository, their polls and changes taken in turns so
    that both see the same moments of this (noisy) machine."""
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        large = Setup(Path(tmp) / "large", count, remote, kinds, stack)
        small = Setup(Path(tmp) / "small", 100, remote, kinds, stack)
        before_sync_mb = _peak_rss_mb()
        cpu = os.times()
        colds = [large.cold(), small.cold()]
        after = os.times()
        cold_cpu = after.user + after.system - cpu.user - cpu.system
        for _ in range(10):  # warm up: the cold sync's writes are still being checkpointed
            large.poll(record=False), small.poll(record=False)
        for _ in range(polls):
            large.poll(), small.poll()
        for _ in range(5):  # warm up the change path too (steady state, as in service)
            large.change(record=False), small.change(record=False)
        for _ in range(changes):
            large.change(), small.change()
        result = {"large": large.figures(colds[0]), "small": small.figures(colds[1])}
    result["one_file_change_ratio"] = round(result["large"]["one_file_change_ms"]
                                            / result["small"]["one_file_change_ms"], 2)
    # CPU seconds per wall second of the cold syncs: above 1 when more than one core works.
    result["cold_sync_cores_used"] = round(cold_cpu / sum(colds), 2)
    result["peak_rss_mb"] = _peak_rss_mb()
    result["peak_rss_before_sync_mb"] = before_sync_mb
    result["loadavg"] = _loadavg()
    return result


def _peak_rss_mb() -> int:
    """This process's peak resident set, in MB (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def _loadavg() -> str:
    """The machine's load (1, 5 and 15 minutes) beside a figure: others share it."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _measure_alone(out: multiprocessing.Queue, *args: object) -> None:
    out.put(measure(*args))


def measure_in_child(*args: object) -> dict:
    """`measure` in a fresh process, so that its peak RSS is its own."""
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    child = context.Process(target=_measure_alone, args=(out, *args))
    child.start()
    result = out.get()
    child.join()
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--changes", type=int, default=30)
    parser.add_argument("--polls", type=int, default=50)
    parser.add_argument("--remote", choices=("http", "path"), action="append",
                        help="where the remote is (default: both, http first)")
    parser.add_argument("--kinds", choices=sorted(KINDS), default="jobs",
                        help="Jobs only, or Jobs, Pipelines and Sweeps mixed")
    args = parser.parse_args()
    results = {remote: measure_in_child(args.count, args.changes, args.polls, remote,
                                        args.kinds)
               for remote in args.remote or ("http", "path")}
    print(json.dumps({
        "benchmark": "reconcile",
        "kinds": args.kinds,
        "remotes": results,
        "targets": {"no_change_poll_ms": 5, "one_file_change_ms": 50,
                    "one_file_change_ratio": 1.5,
                    "cold_sync_s": 30 if args.count > 10_000 else 5, "peak_rss_mb": 1000},
    }))


if __name__ == "__main__":
    main()
