"""What one submission sends to slurmrestd: the wrapper batch script and the job
description (name, array, environment, GRES, CPUs, memory, time limit, partition).

Pure: no I/O. The wrapper runs on the compute node. It takes the index from
SLURM_ARRAY_TASK_ID (0 for a plain job), sets NODUS_INDEX / JOB_COMPLETION_INDEX and the
per-index checkpoint and units paths, creates the Job's directories on the shared root,
runs the command's argv without a shell (under bubblewrap when the node has it, so the
command sees /nodus/outputs, its checkpoint paths (/nodus/state) and
/nodus/inputs/<name>), and records the exit status in `exits/<index>-<attempt>` before
exiting with it.
"""

from __future__ import annotations

import hashlib
import math
import shlex
from pathlib import Path
from typing import Any

from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.providers.local.sandbox import checkpoint_points
from nodus_gitops.providers.local.spec import (
    INPUTS_MOUNT,
    OUTPUTS_MOUNT,
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


def not_honoured(spec: JobSpec) -> list[str]:
    """What of where and how the Job asked to run this backend cannot honour (regions are
    honoured as partitions)."""
    notes = []
    if spec.interruptible:
        notes.append("placement.interruptible: the slurm backend asks for no preemptible "
                     "capacity; the Job runs on the partition's ordinary nodes")
    if spec.complete_by:
        notes.append(f"completeByTime ({spec.complete_by}): the slurm backend has no "
                     "capacity to pick by time; the Job waits in the partition's queue")
    if spec.source:
        notes.append(f"source.git ({spec.source.repo}@{spec.source.ref}): the slurm backend "
                     "fetches no source; the command runs in its working directory on the "
                     "shared root without the checkout (put the code there, or in the image)")
    return notes


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


def checkpoint_dirs(spec: JobSpec) -> list[tuple[str, str | None]]:
    """(the directory under the Job's, where the run sees it under bubblewrap) for each
    checkpoint path, first the NODUS_CHECKPOINT_DIR: `state/<index>`, then
    `state/<index>.<n>`; the sandbox makes them only under /nodus."""
    points, _ = checkpoint_points(spec.recovery.checkpoint_paths, within="/nodus")
    return [("$J/state/$i" if n == 0 else f"$J/state/$i.{n}", point)
            for n, point in enumerate(points)]


def _notes(spec: JobSpec) -> list[str]:
    """What the wrapper says in the run's log about checkpoint paths it cannot give."""
    _, refused = checkpoint_points(spec.recovery.checkpoint_paths, within="/nodus")
    return [f"nodus: recovery.checkpointPaths: {why}; it is not saved" for why in refused]


def script(spec: JobSpec, job_dir: Path, sandbox: str) -> str:
    """The wrapper batch script (the same for every submission of the Job).

    Every run starts on fresh capacity: its outputs directory is its own, empty
    `run-outputs/<index>-<attempt>`, copied into the Job's outputs when the command
    succeeded and removed either way; its checkpoint directories are its index's."""
    q = shlex.quote
    inputs = [i for i in spec.inputs if i.path]
    sb_env = [f"NODUS_INPUT_{env_suffix(i.name)}={q(f'{INPUTS_MOUNT}/{i.name}')}"
              for i in inputs]
    host_env = [f"NODUS_INPUT_{env_suffix(i.name)}={q(str(i.path))}" for i in inputs]
    dirs = checkpoint_dirs(spec)
    mounts = [(f'"{d}"', point) for d, point in dirs if point is not None]
    mounts += [(q(str(i.path)), f"{INPUTS_MOUNT}/{i.name}") for i in inputs]
    # parents before what lies below them
    mounts.sort(key=lambda m: m[1].count("/"))
    readonly = {f"{INPUTS_MOUNT}/{i.name}" for i in inputs}
    binds = "".join(f" --{'ro-bind' if point in readonly else 'bind'} {src} {q(point)}"
                    for src, point in mounts)
    made = " ".join(f'"{d}"' for d, _ in dirs)
    notes = "".join(f"echo {q(line)}\n" for line in _notes(spec))
    workdir = q(spec.working_dir) if spec.working_dir else '"$J/work"'
    argv = " ".join(q(a) for a in spec.command)
    use_bwrap = "command -v bwrap >/dev/null" if sandbox == "auto" else "false"
    if len(dirs) > 1:
        notes += (f"{use_bwrap} || echo 'nodus: without bubblewrap only the first checkpoint "
                  "path is given, as NODUS_CHECKPOINT_DIR'\n")
    first = q(str(dirs[0][1]))
    if spec.distributed:
        return gang_script(spec, job_dir, notes=notes, made=made, use_bwrap=use_bwrap,
                           first=first, binds=binds, sb_env=" ".join(sb_env),
                           host_env=" ".join(host_env), workdir=workdir, argv=argv)
    return f"""#!/bin/bash
# nodus-gitops: one index of Job {spec.name}, written by the slurm backend.
J={q(str(job_dir))}
i=${{SLURM_ARRAY_TASK_ID:-0}}
a=${{NODUS_ATTEMPT:-0}}
R="$J/run-outputs/$i-$a"
rm -rf "$R"
mkdir -p "$J/outputs" "$R" {made} "$J/logs" "$J/units" "$J/exits" "$J/work"
exec >>"$J/logs/$i-$a.log" 2>&1
{notes}export NODUS_INDEX=$i JOB_COMPLETION_INDEX=$i NODUS_UNITS_FILE="$J/units/$i-$a.jsonl"
if {use_bwrap}; then
  export NODUS_OUTPUTS_DIR={OUTPUTS_MOUNT} NODUS_CHECKPOINT_DIR={first} {" ".join(sb_env)}
  set -- bwrap --dev-bind / / --die-with-parent --tmpfs /nodus \\
    --bind "$R" {OUTPUTS_MOUNT}{binds} --
else
  export NODUS_OUTPUTS_DIR="$R" NODUS_CHECKPOINT_DIR="$J/state/$i" {" ".join(host_env)}
  set --
fi
{_run_and_store(workdir, argv, '"$J/outputs/"', "the run's")}
echo "$rc" >"$J/exits/$i-$a.tmp" && mv -f "$J/exits/$i-$a.tmp" "$J/exits/$i-$a"
exit "$rc"
"""


def gang_script(spec: JobSpec, job_dir: Path, *, notes: str, made: str, use_bwrap: str,
                first: str, binds: str, sb_env: str, host_env: str, workdir: str,
                argv: str) -> str:
    """The wrapper of a distributed Job: the batch step starts one task per node with
    `srun` (the allocation has `nodes` nodes and one task per node), each task runs the
    command as one rank, and the batch step records the gang's exit status: srun's, which
    is non-zero when any rank failed (`--kill-on-bad-exit` then ends the others).

    Each rank sees RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR (the node srun was started
    on, where rank 0 runs) and MASTER_PORT as torchrun expects; its checkpoint directories
    are its own (`state/<index>.rank<r>`), and its outputs are stored under `rank-<r>/` in
    the Job's outputs (rank 0's are the Job's own). The log prefixes each line with its
    rank (`srun --label`)."""
    q = shlex.quote
    # per rank: the run's directories keyed by rank, so ranks on one node never share them
    rank_made = made.replace("$J/state/$i", "$J/state/$i.rank$r")
    rank_binds = binds.replace("$J/state/$i", "$J/state/$i.rank$r")
    rank = f"""r=$SLURM_PROCID
R="$J/run-outputs/$i-$a.rank$r"
O="$J/outputs"; [ "$r" -eq 0 ] || O="$J/outputs/rank-$r"
rm -rf "$R"
mkdir -p "$O" "$R" {rank_made}
export RANK=$r WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 NODE_RANK=$r \\
  GROUP_RANK=$r MASTER_ADDR="$SLURM_LAUNCH_NODE_IPADDR" \\
  MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))
if {use_bwrap}; then
  export NODUS_OUTPUTS_DIR={OUTPUTS_MOUNT} NODUS_CHECKPOINT_DIR={first} {sb_env}
  set -- bwrap --dev-bind / / --die-with-parent --tmpfs /nodus \\
    --bind "$R" {OUTPUTS_MOUNT}{rank_binds} --
else
  export NODUS_OUTPUTS_DIR="$R" NODUS_CHECKPOINT_DIR="$J/state/$i.rank$r" {host_env}
  set --
fi
{_run_and_store(workdir, argv, '"$O/"', "rank $r's")}
exit "$rc"
"""
    return f"""#!/bin/bash
# nodus-gitops: Job {spec.name}, a gang of {spec.members} ranks, written by the slurm backend.
J={q(str(job_dir))}
i=${{SLURM_ARRAY_TASK_ID:-0}}
a=${{NODUS_ATTEMPT:-0}}
mkdir -p "$J/outputs" "$J/logs" "$J/units" "$J/exits" "$J/work"
exec >>"$J/logs/$i-$a.log" 2>&1
{notes}export J i a NODUS_INDEX=$i JOB_COMPLETION_INDEX=$i NODUS_UNITS_FILE="$J/units/$i-$a.jsonl"
srun --label --kill-on-bad-exit=1 /bin/bash -c {q(rank)}
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
    if spec.distributed:  # one allocation of `nodes` nodes, one task (rank) on each
        body.update(nodes=[spec.members, spec.members], tasks=spec.members, tasks_per_node=1)
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


def _run_and_store(workdir: str, argv: str, outputs: str, whose: str) -> str:
    """The wrapper's lines that run the command in its working directory and, when it
    exits 0, store its own /nodus/outputs ("$R") into `outputs` (a shell word); `rc` is
    its exit status, or 1 when the outputs could not be stored."""
    # Runs finishing together copy into the same folders: a cp that lost the race to
    # make one (EEXIST) is run again, and then finds it made.
    return f"""cd {workdir} 2>/dev/null || cd "$J/work"
"$@" {argv}
rc=$?
if [ "$rc" -eq 0 ] && ! cp -a --remove-destination "$R/." {outputs} 2>/dev/null \\
    && ! cp -a --remove-destination "$R/." {outputs}; then
  echo "nodus: {whose} outputs could not be stored in the Job's outputs"
  rc=1
fi
rm -rf "$R\""""
