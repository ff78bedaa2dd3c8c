"""What one run executes: its argv (under bubblewrap when contained), its environment,
its working directory and the host paths its child stages.

The environment is built from scratch, never copied from the reconciler's: a fixed
PATH, HOME and TMPDIR inside the sandbox (a few harmless host variables such as PATH
and the locale without one), the image's bin directory, the variables the config passes
through by name (`passEnv`), the manifest's `env`, then the platform's variables. A
manifest's PATH only chooses among the programs inside the run: bubblewrap itself is
started by absolute path.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from nodus_gitops.providers.local import sandbox
from nodus_gitops.providers.local.placement import Placement
from nodus_gitops.providers.local.rundir import RunDir
from nodus_gitops.providers.local.spec import (
    INPUTS_MOUNT,
    OUTPUTS_MOUNT,
    JobSpec,
    env_suffix,
)

HOST_ENV_KEYS = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "USER",
                 "LOGNAME", "SHELL", "TERM")
LOCALE_KEYS = ("LANG", "LC_ALL", "LC_CTYPE", "TZ")


@dataclass(frozen=True)
class Launch:
    argv: list[str]
    env: dict[str, str]
    cwd: str  # where the first program starts (bwrap starts in / and chdirs itself)
    stage: tuple[str, ...] = ()  # host paths the child binds for an unprivileged bwrap
    contained: bool = False
    filesystems: tuple[tuple[str, str], ...] = ()  # (image, point) the child mounts first
    slirp: str | None = None  # slirp4netns to start on the run's own network namespace
    resolv_conf: bytes | None = None  # bound at /etc/resolv.conf instead of the host's


def environment(
    spec: JobSpec,
    run: RunDir,
    place: Placement,
    index: int,
    attempt: int,
    visible_devices: str,
    host_env: dict[str, str],
    pass_env: tuple[str, ...] = (),
    gang: dict[str, str] | None = None,
) -> dict[str, str]:
    inside = place.sandbox.contained
    if inside:
        env = {k: host_env[k] for k in LOCALE_KEYS if k in host_env}
        env.update(PATH=sandbox.RUN_PATH, HOME=sandbox.RUN_TMP, TMPDIR=sandbox.RUN_TMP)
    else:
        env = {k: host_env[k] for k in HOST_ENV_KEYS if k in host_env}
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env["PYTHONUNBUFFERED"] = "1"
    if place.image_bin:
        env["PATH"] = f"{place.image_bin}{os.pathsep}{env['PATH']}"
        env["VIRTUAL_ENV"] = str(Path(place.image_bin).parent)
    env.update({name: host_env[name] for name in pass_env if name in host_env})
    env.update(dict(spec.env))
    shim = sandbox.SHIM_MOUNT if inside else str(sandbox.SHIM_DIR)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), shim) if p)
    env.update({
        "NODUS_JOB": spec.name,
        "NODUS_INDEX": str(index),
        "JOB_COMPLETION_INDEX": str(index),
        "NODUS_COMPLETIONS": str(spec.completions),
        # the run's own outputs directory, and the first checkpoint path
        "NODUS_OUTPUTS_DIR": OUTPUTS_MOUNT if inside else str(run.run_outputs_for(index, attempt)),
        "NODUS_CHECKPOINT_DIR": str(sandbox.checkpoint_points(spec.recovery.checkpoint_paths)[0][0])
        if inside else str(run.state_for(index)),
        "NODUS_UNITS_FILE": f"{sandbox.UNITS_MOUNT}/{index}-{attempt}.jsonl" if inside
        else str(run.units_for(index, attempt)),
        "CUDA_VISIBLE_DEVICES": visible_devices,
    })
    for inp in spec.inputs:
        env[f"NODUS_INPUT_{env_suffix(inp.name)}"] = (
            f"{INPUTS_MOUNT}/{inp.name}" if inside else str(inp.path))
    env.update(gang or {})
    return env


def gang_environment(rank: int, nodes: int, master_port: int) -> dict[str, str]:
    """What one member of a gang sees, as torchrun sets it for one process per node:
    its rank among the nodes, the world size and the rendezvous address (every member
    runs on this machine, so rank 0 listens on the loopback). The gang is the Job's one
    index: NODUS_INDEX is 0 for every rank."""
    return {
        "RANK": str(rank),
        "WORLD_SIZE": str(nodes),
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "NODE_RANK": str(rank),
        "GROUP_RANK": str(rank),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(master_port),
        "NODUS_INDEX": "0",
        "JOB_COMPLETION_INDEX": "0",
    }


def build(
    spec: JobSpec,
    run: RunDir,
    place: Placement,
    index: int,
    attempt: int,
    visible_devices: str,
    *,
    gpu_indexes: list[int] = (),  # type: ignore[assignment]
    host_env: dict[str, str] | None = None,
    pass_env: tuple[str, ...] = (),
    gang: dict[str, str] | None = None,
    share_net: bool | None = None,
    shm: str | None = None,
) -> Launch:
    env = environment(spec, run, place, index, attempt, visible_devices,
                      dict(os.environ) if host_env is None else host_env, pass_env, gang)
    if not place.sandbox.contained:
        return Launch(list(spec.command), env, place.working_dir)
    points, _ = sandbox.checkpoint_points(spec.recovery.checkpoint_paths)
    checkpoints = list(zip(run.checkpoint_dirs(index, len(points)), points, strict=True))
    mounts = sandbox.run_mounts(place.mounts, run.run_outputs_for(index, attempt), checkpoints)
    # a gang's rank in its gang's namespace (share_net) has the gang's slirp4netns
    box = place.sandbox
    slirp = box.slirp if box.user_net and not share_net else None
    # on slirp4netns' network (its own or its gang's) the host's loopback DNS is out of reach
    resolv = sandbox.own_net_resolv_conf() if box.user_net else None
    argv, stage = sandbox.bwrap_argv(box, mounts, cwd=place.working_dir,
                                     tmp_bytes=spec.memory,
                                     devices=sandbox.gpu_devices(list(gpu_indexes)),
                                     share_net=True if slirp else share_net, shm=shm,
                                     own_resolv=resolv is not None)
    if slirp:  # bubblewrap starts as root of the run's own user namespace (`child`)
        argv[1:1] = ["--uid", str(box.user.uid), "--gid", str(box.user.gid)]
    return Launch([*argv, "--", *spec.command], env, "/", tuple(stage), True,
                  place.filesystems if stage else (), slirp, resolv)
