"""A seeded dashboard for the web tests: a real SQLite store with two bindings, syncs and
checks, a Job, a Pipeline and a Sweep with statuses shaped as the controllers and the
local backend produce them, events, a local run directory with logs, and hostile strings
planted where a manifest, a log, Git or an event could carry them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from nodus_gitops.config import Binding, Settings
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.providers.local import LocalProvider
from nodus_gitops.service import Service
from nodus_gitops.state.records import InventoryRecord
from nodus_gitops.state.store import Store
from nodus_gitops.wiring import build_service

XSS_SCRIPT = "<script>alert(1)</script>"
XSS_IMG = '"><img src=x onerror=alert(1)>'
PROJECT = "ml"
SHA1 = "0123456789abcdef0123456789abcdef01234567"
SHA2 = "89abcdef0123456789abcdef0123456789abcdef"
BAD_NAME = f"evil{XSS_IMG}"


@dataclass
class Seeded:
    service: Service
    store: Store
    state_dir: Path
    local_root: Path


def _manifest(kind: str, name: str, spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "nodus.dev/v1", "kind": kind,
            "metadata": {"name": name, **meta}, "spec": spec}


def job_status(phase: str = "Running") -> dict[str, Any]:
    return {
        "succeeded": 1, "failed": 1, "active": 1, "attempts": 3, "recoveries": 0,
        "completedIndexes": "0", "units": 40, "unitsPerSecond": 2.5, "wallSeconds": 16.0,
        "costUSD": "0.0123", "startTime": "2025-01-02T03:04:05.000Z", "completionTime": None,
        "outputs": {"report": {"path": "/nodus/outputs/report.json", "size": 214,
                               "sha256": "4f1c0e9a2b7d" + "0" * 52, "type": "file"}},
        "conditions": [{"type": "Running", "status": "True", "reason": "Started",
                        "message": f"index 1 retried {XSS_SCRIPT}",
                        "lastTransitionTime": "2025-01-02T03:04:06.000Z"}],
        "phase": phase,
    }


PIPELINE_SPEC = {
    "maxCostUSD": "0.50", "defaults": {"image": "nodus/pytorch"},
    "stages": [
        {"name": "prepare", "template": {
            "command": ["true"], "outputs": [{"name": "shards", "path": "/nodus/outputs/s"}]}},
        {"name": "train", "dependsOn": ["prepare"],
         "inputs": [{"name": "data", "fromStage": "prepare", "output": "shards"}],
         "template": {"command": ["true"], "env": {"HF_TOKEN": "hf_supersecret"}}},
        {"name": "eval", "dependsOn": ["train"],
         "inputs": [{"name": "model", "fromStage": "train", "output": "model"}],
         "template": {"command": ["true"]}},
        {"name": "report", "dependsOn": ["prepare"], "template": {"command": ["true"]}},
    ],
}


def pipeline_status() -> dict[str, Any]:
    def stage(name: str, phase: str, cost: str, **extra: Any) -> dict[str, Any]:
        return {"name": name, "job": f"train-eval-{name}", "phase": phase, "costUSD": cost,
                **extra}

    return {"stages": [stage("prepare", "Succeeded", "0.01",
                             startTime="2025-01-02T03:04:05Z",
                             completionTime="2025-01-02T03:05:05Z"),
                       stage("train", "Running", "0.02", startTime="2025-01-02T03:05:06Z"),
                       stage("eval", "Pending", "0"),
                       stage("report", "Failed", "0.001", reason="BackoffLimitExceeded")],
            "progress": "1/4"}


SWEEP_SPEC = {"maxParallel": 2, "matrix": {"gpu": ["L4", "A10"],
                                           "params": {"BATCH_SIZE": ["32", "64", "128"]}},
              "template": {"kind": "Job", "spec": {"image": "nodus/pytorch",
                                                   "command": ["python", "bench.py"]}}}


def sweep_status() -> dict[str, Any]:
    rows = [("L4", "32", "Succeeded", "0.04", 410.0), ("L4", "64", "Succeeded", "0.05", 760.0),
            ("L4", "128", "Succeeded", "0.03", 1200.0), ("A10", "32", "Succeeded", "0.06", 530.0),
            ("A10", "64", "Failed", "0.02", None), ("A10", "128", "Succeeded", "0.07", 1500.0)]
    cells = [{"index": i, "job": f"batch-size-{i}", "gpu": gpu, "region": None,
              "params": {"BATCH_SIZE": bs}, "phase": phase, "costUSD": cost,
              "wallSeconds": 60.0 + i, "unitsPerSecond": ups,
              **({"reason": "OOMKilled"} if phase == "Failed" else {})}
             for i, (gpu, bs, phase, cost, ups) in enumerate(rows)]
    return {"cells": cells, "best": {"byCost": 2, "byThroughput": 5}, "progress": "6/6"}


def write_run(root: Path, name: str, lines: dict[tuple[int, int], list[str]],
              completions: int = 1, phase: str = "Running") -> None:
    """A local run directory as the local backend leaves it, with logs per index/attempt."""
    run = root / PROJECT / name
    (run / "logs").mkdir(parents=True, exist_ok=True)
    (run / "manifest.json").write_text(json.dumps(
        {"manifest": {"spec": {"completions": completions}}, "uid": "u1"}))
    (run / "status.json").write_text(json.dumps({"phase": phase}))
    for (index, attempt), text in lines.items():
        (run / "logs" / f"{index}-{attempt}.log").write_text("".join(t + "\n" for t in text))


def seed(state_dir: Path, dashboard: dict[str, Any] | None = None) -> Seeded:
    store = Store.open(state_dir=state_dir)
    settings = Settings(
        state_dir=state_dir, instance="test", listen="127.0.0.1:0",
        bindings=(Binding("ml-team", "https://github.com/acme/ml.git", path="jobs",
                          project=PROJECT, interval=30),
                  Binding("ops", "https://user:s3cret@gitlab.com/acme/ops.git",
                          project="ops", interval=30)),
        checks={"webhooks": {"github": "hook-secret"}})
    if dashboard is not None:
        object.__setattr__(settings, "dashboard", dashboard)
    # The bindings' backend: the local one over <state>/local, whose logs write_run plants.
    local = LocalProvider(state_dir / "local")
    service = build_service(settings, store, provider_factory=lambda name: local)
    store.record_poll("ml-team", SHA2, None)
    store.mark_applied("ml-team", SHA1)
    store.record_poll("ops", SHA1, f"fetch failed {XSS_SCRIPT}")

    s1 = store.start_sync("ml-team", SHA1)
    plan = {"commit": SHA1, "problems": [], "actions": [
        {"action": "create", "kind": "Job", "name": "hello", "file": "jobs/hello.yaml",
         "changes": [], "reason": None},
        {"action": "patch", "kind": "Sweep", "name": "batch-size", "file": "jobs/sweep.yaml",
         "changes": [{"path": "spec.maxParallel", "old": 1, "new": 2}], "reason": None}]}
    store.finish_sync(s1, "applied", "1 created, 1 patched", plan,
                      {"created": 1, "patched": 1, "failed": 0})
    s2 = store.start_sync("ml-team", SHA2)
    store.finish_sync(s2, "invalid", "1 problems; nothing applied",
                      {"commit": SHA2, "actions": [], "problems": [
                          {"file": "jobs/bad.yaml", "line": 3, "path": "spec",
                           "message": f"unknown field {XSS_IMG}"}]}, {})
    store.record_check("ml-team", SHA1, "nodus-gitops/plan", "success", "1 to create",
                       "gitnotes")
    store.record_check("ml-team", SHA2, "nodus-gitops/plan", "failure",
                       f"1 problem {XSS_SCRIPT}", "github")

    def put(kind: str, name: str, manifest: dict[str, Any], phase: str | None,
            status: dict[str, Any], cost: str, binding: str = "ml-team",
            project: str = PROJECT, **extra: Any) -> None:
        store.upsert_resource(InventoryRecord(
            key=ResourceKey(kind, project, name), binding_id=binding, manifest=manifest,
            spec_hash="h-" + name, source_commit=SHA1, source_file=f"jobs/{name[:8]}.yaml",
            provider="local", phase=phase, status=status, cost_usd=cost, **extra))

    put("Job", "hello", _manifest("Job", "hello", {
        "image": "nodus/pytorch", "command": ["python", "hello.py"], "completions": 2,
        "env": {"API_KEY": "sk-live-123", "LOG_LEVEL": "debug", "DB_PASSWORD": "hunter2"}},
        labels={"team": XSS_SCRIPT}, annotations={"note": XSS_IMG}),
        "Running", job_status(), "0.0123")
    put("Pipeline", "train-eval", _manifest("Pipeline", "train-eval", PIPELINE_SPEC),
        "Running", pipeline_status(), "0.031")
    put("Sweep", "batch-size", _manifest("Sweep", "batch-size", SWEEP_SPEC), "Failed",
        sweep_status(), "0.27", reason="CellsFailed", message="1 of 6 cells failed",
        fix="read the failed cells' reasons")
    put("Job", BAD_NAME, _manifest("Job", BAD_NAME, {"image": "x", "command": ["true"]},
                                   labels={"name": XSS_SCRIPT}), "Failed",
        {"phase": "Failed"}, "0", reason="BackoffLimitExceeded", message=XSS_SCRIPT)
    put("Job", "nightly", _manifest("Job", "nightly", {"image": "x", "command": ["true"]}),
        "Succeeded", {"completedIndexes": "0"}, "1.5", binding="ops", project="ops",
        finished_at=datetime.now(UTC) - timedelta(hours=1))
    put("Job", "waiting", _manifest("Job", "waiting", {"image": "x", "command": ["true"]}),
        None, {}, "0", binding="ops", project="ops")
    for reason, message, key in (
            ("Created", "created on local", ResourceKey("Job", PROJECT, "hello")),
            ("Retried", f"index 1 failed: {XSS_SCRIPT}", ResourceKey("Job", PROJECT, "hello")),
            ("Failed", XSS_IMG, ResourceKey("Job", PROJECT, BAD_NAME))):
        store.add_event(key, "Warning" if reason != "Created" else "Normal", reason, message)

    root = state_dir / "local"
    write_run(root, "hello", {(0, 1): ["first attempt"],
                              (0, 2): [f"step {i}" for i in range(300)] + [XSS_SCRIPT],
                              (1, 1): ["index one", XSS_IMG]}, completions=2)
    write_run(root, "train-eval-train", {(0, 1): ["epoch 1 loss 0.7", "epoch 2 loss 0.5"]})
    return Seeded(service, store, state_dir, root)
