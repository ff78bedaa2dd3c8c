"""How far a burst gets past a polled disk cap; prints one JSON object.

A Job under `diskLimit: polled` (what a reconciler that is not root gets) with an 8 MiB
cap writes files of 4 MiB each (each under the cap, so RLIMIT_FSIZE never stops it), up
to 1 GiB, three seconds after it started (past the first measures), as fast as the disk
takes them (`full_speed`) or at about 256 MiB/s (`paced_256mib_per_s`), and says after
each file how much it has written. `written_at_stop_mib`: what it had written when the
supervisor's stop ended it (the last total its log shows); `job_writes_mib_per_s`: how
fast it wrote, by its own clock; `counted_mib`: what the supervisor counted when it
stopped it; `seconds_to_fail`: from create() to Failed. Median and max of `--runs` Jobs
(5 unless told) of each.

    python bench/bench_polled_disk.py [--runs N]
"""

from __future__ import annotations

import json
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from nodus_gitops.floor.identity import (  # noqa: E402
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    MANAGED_BY_VALUE,
    ResourceKey,
)
from nodus_gitops.floor.phases import is_terminal  # noqa: E402
from nodus_gitops.providers.base import Workload  # noqa: E402
from nodus_gitops.providers.local import LocalConfig, LocalProvider  # noqa: E402
from nodus_gitops.providers.local.rundir import RunDir  # noqa: E402

MiB = 1 << 20
BURST = """
import os, time
chunk = b"x" * (4 << 20)
time.sleep(3)  # past the first measures: the burst falls between two of them
began = time.monotonic()
for i in range(256):
    with open(f"burst-{i}", "wb") as f:
        f.write(chunk)
    print("total", (i + 1) * 4, time.monotonic() - began, flush=True)
    time.sleep(PAUSE)
"""


def one(root: Path, n: int, pause: float) -> dict[str, float]:
    config = LocalConfig(max_output_bytes=8 * MiB, disk_limit="polled", detect_gpus=False,
                         prestart_supervisor=False, suspend_grace_seconds=2.0)
    provider = LocalProvider(root, config)
    k = ResourceKey("Job", "bench", f"burst-{n}")
    m = {"apiVersion": "nodus.dev/v1", "kind": "Job",
         "metadata": {"name": k.name, "labels": {LABEL_MANAGED_BY: MANAGED_BY_VALUE,
                                                  LABEL_INSTANCE: "bench"}},
         "spec": {"command": [sys.executable, "-c", BURST.replace("PAUSE", repr(pause))]}}
    started = time.monotonic()
    provider.create(Workload(k, m, "hash"), f"burst-{n}-1")
    while True:
        o = provider.get(k)
        if o is not None and is_terminal(o.phase):
            break
        time.sleep(0.02)
    took = time.monotonic() - started
    assert (o.phase, o.reason) == ("Failed", "OutputLimitExceeded"), (o.phase, o.message)
    log = next(RunDir.for_key(root, k).logs.glob("0-*.log")).read_text()
    totals = [(int(t), float(s)) for t, s in re.findall(r"total (\d+) ([\d.]+)", log)]
    written, seconds = totals[-1] if totals else (0, 0.0)
    counted = int(re.search(r"wrote (\d+) bytes", o.message or "").group(1))
    provider.delete(k)
    return {"written_at_stop_mib": float(written),
            "job_writes_mib_per_s": round(written / seconds) if seconds else 0,
            "counted_mib": round(counted / MiB, 1), "seconds_to_fail": round(took, 2)}


def main() -> None:
    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 5
    work = Path(tempfile.mkdtemp(prefix="bench-polled-"))
    try:
        cases = {name: [one(work / f"{name}-{n}", n, pause) for n in range(runs)]
                 for name, pause in (("full_speed", 0.0), ("paced_256mib_per_s", 1 / 64))}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out: dict = {"cap_mib": 8, "file_mib": 4, "runs": runs}
    for name, results in cases.items():
        out[name] = {key: {"median": statistics.median(r[key] for r in results),
                           "max": max(r[key] for r in results)} for key in results[0]}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
