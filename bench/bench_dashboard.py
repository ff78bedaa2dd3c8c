"""The dashboard over a store of N managed resources (Jobs, Pipelines, Sweeps with
statuses shaped as the controllers write them), served by the real server.

Times, median and p95 of R requests each over HTTP (keep-alive): the resources page and
`/api/v1/resources` (first page, a filtered and sorted page, a late page), the overview
and `/metrics`; and, for comparison, the same filtered page built from the public
`Store.list_inventory()` in Python instead of in SQL. Prints JSON. Target: every
dashboard request under 200 ms at 10,000 resources.

Run: python bench/bench_dashboard.py [--count 10000] [--repeat 20]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
from nodus_gitops.config import Binding, Settings
from nodus_gitops.providers.base import FakeProvider
from nodus_gitops.service import Service
from nodus_gitops.state import engine as engines
from nodus_gitops.state.models import InventoryItem
from nodus_gitops.state.store import Store
from nodus_gitops.web.server import start_server
from nodus_gitops.wiring import build_service

TARGET_MS = 200.0
PHASES = ["Queued", "Running", "Succeeded", "Succeeded", "Succeeded", "Failed", "Suspended",
          "Cancelled"]
BINDINGS = ("team-a", "team-b", "team-c")


def _row(i: int, rng: random.Random, now: datetime) -> dict[str, Any]:
    kind = ("Job", "Job", "Job", "Pipeline", "Sweep")[i % 5]
    name = f"{kind.lower()}-{i:05}"
    phase = rng.choice(PHASES)
    cost = f"{rng.random() * 3:.4f}"
    if kind == "Pipeline":
        status: dict[str, Any] = {"stages": [
            {"name": s, "job": f"{name}-{s}", "phase": phase, "costUSD": "0.01",
             "startTime": "2025-01-02T03:04:05Z"} for s in ("prepare", "train", "eval")],
            "progress": "1/3"}
        spec: dict[str, Any] = {"stages": [{"name": "prepare"},
                                           {"name": "train", "dependsOn": ["prepare"]},
                                           {"name": "eval", "dependsOn": ["train"]}]}
    elif kind == "Sweep":
        status = {"cells": [{"index": c, "job": f"{name}-{c}", "gpu": "L4", "region": None,
                             "params": {"BS": str(2 ** c)}, "phase": phase, "costUSD": "0.02",
                             "wallSeconds": 30.0, "unitsPerSecond": 100.0 + c}
                            for c in range(8)], "best": {"byCost": 0, "byThroughput": 7}}
        spec = {"matrix": {"gpu": ["L4"], "params": {"BS": [str(2 ** c) for c in range(8)]}}}
    else:
        status = {"completedIndexes": "0", "attempts": 1, "succeeded": 1, "costUSD": cost,
                  "outputs": {"report": {"path": "/nodus/outputs/r.json", "size": 214,
                                         "sha256": "ab" * 32, "type": "file"}},
                  "conditions": [{"type": "Complete", "status": "True", "reason": "Completed",
                                  "message": "every index succeeded",
                                  "lastTransitionTime": "2025-01-02T03:04:05Z"}]}
        spec = {"image": "python:3.12-slim", "command": ["python", "-c", "print(1)"]}
    created = now - timedelta(seconds=rng.randrange(86400 * 30))
    return dict(kind=kind, project="bench", name=name, binding_id=BINDINGS[i % 3],
                manifest={"apiVersion": "nodus.dev/v1", "kind": kind,
                          "metadata": {"name": name}, "spec": spec},
                spec_hash=f"h{i}", source_commit="0123456789abcdef" * 2 + "01234567",
                source_file=f"jobs/{name}.yaml", provider="local", provider_id=f"p{i}",
                phase=phase, reason="BackoffLimitExceeded" if phase == "Failed" else None,
                message=None, fix=None, status=status, cost_usd=cost, created_at=created,
                updated_at=created, finished_at=None, deleted=False)


def seed(state_dir: Path, count: int) -> tuple[Service, Store]:
    store = Store.open(state_dir=state_dir)
    settings = Settings(state_dir=state_dir, listen="127.0.0.1:0", bindings=tuple(
        Binding(b, f"https://github.com/acme/{b}.git", project="bench") for b in BINDINGS))
    service = build_service(settings, store, provider_factory=lambda name: FakeProvider())
    rng, now = random.Random(7), datetime.now(UTC)
    rows = [_row(i, rng, now) for i in range(count)]
    table = InventoryItem.__table__  # type: ignore[attr-defined]
    with engines.write_engine(store._engine).begin() as conn:  # one transaction: fast seeding
        conn.execute(table.insert(), rows)
    return service, store


def measure(client: httpx.Client, path: str, repeat: int) -> dict[str, float]:
    client.get(path).raise_for_status()  # warm
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        response = client.get(path)
        times.append((time.perf_counter() - start) * 1000)
        response.raise_for_status()
    times.sort()
    return {"median_ms": round(statistics.median(times), 2),
            "p95_ms": round(times[max(0, int(len(times) * 0.95) - 1)], 2),
            "bytes": len(response.content)}


def store_methods_page(store: Store, repeat: int) -> dict[str, float]:
    """The filtered page built through `list_inventory()` and Python, for comparison."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        records = [r for r in store.list_inventory(kind="Sweep") if r.phase == "Failed"]
        records.sort(key=lambda r: Decimal(r.cost_usd), reverse=True)
        _page = records[50:100]
        times.append((time.perf_counter() - start) * 1000)
    return {"median_ms": round(statistics.median(times), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    late = max(1, args.count // 50 - 5)
    filtered = "kind=Sweep&phase=Failed,Cancelled&sort=-cost&page=2"
    paths = {
        "page_resources_first": "/resources",
        "page_resources_filtered": f"/resources?{filtered}",
        "page_resources_late": f"/resources?page={late}&sort=age",
        "api_resources_first": "/api/v1/resources",
        "api_resources_filtered": f"/api/v1/resources?{filtered}",
        "api_resources_late": f"/api/v1/resources?page={late}&sort=age",
        "page_overview": "/",
        "api_repos": "/api/v1/repos",
        "metrics": "/metrics",
    }
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        service, store = seed(Path(tmp) / "state", args.count)
        seed_seconds = time.perf_counter() - started
        stop = start_server(service, "127.0.0.1:0")
        host, port = stop.address  # type: ignore[attr-defined]
        try:
            with httpx.Client(base_url=f"http://{host}:{port}", timeout=30) as client:
                results = {name: measure(client, path, args.repeat)
                           for name, path in paths.items()}
            results["store_methods_filtered_for_comparison"] = store_methods_page(
                store, max(3, args.repeat // 4))
        finally:
            stop()
            store.close()
    dashboard = [v["median_ms"] for k, v in results.items() if "comparison" not in k]
    print(json.dumps({
        "bench": "dashboard", "resources": args.count, "repeat": args.repeat,
        "seed_seconds": round(seed_seconds, 2), "target_ms": TARGET_MS,
        "results": results, "worst_median_ms": max(dashboard),
        "meets_target": max(dashboard) < TARGET_MS,
    }, indent=2))


if __name__ == "__main__":
    main()
