"""How fast the command line starts: wall time of `nodus-gitops --help`, `validate` of
one file, `get` and `describe` on a small store (10 Jobs), and `__complete` of a command
name and of Job names, beside `python -c pass` (the interpreter's own start); the median
of `--repeat` runs each (min and max beside it: this machine's speed varies). Prints JSON.

Target: `get` and `describe` well under 300 ms.
Run: python bench/bench_cli.py [--repeat 20]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.state.records import InventoryRecord
from nodus_gitops.state.store import Store

JOB = ("apiVersion: nodus.dev/v1\nkind: Job\nmetadata:\n  name: train\nspec:\n"
       "  command: [python3, train.py]\n  timeout: 10m\n  maxCostUSD: \"0.25\"\n")


def _program() -> list[str]:
    """The installed `nodus-gitops` beside this interpreter, as users run it."""
    script = Path(sys.executable).with_name("nodus-gitops")
    return [str(script)] if script.exists() else [sys.executable, "-m", "nodus_gitops.cli"]


def _small_store(state: Path) -> None:
    store = Store.open(None, state)
    store.upsert_binding("b", "https://github.com/acme/ml.git", "main", "", "p")
    for i in range(10):
        store.upsert_resource(InventoryRecord(
            ResourceKey("Job", "p", f"job-{i}"), "b", {"kind": "Job", "spec": {}}, "h",
            phase="Running", status={"attempts": 1}, cost_usd="0.01", source_file="j.yaml"))
    store.close()


def _time(cmd: list[str], repeat: int, cwd: Path) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NODUS_GITOPS_")}
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
        times.append(time.perf_counter() - start)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed: {done.stderr.decode()}")
    return {"median_ms": round(statistics.median(times) * 1000, 1),
            "min_ms": round(min(times) * 1000, 1), "max_ms": round(max(times) * 1000, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    program = _program()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        _small_store(work / ".nodus-gitops")
        (work / "train.yaml").write_text(JOB)
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "--help": [*program, "--help"],
            "validate one file": [*program, "validate", "train.yaml"],
            "get": [*program, "get"],
            "describe": [*program, "describe", "job/job-1"],
            "__complete a command": [*program, "__complete", "ge"],
            "__complete Job names": [*program, "__complete", "get", "job/"],
        }
        figures = {name: _time(cmd, args.repeat, work) for name, cmd in commands.items()}
    print(json.dumps({"repeat": args.repeat, "program": " ".join(program), **figures},
                     indent=2))


if __name__ == "__main__":
    main()
