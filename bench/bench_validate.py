"""Validate a generated tree of 10,000 manifests; print manifests per second as JSON.

Target: at least 5,000 manifests/s on one core, problems included. The tree is
validated `--repeat` times and the median is the figure (min and max beside it: this
machine's speed varies from one second to the next); `parse_only` is libyaml's own
speed (`yaml.load` with CSafeLoader) on the same files, for scale.
Run: python bench/bench_validate.py [--count N] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import yaml
from nodus_gitops.manifests import bulk_loading, iter_manifest_files
from nodus_gitops.validation import validate_files

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


def rate(count: int, seconds: list[float]) -> dict:
    rates = sorted(round(count / s) for s in seconds)
    return {"median": round(statistics.median(rates)), "min": rates[0], "max": rates[-1]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        generate(root, args.count)
        files = [(display, path.read_bytes()) for display, path in iter_manifest_files([root])]
    validate_files(files[:50])  # build the validators once, as a running service has
    validating, parsing = [], []
    for _ in range(args.repeat):
        start = time.perf_counter()
        result = validate_files(files)
        validating.append(time.perf_counter() - start)
        start = time.perf_counter()
        with bulk_loading():  # the same garbage-collector pause validate_files takes
            for _display, content in files:
                yaml.load(content, Loader=yaml.CSafeLoader)
        parsing.append(time.perf_counter() - start)
    validated = rate(len(result.manifests), validating)
    print(json.dumps({
        "benchmark": "validate",
        "manifests": len(result.manifests),
        "problems": len(result.problems),
        "seconds": round(statistics.median(validating), 3),
        "manifests_per_second": validated["median"],
        "manifests_per_second_range": [validated["min"], validated["max"]],
        "parse_only_manifests_per_second": rate(len(files), parsing)["median"],
        "target_manifests_per_second": 5000,
    }))


if __name__ == "__main__":
    main()
