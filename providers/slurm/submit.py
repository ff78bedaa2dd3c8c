"""What one submission sends to slurmrestd: the wrapper batch script and the job
description (name, array, environment, GRES, CPUs, memory, time limit, partition).

Pure: no I/O. The wrapper runs on the compute node. It takes the index from
SLURM_ARRAY_TASK_ID (0 for a plain job), sets NODUS_INDEX / JOB_COMPLETION_INDEX and the
per-index checkpoint and units paths, creates the Job's directories on the shared root,
runs the command's argv without a shell (under bubblewrap when the node has it, so the
command sees /nodus/outputs, /nodus/state and /nodus/inputs/<name>), and records the
exit status in `exits/<index>-<attempt>` before exiting with it.
"""

from __future__ import annotations

import hashlib
import math
import shlex
from pathlib import Path
from typing import Any

from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.providers.local.spec import (
    INPUTS_MOUNT,
    OUTPUTS_MOUNT,
    STATE_MOUNT,
    JobSpec,
    env_suffix,
)

BASE_PATH = "/usr/local/bin:/usr/bin:/bin"
NAME_LIMIT = 100


class Unplaceable(ValueError):
    """The Job asks for something this cluster's configuration cannot give it; `fix`
    says what to change when the reason's usual fix does not."""

    def __init__(self, message: str, fix: str | None = None):
        super().__init__(message)
        self.fix = fix


def key_hash(idempotency_key: str) -> str:
    return hashlib.sha256(idempotency_key.encode()).hexdigest()[:12]


def job_name(key: ResourceKey, idempotency_key: str) -> str:
    """`<name>.<hash of the idempotency key>`: the name finds the job after a crash."""
    return f"{key.name[: NAME_LIMIT - 13]}.{key_hash(idempotency_key)}"


def comment(key: ResourceKey, idempotency_key: str, uid: str, attempt: int) -> str:
    """Names the Job's record (`uid`, written before the first submission) and the
    attempt, so that a lookup finds this record's job and no other installation's."""
    return f"nodus-gitops {key} key={key_hash(idempotency_key)} uid={uid} attempt={attempt}"


def gres(spec: JobSpec) -> str | None:
    """`L4` -> gpu:L4:1, `H100:8` -> gpu:H100:8, a GPU without a type -> gpu:1."""
    if spec.gpu is None:
        return None
    if spec.gpu.type:
        return f"gpu:{spec.gpu.type}:{spec.gpu.count}"
    return f"gpu:{spec.gpu.count}"


def partition(spec_doc: dict[str, Any], partitions: dict[str, str],
              default: str | None) -> str | None:
    """placement.regions -> a comma list of partitions (Slurm takes the first that can
    run the job); a region without a partition makes the Job unplaceable."""
    regions = ((spec_doc.get("placement") or {}).get("regions")) or []
    if not regions:
        return default
    missing = [r for r in regions if r not in partitions]
    if missing:
        known = ", ".join(sorted(partitions)) or "none"
        raise Unplaceable(f"no Slurm partition serves region {missing[0]!r} (configured "
                          f"regions: {known}; set the provider's partitions)")
    return ",".join(dict.fromkeys(partitions[r] for r in regions))


def time_limit_minutes(seconds: float | None) -> int | None:
    return None if seconds is None else max(1, math.ceil(seconds / 60))


def array_spec(indexes: list[int], parallelism: int) -> str:
    from nodus_gitops.providers.local.spec import compact_indexes

    text = compact_indexes(indexes)
    return f"{text}%{parallelism}" if parallelism < len(indexes) else text


def environment(spec: JobSpec, job_dir: Path, attempt: int, shim: Path) -> dict[str, str]:
    """The job's whole environment (slurmrestd requires one): a plain PATH, the
    command's env, the shim that provides `nodus.log.unit`, and the NODUS_* values that
    are the same for every index."""
    env = {"PATH": BASE_PATH, "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1"}
    env.update(dict(spec.env))
    env["PYTHONPATH"] = ":".join(p for p in (env.get("PYTHONPATH"), str(shim)) if p)
    env.update({
        "NODUS_JOB": spec.name,
        "NODUS_COMPLETIONS": str(spec.completions),
        "NODUS_ATTEMPT": str(attempt),
        "NODUS_JOB_DIR": str(job_dir),
    })
    return env


def script(spec: JobSpec, job_dir: Path, sandbox: str) -> str:
    """The wrapper batch script (the same for every submission of the Job)."""
    q = shlex.quote
    inputs = [i for i in spec.inputs if i.path]
    sb_env = [f"NODUS_INPUT_{env_suffix(i.name)}={q(f'{INPUTS_MOUNT}/{i.name}')}"
              for i in inputs]
    host_env = [f"NODUS_INPUT_{env_suffix(i.name)}={q(str(i.path))}" for i in inputs]
    binds = "".join(f" --ro-bind {q(str(i.path))} {q(f'{INPUTS_MOUNT}/{i.name}')}"
                    for i in inputs)
    workdir = q(spec.working_dir) if spec.working_dir else '"$J/work"'
    argv = " ".join(q(a) for a in spec.command)
    use_bwrap = "command -v bwrap >/dev/null" if sandbox == "auto" else "false"
    return f"""#!/bin/bash
# nodus-gitops: one index of Job {spec.name}, written by the slurm backend.
J={q(str(job_dir))}
i=${{SLURM_ARRAY_TASK_ID:-0}}
a=${{NODUS_ATTEMPT:-0}}
mkdir -p "$J/outputs" "$J/state/$i" "$J/logs" "$J/units" "$J/exits" "$J/work"
exec >>"$J/logs/$i-$a.log" 2>&1
export NODUS_INDEX=$i JOB_COMPLETION_INDEX=$i NODUS_UNITS_FILE="$J/units/$i-$a.jsonl"
if {use_bwrap}; then
  export NODUS_OUTPUTS_DIR={OUTPUTS_MOUNT} NODUS_CHECKPOINT_DIR={STATE_MOUNT} {" ".join(sb_env)}
  set -- bwrap --dev-bind / / --die-with-parent --tmpfs /nodus \\
    --bind "$J/outputs" {OUTPUTS_MOUNT} --bind "$J/state/$i" {STATE_MOUNT}{binds} --
else
  export NODUS_OUTPUTS_DIR="$J/outputs" NODUS_CHECKPOINT_DIR="$J/state/$i" {" ".join(host_env)}
  set --
fi
cd {workdir} 2>/dev/null || cd "$J/work"
"$@" {argv}
rc=$?
echo "$rc" >"$J/exits/$i-$a.tmp" && mv -f "$J/exits/$i-$a.tmp" "$J/exits/$i-$a"
exit "$rc"
"""


def job_body(spec: JobSpec, spec_doc: dict[str, Any], *, name: str, note: str,
             job_dir: Path, shim: Path, attempt: int, indexes: list[int],
             partitions: dict[str, str],
             default_partition: str | None, time_limit: float | None) -> dict[str, Any]:
    """The `job` object of POST /job/submit (v0.0.38 field names)."""
    body: dict[str, Any] = {
        "name": name,
        "comment": note,
        "current_working_directory": str(job_dir),
        "environment": environment(spec, job_dir, attempt, shim),
        "standard_output": str(job_dir / "slurm" / "%j.out"),
        "standard_error": str(job_dir / "slurm" / "%j.out"),
        "cpus_per_task": max(1, math.ceil(spec.cpu)),
        # A run lost with its node (NODE_FAIL, PREEMPTED) ends; the provider resubmits
        # it per recovery.continuity and counts the recoveries itself.
        "requeue": False,
    }
    if spec.completions > 1:
        body["array"] = array_spec(indexes, spec.parallelism)
    g = gres(spec)
    if g:
        body["gres"] = g
    if spec.memory_limit is not None:
        body["memory_per_node"] = max(1, math.ceil(spec.memory_limit / (1 << 20)))
    minutes = time_limit_minutes(time_limit)
    if minutes is not None:
        body["time_limit"] = minutes
    part = partition(spec_doc, partitions, default_partition)
    if part:
        body["partition"] = part
    return body
