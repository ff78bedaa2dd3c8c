"""A seeded dashboard for the web tests: a real SQLite store with two bindings, syncs and
checks, a Job, a Pipeline and a Sweep with statuses shaped as the controllers and the
local backend produce them, events, a local run directory with logs, and hostile strings
planted where a manifest, a log, Git or an event could carry them.

The `ml-team` binding reads a real Git repository on disk: its manifests are YAML files
with `|` blocks for scripts, in two commits by two authors (SHA1: the applied one; SHA2:
the head, invalid, its message carrying XSS_SCRIPT). The store's manifests are those
files as parsed, so a page can show a file's own text beside what the store recorded.
The `ops` binding's remote (a GitLab URL with a password in it) is never reachable: its
polls fail and its mirror stays empty."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pygit2
import yaml
from nodus_gitops.config import Binding, Settings
from nodus_gitops.floor.budgets import Budget, Period
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.providers.local import LocalProvider
from nodus_gitops.service import Service
from nodus_gitops.state.records import InventoryRecord
from nodus_gitops.state.store import Store
from nodus_gitops.wiring import build_service

XSS_SCRIPT = "<script>alert(1)</script>"
XSS_IMG = '"><img src=x onerror=alert(1)>'
PROJECT = "ml"
BAD_NAME = f"evil{XSS_IMG}"
OPS_SHA = "fedcba9876543210fedcba9876543210fedcba98"  # the ops head: never fetched
ML_BUDGET = Budget(PROJECT, Decimal("5"), Period.MONTH)  # ops has none

HELLO_YAML = f"""\
# Says hello from each of its two indexes, then counts.
apiVersion: nodus.dev/v1
kind: Job
metadata:
  name: hello
  labels:
    app: hello
    team: "{XSS_SCRIPT}"
  annotations:
    note: '{XSS_IMG}'
spec:
  image: nodus/pytorch
  completions: 2
  env:
    API_KEY: sk-live-123
    LOG_LEVEL: debug
    DB_PASSWORD: hunter2
  command:
    - bash
    - -c
    - |
      echo "hello from index $NODUS_INDEX"
      for step in $(seq 0 299); do
        echo "step $step"
      done
"""

PIPELINE_YAML = """\
apiVersion: nodus.dev/v1
kind: Pipeline
metadata:
  name: train-eval
  labels:
    team: ml
    stage: train
spec:
  maxCostUSD: "0.50"
  defaults:
    image: nodus/pytorch
  stages:
    - name: prepare
      template:
        command: ["true"]
        outputs:
          - {name: shards, path: /nodus/outputs/s}
    - name: train
      dependsOn: [prepare]
      inputs:
        - {name: data, fromStage: prepare, output: shards}
      template:
        command:
          - python
          - -c
          - |
            import os
            print("training on", os.environ.get("NODUS_INPUT_DATA"))
        env:
          HF_TOKEN: hf_supersecret
    - name: eval
      dependsOn: [train]
      inputs:
        - {name: model, fromStage: train, output: model}
      template:
        command: ["true"]
    - name: report
      dependsOn: [prepare]
      template:
        command: ["true"]
"""

SWEEP_YAML = """\
apiVersion: nodus.dev/v1
kind: Sweep
metadata:
  name: batch-size
  labels:
    team: ml
spec:
  maxParallel: 2
  # 2 GPU types x 3 batch sizes = 6 cells
  matrix:
    gpu: [L4, A10]
    params:
      BATCH_SIZE: ["32", "64", "128"]
  template:
    kind: Job
    spec:
      image: nodus/pytorch
      command:
        - python
        - -c
        - |
          import os
          bs = int(os.environ["NODUS_PARAM_BATCH_SIZE"])
          print(f"batch {bs}")
"""

EVIL_YAML = f"""\
apiVersion: nodus.dev/v1
kind: Job
metadata:
  name: 'evil{XSS_IMG}'
  labels:
    name: "{XSS_SCRIPT}"
spec:
  image: x
  command: ["true"]
"""

# Line 3 holds the unknown field the head commit's sync reports.
BAD_YAML = f"""\
kind: Job
metadata: {{name: bad}}
spec: {{image: x, command: ["true"], '{XSS_IMG}': 1}}
apiVersion: nodus.dev/v1
"""

# file -> text, per commit; the second commit adds the invalid file.
FIRST_FILES = {"jobs/hello.yaml": HELLO_YAML, "jobs/train-eval.yaml": PIPELINE_YAML,
               "jobs/batch-size.yaml": SWEEP_YAML, "jobs/evil.yaml": EVIL_YAML}
SECOND_FILES = {**FIRST_FILES, "jobs/bad.yaml": BAD_YAML}
FIRST_AUTHOR = pygit2.Signature("Ada Lovelace", "ada@acme.dev", 1735783200, 60)  # +01:00
SECOND_AUTHOR = pygit2.Signature("Grace Hopper", "grace@acme.dev", 1735790400, -300)
FIRST_MESSAGE = "Add hello, train-eval and the batch-size sweep\n\nThe first workloads.\n"
SECOND_MESSAGE = f"Add bad.yaml {XSS_SCRIPT}\n\nA field no schema knows.\n"


def write_manifests_repo(path: Path) -> tuple[str, str]:
    """The ml-team repository at `path` (a work tree on branch main): two commits with
    fixed authors and times, so their SHAs are the same wherever it is written."""
    repo = pygit2.init_repository(str(path), initial_head="main")
    shas = []
    for files, author, message in ((FIRST_FILES, FIRST_AUTHOR, FIRST_MESSAGE),
                                   (SECOND_FILES, SECOND_AUTHOR, SECOND_MESSAGE)):
        for name, text in files.items():
            (path / name).parent.mkdir(parents=True, exist_ok=True)
            (path / name).write_text(text)
        repo.index.add_all()
        repo.index.write()
        parents = [repo.head.target] if shas else []
        sha = repo.create_commit("refs/heads/main", author, author, message,
                                 repo.index.write_tree(), parents)
        shas.append(str(sha))
    return shas[0], shas[1]


def _shas() -> tuple[str, str]:
    with tempfile.TemporaryDirectory() as tmp:
        return write_manifests_repo(Path(tmp))


SHA1, SHA2 = _shas()  # the applied commit, and the head (invalid)
PIPELINE_SPEC = yaml.safe_load(PIPELINE_YAML)["spec"]
SWEEP_SPEC = yaml.safe_load(SWEEP_YAML)["spec"]


@dataclass
class Seeded:
    service: Service
    store: Store
    state_dir: Path
    local_root: Path
    repo_dir: Path  # the ml-team binding's repository (its work tree)


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


def seed(state_dir: Path | str, dashboard: dict[str, Any] | None = None) -> Seeded:
    state_dir = Path(state_dir)
    repo_dir = state_dir.with_name(f"{state_dir.name}-ml-manifests")
    assert write_manifests_repo(repo_dir) == (SHA1, SHA2)
    store = Store.open(state_dir=state_dir)
    settings = Settings(
        state_dir=state_dir, instance="test", listen="127.0.0.1:0",
        bindings=(Binding("ml-team", str(repo_dir), path="jobs", project=PROJECT,
                          interval=30, budget=ML_BUDGET),
                  Binding("ops", "https://user:s3cret@gitlab.com/acme/ops.git",
                          project="ops", interval=30)),
        checks={"webhooks": {"github": "hook-secret"}})
    if dashboard is not None:
        object.__setattr__(settings, "dashboard", dashboard)
    # The bindings' backend: the local one over <state>/local, whose logs write_run plants.
    local = LocalProvider(state_dir / "local")
    service = build_service(settings, store, provider_factory=lambda name: local)
    assert service.syncs["ml-team"].source.fetch() == SHA2  # the mirror holds both commits
    store.record_poll("ml-team", SHA2, None)
    store.mark_applied("ml-team", SHA1)
    store.record_poll("ops", OPS_SHA, f"fetch failed {XSS_SCRIPT}")

    s1 = store.start_sync("ml-team", SHA1)
    plan = {"commit": SHA1, "problems": [], "actions": [
        {"action": "create", "kind": "Job", "name": "hello", "file": "jobs/hello.yaml",
         "changes": [], "reason": None},
        {"action": "patch", "kind": "Sweep", "name": "batch-size",
         "file": "jobs/batch-size.yaml",
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

    def put(file: str, manifest: dict[str, Any], phase: str | None, status: dict[str, Any],
            cost: str, binding: str = "ml-team", project: str = PROJECT,
            **extra: Any) -> None:
        key = ResourceKey(manifest["kind"], project, manifest["metadata"]["name"])
        store.upsert_resource(InventoryRecord(
            key=key, binding_id=binding, manifest=manifest, spec_hash="h-" + key.name,
            source_commit=SHA1 if binding == "ml-team" else OPS_SHA, source_file=file,
            provider="local", phase=phase, status=status, cost_usd=cost, **extra))

    def ml(file: str) -> tuple[str, dict[str, Any]]:  # a file of SHA1, as parsed
        return file, yaml.safe_load(FIRST_FILES[file])

    put(*ml("jobs/hello.yaml"), "Running", job_status(), "0.0123")
    put(*ml("jobs/train-eval.yaml"), "Running", pipeline_status(), "0.031")
    put(*ml("jobs/batch-size.yaml"), "Failed", sweep_status(), "0.27", reason="CellsFailed",
        message="1 of 6 cells failed", fix="read the failed cells' reasons")
    put(*ml("jobs/evil.yaml"), "Failed", {"phase": "Failed"}, "0",
        reason="BackoffLimitExceeded", message=XSS_SCRIPT)
    put("nightly.yaml", _manifest("Job", "nightly", {"image": "x", "command": ["true"]}),
        "Succeeded", {"completedIndexes": "0"}, "1.5", binding="ops", project="ops",
        finished_at=datetime.now(UTC) - timedelta(hours=1))
    put("waiting.yaml", _manifest("Job", "waiting", {"image": "x", "command": ["true"]}),
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
    return Seeded(service, store, state_dir, root, repo_dir)
