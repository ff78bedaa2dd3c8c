"""What one run executes: its argv (under bubblewrap when available), its environment
and its working directory.

With bubblewrap the run sees its own `/nodus/outputs`, `/nodus/state` (this index's
checkpoint directory), `/nodus/inputs/<name>` (read-only), `/nodus/work` and
`/nodus/source`, and the backend's root directory is hidden, so no run can read another
Job's files. Without it the NODUS_* variables point at the run directory itself.

The environment is built from scratch: a few harmless host variables (PATH, HOME,
locale), then `spec.env`, then the platform's variables, so the reconciler's own
credentials never reach a Job.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from providers.local.rundir import RunDir
from providers.local.spec import INPUTS_MOUNT, OUTPUTS_MOUNT, STATE_MOUNT, JobSpec, env_suffix

SHIM_DIR = Path(__file__).resolve().parent / "shim"
HOST_ENV_KEYS = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "USER",
    "LOGNAME",
    "SHELL",
    "TERM",
)
WORK_MOUNT = "/nodus/work"
SOURCE_MOUNT = "/nodus/source"
UNITS_MOUNT = "/nodus/.units"


@dataclass(frozen=True)
class Launch:
    argv: list[str]
    env: dict[str, str]
    cwd: str  # the directory the process (bwrap, or the command itself) starts in


@dataclass(frozen=True)
class Placement:
    """Where a Job's files are for its runs (fixed for the Job's life)."""

    bubblewrap: bool
    root: Path
    image_bin: str | None
    has_source: bool
    working_dir: str | None  # the command's working directory as the run sees it


def working_dir(
    spec: JobSpec, run: RunDir, bubblewrap: bool, has_source: bool
) -> tuple[str, str | None]:
    """(the command's working directory as the run sees it, a note when workingDir was
    mapped). With source.git the checkout is the working directory."""
    if has_source:
        cwd = SOURCE_MOUNT if bubblewrap else str(run.source)
        note = (
            f"workingDir {spec.working_dir} is served from the source checkout {cwd}"
            if spec.working_dir and spec.working_dir != cwd
            else None
        )
        return cwd, note
    if spec.working_dir:
        if bubblewrap and spec.working_dir.startswith("/nodus/"):
            return spec.working_dir, None
        if os.path.isdir(spec.working_dir):
            return spec.working_dir, None
        cwd = WORK_MOUNT if bubblewrap else str(run.work)
        return cwd, f"workingDir {spec.working_dir} does not exist on this machine; using {cwd}"
    return (WORK_MOUNT if bubblewrap else str(run.work)), None


def build(
    spec: JobSpec,
    run: RunDir,
    place: Placement,
    index: int,
    attempt: int,
    visible_devices: str,
    host_env: dict[str, str] | None = None,
) -> Launch:
    host_env = os.environ if host_env is None else host_env
    env = {k: host_env[k] for k in HOST_ENV_KEYS if k in host_env}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env["PYTHONUNBUFFERED"] = "1"
    if place.image_bin:
        env["PATH"] = f"{place.image_bin}{os.pathsep}{env['PATH']}"
        env["VIRTUAL_ENV"] = str(Path(place.image_bin).parent)
    env.update(dict(spec.env))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(SHIM_DIR)) if p)

    bw = place.bubblewrap
    state = run.state_for(index)
    env.update(
        {
            "NODUS_JOB": spec.name,
            "NODUS_INDEX": str(index),
            "JOB_COMPLETION_INDEX": str(index),
            "NODUS_COMPLETIONS": str(spec.completions),
            "NODUS_OUTPUTS_DIR": OUTPUTS_MOUNT if bw else str(run.outputs),
            "NODUS_CHECKPOINT_DIR": STATE_MOUNT if bw else str(state),
            "NODUS_UNITS_FILE": f"{UNITS_MOUNT}/{index}-{attempt}.jsonl"
            if bw
            else str(run.units_for(index, attempt)),
            "CUDA_VISIBLE_DEVICES": visible_devices,
        }
    )
    for inp in spec.inputs:
        env[f"NODUS_INPUT_{env_suffix(inp.name)}"] = (
            f"{INPUTS_MOUNT}/{inp.name}" if bw else str(inp.path)
        )
    cwd = place.working_dir or str(run.work)
    if not bw:
        return Launch(list(spec.command), env, cwd)

    argv = ["bwrap", "--dev-bind", "/", "/", "--die-with-parent"]
    root = place.root.resolve()
    if (
        root != Path("/")
        and not SHIM_DIR.is_relative_to(root)
        and not (place.image_bin and Path(place.image_bin).resolve().is_relative_to(root))
    ):
        argv += ["--tmpfs", str(root)]  # hide every run directory, this one included
    argv += [
        "--tmpfs",
        "/nodus",
        "--bind",
        str(run.outputs),
        OUTPUTS_MOUNT,
        "--bind",
        str(state),
        STATE_MOUNT,
        "--bind",
        str(run.work),
        WORK_MOUNT,
        "--bind",
        str(run.units),
        UNITS_MOUNT,
    ]
    if place.has_source:
        argv += ["--bind", str(run.source), SOURCE_MOUNT]
    for inp in spec.inputs:
        argv += ["--ro-bind", str(inp.path), f"{INPUTS_MOUNT}/{inp.name}"]
    argv += ["--chdir", cwd, "--", *spec.command]
    return Launch(argv, env, str(run.work))
