"""Every dashboard page and API call over a store of N managed resources, served by the
real server, at each size asked for (10,000 and 100,000 by default).

The store is seeded as a busy instance has it: N Jobs, Pipelines and Sweeps with statuses
shaped as the controllers write them, one journal entry and two events per resource, and
a thousand syncs per binding with their checks. Each path is asked R times over HTTP
(keep-alive) after one warm-up; median and p95 are printed as JSON. Targets: every
request under 200 ms at 10,000 resources and under 500 ms at 100,000.

Pages that exist only once their route does (a binding's page, a sync's page, the
resources search) are measured when `web/routes.py` serves them, and listed as not
served otherwise. For comparison, the same filtered page built from the public
`Store.list_inventory()` in Python instead of in SQL.

Run: python bench/bench_dashboard.py [--counts 10000,100000] [--repeat 20]
"""

from __future__ import annotations

import argparse
import json
import random
import re
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
from nodus_gitops.state.labels import replace_labels
from nodus_gitops.state.models import CheckRecord, Event, Intent, InventoryItem, Sync
from nodus_gitops.state.store import Store
from nodus_gitops.web.server import start_server
from nodus_gitops.wiring import build_service
from sqlalchemy import select

TARGETS_MS = {10_000: 200.0, 100_000: 500.0}
PHASES = ["Queued", "Running", "Succeeded", "Succeeded", "Succeeded", "Failed", "Suspended",
          "Cancelled"]
RESULTS = ["applied", "applied", "applied", "noop", "invalid", "partial", "blocked", "error"]
BINDINGS = ("team-a", "team-b", "team-c")
SYNCS_PER_BINDING = 1000
COMMIT = "0123456789abcdef" * 2 + "01234567"


def _commit(i: int, binding: str = BINDINGS[0]) -> str:
    """The i-th commit of a binding's history."""
    return f"{BINDINGS.index(binding):02x}{i:06x}" + COMMIT[8:]


def _row(i: int, rng: random.Random, now: datetime) -> dict[str, Any]:
    kind = ("Job", "Job", "Job", "Pipeline", "Sweep")[i % 5]
    name = f"{kind.lower()}-{i:06}"
    phase = rng.choice(PHASES)
    cost = f"{rng.random() * 3:.4f}"
    if kind == "Pipeline":
        status: dict[str, Any] = {"stages": [
            {"name": s, "job": f"{name}-{s}", "phase": phase, "costUSD": "0.01",
             "startTime": "2025-01-02T03:04:05Z"} for s in ("prepare", "train", "eval")],
            "progress": "1/3"}
        spec: dict[str, Any] = {"stages": [
            {"name": "prepare", "template": {"image": "python:3.12", "command": ["true"]}},
            {"name": "train", "dependsOn": ["prepare"],
             "template": {"image": "python:3.12", "command": ["true"]}},
            {"name": "eval", "dependsOn": ["train"],
             "template": {"image": "python:3.12", "command": ["true"]}}]}
    elif kind == "Sweep":
        status = {"cells": [{"index": c, "job": f"{name}-{c}", "gpu": "L4", "region": None,
                             "params": {"BS": str(2 ** c)}, "phase": phase, "costUSD": "0.02",
                             "wallSeconds": 30.0, "unitsPerSecond": 100.0 + c}
                            for c in range(8)], "best": {"byCost": 0, "byThroughput": 7}}
        spec = {"matrix": {"gpu": ["L4"], "params": {"BS": [str(2 ** c) for c in range(8)]}},
                "template": {"image": "python:3.12", "command": ["python", "bench.py"]}}
    else:
        status = {"completedIndexes": "0", "attempts": 1, "succeeded": 1, "costUSD": cost,
                  "outputs": {"report": {"path": "/nodus/outputs/r.json", "size": 214,
                                         "sha256": "ab" * 32, "type": "file"}},
                  "conditions": [{"type": "Complete", "status": "True", "reason": "Completed",
                                  "message": "every index succeeded",
                                  "lastTransitionTime": "2025-01-02T03:04:05Z"}]}
        spec = {"image": "python:3.12-slim", "command": ["python", "-c", "print(1)"],
                "env": {"LOG_LEVEL": "info", "HF_TOKEN": "hf_abc"}}
    created = now - timedelta(seconds=rng.randrange(86400 * 30))
    return dict(kind=kind, project="bench", name=name, binding_id=BINDINGS[i % 3],
                manifest={"apiVersion": "nodus.dev/v1", "kind": kind,
                          "metadata": {"name": name, "labels": {"team": BINDINGS[i % 3],
                                                                "tier": f"t{i % 7}"}},
                          "spec": spec},
                spec_hash=f"h{i}", source_commit=_commit(i % SYNCS_PER_BINDING, BINDINGS[i % 3]),
                source_file=f"jobs/{name}.yaml", provider="local", provider_id=f"p{i}",
                phase=phase, reason="BackoffLimitExceeded" if phase == "Failed" else None,
                message=None, fix=None, status=status, cost_usd=cost, created_at=created,
                updated_at=created, finished_at=None, deleted=False)


def _syncs(rng: random.Random, now: datetime) -> list[dict[str, Any]]:
    rows = []
    for n in range(SYNCS_PER_BINDING):
        for binding in BINDINGS:
            started = now - timedelta(minutes=(SYNCS_PER_BINDING - n) * 5)
            result = rng.choice(RESULTS)
            actions = [{"action": "create", "kind": "Job", "name": f"job-{n:06}-{a}",
                        "file": f"jobs/job-{n}.yaml", "changes": [], "reason": None}
                       for a in range(5)]
            problems = [{"file": "jobs/bad.yaml", "line": 3, "path": "spec",
                         "message": "unknown field"}] if result == "invalid" else []
            rows.append(dict(binding_id=binding, commit=_commit(n, binding), started_at=started,
                             finished_at=started + timedelta(seconds=12), result=result,
                             message=f"{len(actions)} created",
                             plan={"commit": _commit(n, binding), "actions": actions,
                                   "problems": problems},
                             summary={"created": len(actions), "patched": 0, "failed": 0}))
    return rows


def seed(state_dir: Path, count: int) -> tuple[Service, Store, dict[str, Any]]:
    """A store of `count` resources and their history; returns facts the paths need."""
    store = Store.open(state_dir=state_dir)
    settings = Settings(state_dir=state_dir, listen="127.0.0.1:0", bindings=tuple(
        Binding(b, f"https://github.com/acme/{b}.git", project="bench") for b in BINDINGS))
    service = build_service(settings, store, provider_factory=lambda name: FakeProvider())
    for b in BINDINGS:
        store.upsert_binding(b, f"https://github.com/acme/{b}.git", "main", "", "bench")
        store.record_poll(b, _commit(SYNCS_PER_BINDING - 1, b), None)
        store.mark_applied(b, _commit(SYNCS_PER_BINDING - 2, b))
    rng, now = random.Random(7), datetime.now(UTC)
    rows = [_row(i, rng, now) for i in range(count)]
    tables = {t: t.__table__ for t in (InventoryItem, Sync, Intent, Event,  # type: ignore
                                       CheckRecord)}
    with engines.write_engine(store._engine).begin() as conn:  # one transaction: fast seeding
        conn.execute(tables[InventoryItem].insert(), rows)
        inventory = tables[InventoryItem]
        ids = dict(conn.execute(select(inventory.c.name, inventory.c.id)).all())
        replace_labels(conn, ((ids[r["name"]], r["manifest"]) for r in rows))
        conn.execute(tables[Sync].insert(), _syncs(rng, now))
        sync_count = len(BINDINGS) * SYNCS_PER_BINDING
        conn.execute(tables[Intent].insert(), [dict(
            binding_id=r["binding_id"], sync_id=1 + i % sync_count, action="create",
            kind=r["kind"], project=r["project"], name=r["name"], spec_hash=r["spec_hash"],
            idempotency_key=f"k{i}", payload={}, state="done", outcome={"providerId": f"p{i}"},
            created_at=r["created_at"], done_at=r["created_at"]) for i, r in enumerate(rows)])
        conn.execute(tables[Event].insert(), [dict(
            kind=r["kind"], project=r["project"], name=r["name"], at=r["created_at"] + d,
            type=t, reason=why, message=f"{why.lower()} on local")
            for r in rows for d, t, why in ((timedelta(0), "Normal", "Created"),
                                            (timedelta(minutes=3), "Normal", "Started"))])
        conn.execute(tables[CheckRecord].insert(), [dict(
            binding_id=b, commit=_commit(n, b), context="nodus-gitops/plan", state="success",
            summary="**5** to create\n\n| kind | name |\n|---|---|\n| Job | x |",
            posted_at=now, target="github")
            for n in range(SYNCS_PER_BINDING) for b in BINDINGS])
    middle = count // 2
    facts = {"job": rows[middle - middle % 5]["name"],
             "pipeline": rows[middle - middle % 5 + 3]["name"],
             "sweep": rows[middle - middle % 5 + 4]["name"],
             "sync_id": sync_count // 2}
    return service, store, facts


def paths(count: int, facts: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """(always served, served once its route exists) name -> path."""
    late = max(1, count // 50 - 5)
    filtered = "kind=Sweep&phase=Failed,Cancelled&sort=-cost&page=2"
    always = {
        "page_overview": "/",
        "page_resources_first": "/resources",
        "page_resources_filtered": f"/resources?{filtered}",
        "page_resources_late": f"/resources?page={late}&sort=age",
        "page_job": f"/resources/Job/bench/{facts['job']}",
        "page_pipeline": f"/resources/Pipeline/bench/{facts['pipeline']}",
        "page_sweep": f"/resources/Sweep/bench/{facts['sweep']}",
        "page_stage_job": f"/resources/Job/bench/{facts['pipeline']}-train",
        "page_history": "/history",
        "page_history_filtered": "/history?repo=team-b&result=applied,partial&page=3",
        "api_repos": "/api/v1/repos",
        "api_resources_first": "/api/v1/resources",
        "api_resources_filtered": f"/api/v1/resources?{filtered}",
        "api_resources_late": f"/api/v1/resources?page={late}&sort=age",
        "api_resource_job": f"/api/v1/resources/Job/bench/{facts['job']}",
        "api_syncs": "/api/v1/syncs",
        "api_sync": f"/api/v1/syncs/{facts['sync_id']}",
        "api_events": "/api/v1/events",
        "metrics": "/metrics",
    }
    optional = {
        "page_repo": "/repos/team-b",
        "page_sync": f"/syncs/{facts['sync_id']}",
        "page_resources_search_name": f"/resources?q={facts['job'][:-2]}",
        "page_resources_search_label": "/resources?label=team%3Dteam-b,tier%3Dt3&sort=-cost",
        "page_resources_search_commit": f"/resources?commit={_commit(17, 'team-b')[:10]}",
        "page_resources_search_words": "/resources?q=phase%3AFailed+tier%3Dt2+sweep",
        "api_resources_search_label": "/api/v1/resources?label=tier%3Dt5&page=9",
    }
    return always, optional


def served(service: Service, path: str) -> bool:
    """Whether web/routes.py has a route for `path` (and, for a search, its parameters)."""
    from nodus_gitops.web import routes

    bare, _, query = path.partition("?")
    if not any(pattern.match(bare) for pattern, _handler in routes.table(service)):
        return False
    if "q=" in query or "label=" in query or "commit=" in query:
        import nodus_gitops.web.pages as pages
        source = Path(pages.__file__).read_text()
        return bool(re.search(r"ResourceSearch|search\.", source))
    return True


def measure(client: httpx.Client, path: str, repeat: int) -> dict[str, Any]:
    first = client.get(path)  # warm
    if first.status_code != 200:
        return {"status": first.status_code, "error": first.text[:200]}
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


def run(count: int, repeat: int) -> dict[str, Any]:
    target = TARGETS_MS.get(count, 200.0 if count <= 10_000 else 500.0)
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        service, store, facts = seed(Path(tmp) / "state", count)
        seed_seconds = time.perf_counter() - started
        always, optional = paths(count, facts)
        wanted = {**always, **{k: v for k, v in optional.items() if served(service, v)}}
        stop = start_server(service, "127.0.0.1:0")
        host, port = stop.address  # type: ignore[attr-defined]
        try:
            with httpx.Client(base_url=f"http://{host}:{port}", timeout=60) as client:
                results = {name: {"path": path, **measure(client, path, repeat)}
                           for name, path in wanted.items()}
            comparison = store_methods_page(store, 3)
        finally:
            stop()
            store.close()
    timed = {k: v for k, v in results.items() if "median_ms" in v}
    missed = sorted(k for k, v in timed.items() if v["p95_ms"] >= target)
    return {"resources": count,
            "seed_seconds": round(seed_seconds, 1), "target_ms": target,
            "results": results,
            "not_served": sorted(set(optional) - set(wanted)),
            "failed": sorted(k for k, v in results.items() if "median_ms" not in v),
            "store_methods_filtered_for_comparison": comparison,
            "worst_p95_ms": max((v["p95_ms"] for v in timed.values()), default=None),
            "over_target": missed,
            "meets_target": not missed and len(timed) == len(results)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--counts", default="10000,100000",
                        help="resource counts to measure at, comma-separated")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    sizes = [run(int(c), args.repeat) for c in args.counts.split(",")]
    print(json.dumps({"bench": "dashboard", "repeat": args.repeat, "sizes": sizes,
                      "meets_target": all(s["meets_target"] for s in sizes)}, indent=2))


if __name__ == "__main__":
    main()
