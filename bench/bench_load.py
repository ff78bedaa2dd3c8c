"""Load: a 10,000-manifest repository with a commit every second for a minute, against
one instance, then two replicas sharing one store (two bindings of the repository, each
into its own project, so that each replica holds one).
Checks that every commit is planned or superseded by a newer one before its sync began,
that no two syncs of one binding overlap, and reports each replica's peak RSS.
Prints JSON. Target: peak RSS under 300 MB for 10,000 managed resources.

Run: python bench/bench_load.py [--count 10000] [--seconds 60] [--state URL]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_reconcile import Repo  # noqa: E402
from nodus_gitops.config import Binding, Settings  # noqa: E402
from nodus_gitops.leases import LeaseKeeper  # noqa: E402
from nodus_gitops.providers.base import FakeProvider  # noqa: E402
from nodus_gitops.state.store import Store  # noqa: E402
from nodus_gitops.wiring import build_service  # noqa: E402


def bindings(remote: str, halves: int) -> tuple[Binding, ...]:
    if halves == 1:
        return (Binding(id="all", url=remote, path="manifests", project="load"),)
    return tuple(Binding(id=f"half-{h}", url=remote, path="manifests", project=f"load-{h}")
                 for h in range(halves))


def replica(name: str, state: str, remote: str, halves: int, state_dir: str,
            until: float, out: multiprocessing.Queue) -> None:
    store = Store.open(state)
    settings = Settings(state_dir=Path(state_dir) / name, instance="load",
                        bindings=bindings(remote, halves))
    service = build_service(settings, store, provider_factory=lambda _n: FakeProvider())
    service.leases = LeaseKeeper(store, service.syncs, replica=name, ttl=6)
    service.follow_up = False

    def keep() -> None:  # as `serve` does: renewals on their own thread, beside syncs
        while time.time() < until:
            service.keep_leases()
            time.sleep(2)

    keeper = threading.Thread(target=keep, daemon=True)
    keeper.start()
    while time.time() < until:
        for binding_id in service.syncs:
            service.reconcile(binding_id, wait=0)
        time.sleep(0.2)
    keeper.join()
    service.leases.release_all()
    out.put((name, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024))


def run(count: int, seconds: int, replicas: int, state_url: str | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        repo = Repo(root / "remote.git", count)
        state = state_url or f"sqlite:///{root / 'state.db'}"
        Store.open(state).close()  # migrate once
        halves = replicas
        out: multiprocessing.Queue = multiprocessing.Queue()
        start = time.time()
        until = start + seconds + 30  # the first (cold) sync needs time too
        procs = [multiprocessing.Process(target=replica, args=(
            f"replica-{i}", state, str(root / "remote.git"), halves, str(root), until, out))
            for i in range(replicas)]
        for p in procs:
            p.start()
        time.sleep(25)  # cold syncs
        pushed: list[tuple[str, datetime]] = []
        for n in range(seconds):
            tick = time.monotonic()
            sha = repo.change((n * 37) % count)
            pushed.append((sha, datetime.now(UTC)))
            time.sleep(max(0.0, 1 - (time.monotonic() - tick)))
        rss = dict(out.get(timeout=120) for _ in procs)
        for p in procs:
            p.join(timeout=30)
        store = Store.open(state)
        syncs = store.list_syncs(limit=100_000)
        store.close()
    by_binding: dict[str, list] = {}
    for s in syncs:
        by_binding.setdefault(s.binding_id, []).append(s)
    overlaps = 0
    for items in by_binding.values():
        items.sort(key=lambda s: s.started_at)
        for a, b in zip(items, items[1:], strict=False):
            if a.finished_at is None or b.started_at < a.finished_at:
                overlaps += 1
    missed = 0
    for b_syncs in by_binding.values():
        planned = {s.commit for s in b_syncs}
        for i, (sha, at) in enumerate(pushed):
            later = {c for c, _ in pushed[i + 1:]}
            superseded = any(s.commit in later and s.started_at >= at for s in b_syncs)
            if sha not in planned and not superseded:
                missed += 1
    return {"replicas": replicas, "commits": len(pushed), "syncs": len(syncs),
            "overlapping_syncs": overlaps, "commits_neither_planned_nor_superseded": missed,
            "peak_rss_mb": rss, "results": sorted({s.result for s in syncs})}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--state", help="state URL (PostgreSQL for several replicas)")
    args = parser.parse_args()
    one = run(args.count, args.seconds, 1, args.state)
    two = run(args.count, args.seconds, 2, args.state)
    print(json.dumps({"benchmark": "load", "manifests": args.count, "one": one, "two": two,
                      "target_peak_rss_mb": 300}))


if __name__ == "__main__":
    main()
