"""Where a Job's files are for its runs, fixed once at provisioning: the mounts its runs
share, the working directory, the image's bin directory, and what contains them.

Contained (bubblewrap), the checkout of source.git appears at source.git.path, else at
workingDir, else at /nodus/source; the command starts in workingDir, else in the
checkout (unless source.git.path placed it), else in /nodus/work. A workingDir no mount
covers gets the Job's work directory bound there; one inside the runtime (/usr, /etc,
...) cannot, and the command starts in /nodus/work with an event saying so. Without a
sandbox every path is the host's own and the NODUS_* variables name the run directory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from nodus_gitops.providers.local import sandbox
from nodus_gitops.providers.local.rundir import RunDir
from nodus_gitops.providers.local.sandbox import Mount, Sandbox
from nodus_gitops.providers.local.spec import JobSpec


@dataclass(frozen=True)
class Placement:
    sandbox: Sandbox
    image_bin: str | None
    working_dir: str  # the command's working directory as the run sees it
    mounts: tuple[Mount, ...] = ()  # contained runs only
    notes: tuple[str, ...] = field(default=(), compare=False)  # events to emit once
    # (image, mount point) of earlier stages' filesystems holding inputs: each run mounts
    # them read-only in its own mount namespace (contained runs only)
    filesystems: tuple[tuple[str, str], ...] = ()


def _mount_point(path: str | None) -> str | None:
    """A normalised absolute path that may carry Job files, or None."""
    if not path or not path.startswith("/"):
        return None
    norm = str(PurePosixPath(os.path.normpath(path)))
    return None if sandbox.in_runtime(norm) else norm


def contained(spec: JobSpec, run: RunDir, sb: Sandbox, image_roots: list[str]) -> Placement:
    notes: list[str] = []
    checkout = None
    if spec.source is not None:
        wanted = spec.source.path or spec.working_dir
        checkout = _mount_point(wanted) or sandbox.SOURCE_MOUNT
        if wanted and checkout != os.path.normpath(wanted):
            notes.append(f"the source checkout cannot be at {wanted} (the runtime's "
                         f"place); it is at {checkout}")
    inputs = [(i.name, str(i.path)) for i in spec.inputs if i.path]
    mounts = sandbox.job_mounts(run.outputs, run.work, run.units, inputs,
                                (run.source, checkout) if checkout else None, image_roots)
    if spec.working_dir:
        cwd = spec.working_dir
    elif checkout and not (spec.source and spec.source.path):  # path keeps the cwd
        cwd = checkout
    else:
        cwd = sandbox.WORK_MOUNT
    point = _mount_point(cwd)
    if point is None:
        notes.append(f"workingDir {cwd} cannot hold the Job's files (it is part of the "
                     f"runtime or not absolute); using {sandbox.WORK_MOUNT}")
        cwd = sandbox.WORK_MOUNT
    elif not sandbox.covered(point, mounts):
        mounts.append(Mount(str(run.work), point, True))
        cwd = point
    else:
        cwd = point
    return Placement(sb, None, cwd, tuple(mounts), tuple(notes))


def uncontained(spec: JobSpec, run: RunDir, sb: Sandbox) -> Placement:
    notes: list[str] = []
    if spec.source is not None:
        cwd = str(run.source)
        if spec.working_dir and spec.working_dir != cwd:
            notes.append(f"workingDir {spec.working_dir} is served from the source "
                         f"checkout {cwd}")
        if spec.source.path:
            notes.append(f"source.git.path {spec.source.path}: without a sandbox the "
                         f"checkout is the run's source directory ({cwd})")
    elif spec.working_dir and os.path.isdir(spec.working_dir):
        cwd = spec.working_dir
    else:
        cwd = str(run.work)
        if spec.working_dir:
            notes.append(f"workingDir {spec.working_dir} does not exist on this machine; "
                         f"using {cwd}")
    return Placement(sb, None, cwd, (), tuple(notes))


def place(spec: JobSpec, run: RunDir, sb: Sandbox, image_bin: str | None,
          image_roots: list[str], filesystems: tuple[tuple[str, str], ...] = ()) -> Placement:
    found = contained(spec, run, sb, image_roots) if sb.contained else uncontained(spec, run, sb)
    return Placement(found.sandbox, image_bin, found.working_dir, found.mounts, found.notes,
                     filesystems if sb.contained else ())

