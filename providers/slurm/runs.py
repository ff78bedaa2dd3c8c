"""Reading a Job's runs: the finished ones kept in job.json, the live ones from
slurmrestd (one GET per submission that still has unfinished indexes), and, for a job
slurmctld no longer knows (older than MinJobAge, a cold restart), the exit status the
wrapper left on the shared filesystem. A run Slurm killed for its memory without
cgroups ends FAILED; the note Slurm writes into the job's output makes it OUT_OF_MEMORY.

An array's pending part is one Slurm record for many indexes (`array_task_string`, such
as `2-3%2`); it becomes one pending run per index.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from nodus_gitops.providers.slurm.client import SlurmClient, Task
from nodus_gitops.providers.slurm.jobdir import JobDir
from nodus_gitops.providers.slurm.status import LOST, Run


def expand(text: str) -> list[int]:
    """`0-3%2`, `1,4-5` -> the indexes."""
    out: list[int] = []
    for part in text.split("%")[0].split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        try:
            out.extend(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            continue
    return out


def run_to_json(run: Run) -> dict[str, Any]:
    return {"index": run.index, "attempt": run.attempt, "job_id": run.job_id,
            "state": run.state, "exit_code": run.exit_code, "start": run.start,
            "end": run.end, "seconds": round(run.seconds, 3), "reason": run.reason,
            "array_job_id": run.array_job_id}


def _from_task(t: Task, index: int, attempt: int, is_array: bool, now: float,
               pending_part: bool = False) -> Run:
    return Run(index=index, attempt=attempt, job_id=t.job_id, state=t.state,
               exit_code=t.exit_code, start=t.start, end=t.end,
               seconds=0.0 if pending_part else t.run_seconds(now), reason=t.reason,
               array_job_id=(t.array_job_id or t.job_id) if is_array else 0,
               pending_part=pending_part)


def _forgotten(jd: JobDir, sub: dict[str, Any], index: int) -> Run:
    code = jd.exit_status(index, sub["attempt"])
    if code is None:
        return Run(index, sub["attempt"], sub["jobId"], LOST)
    return Run(index, sub["attempt"], sub["jobId"], "COMPLETED" if code == 0 else "FAILED",
               exit_code=(code & 0xFF) << 8)


def collect(client: SlurmClient, jd: JobDir, doc: dict[str, Any], now: float) -> list[Run]:
    """Every run of the Job; newly finished runs move into doc["runs"] and leave their
    submission's `open` list."""
    finished: dict[str, Any] = doc.setdefault("runs", {})
    live: list[Run] = []
    for sub in doc.get("submissions") or []:
        open_ = set(sub.get("open") or [])
        if not open_:
            continue
        tasks = client.job(sub["jobId"])
        # a cold-started slurmctld hands out job ids again: another job's are not ours
        tasks = [t for t in tasks or [] if t.name == doc.get("name")]
        seen: list[Run] = []
        for t in tasks:
            if not sub.get("array"):
                seen.append(_from_task(t, sub["indexes"][0], sub["attempt"], False, now))
            elif t.index is not None:
                seen.append(_from_task(t, t.index, sub["attempt"], True, now))
            else:
                seen.extend(_from_task(t, i, sub["attempt"], True, now, pending_part=True)
                            for i in expand(t.pending_indexes))
        missing = open_ - {r.index for r in seen}
        seen.extend(_forgotten(jd, sub, i) for i in sorted(missing))
        for run in seen:
            if run.index not in open_:
                continue
            if run.state == "FAILED" and jd.killed_for_memory(run.job_id):
                run = replace(run, state="OUT_OF_MEMORY")
            if run.finished:
                finished[f"{run.attempt}:{run.index}"] = run_to_json(run)
                open_.discard(run.index)
            else:
                live.append(run)
        sub["open"] = sorted(open_)
    return [Run(**r) for r in finished.values()] + live
