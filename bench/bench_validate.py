"""Validate a generated tree of 10,000 manifests; print manifests per second as JSON.

Target (issue: foundation): at least 5,000 manifests/s on one core, problems included.
Run: python bench/bench_validate.py [--count N]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from reconciler.manifests import iter_manifest_files
from reconciler.validation import validate_files

JOB = """\
apiVersion: nodus.dev/v1
kind: Job
metadata:
  name: job-{i}
  labels:
    team: bench
spec:
  image: python:3.12-slim
  command: [python3, -c, "print({i})"]
  resources:
    cpu: "1"
    memory: 512Mi
    gpu: L4
  completions: 2
  timeout: {timeout}
  maxCostUSD: "0.25"
  outputs:
    - name: report
      path: /nodus/outputs/report-{i}.json
"""

PIPELINE = """\
apiVersion: nodus.dev/v1
kind: Pipeline
metadata:
  name: pipe-{i}
spec:
  maxCostUSD: "1.00"
  defaults:
    image: python:3.12-slim
    timeout: 15m
  stages:
    - name: prepare
      template:
        command: [python3, prep.py]
        outputs: [{{name: data, path: /nodus/outputs/data}}]
    - name: train
      dependsOn: [prepare]
      inputs: [{{name: data, fromStage: prepare, output: data}}]
      template:
        command: [python3, train.py]
"""

SWEEP = """\
apiVersion: nodus.dev/v1
kind: Sweep
metadata:
  name: sweep-{i}
spec:
  maxParallel: 2
  matrix:
    gpu: [L4, A10]
    params:
      BATCH_SIZE: ["32", "64"]
  template:
    kind: Job
    spec:
      command: [python3, bench.py]
"""


def generate(root: Path, count: int) -> None:
    for i in range(count):
        # One in a hundred Jobs carries a bad duration, so problems are part of the cost.
        template = (JOB, JOB, JOB, JOB, JOB, JOB, JOB, JOB, PIPELINE, SWEEP)[i % 10]
        text = template.format(i=i, timeout="10x" if i % 100 == 7 else "10m")
        folder = root / f"d{i // 500}"
        folder.mkdir(exist_ok=True)
        (folder / f"m{i}.yaml").write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        generate(root, args.count)
        files = [(display, path.read_bytes()) for display, path in iter_manifest_files([root])]
        validate_files(files[:50])  # build the validators once, as a running service has
        start = time.perf_counter()
        result = validate_files(files)
        elapsed = time.perf_counter() - start
    print(json.dumps({
        "benchmark": "validate",
        "manifests": len(result.manifests),
        "problems": len(result.problems),
        "seconds": round(elapsed, 3),
        "manifests_per_second": round(len(result.manifests) / elapsed),
        "target_manifests_per_second": 5000,
    }))


if __name__ == "__main__":
    main()
