"""Where a Job's files are for its runs, fixed once at provisioning: the mounts its runs
share, the working directory, the image's bin directory, and what contains them.

Contained (bubblewrap), the checkout of source.git appears at source.git.path (a
relative one inside the command's working directory), else at workingDir, else at
/nodus/source; the command starts in workingDir, else in the checkout (unless
source.git.path placed it: the path never moves the command), else in /nodus/work. A
workingDir no mount covers gets the Job's work directory bound there; one inside the
runtime (/usr, /etc, ...) cannot, and the command starts in /nodus/work with an event
saying so; a source.git.path there cannot hold the files and fails the Job
(`CheckoutUnplaceable`). Without a sandbox every path is the host's own and the NODUS_*
variables name the run directory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from nodus_gitops.providers.local import sandbox
from nodus_gitops.providers.local.rundir import RunDir
from nodus_gitops.providers.local.sandbox import Mount, Sandbox
from nodus_gitops.providers.local.spec import INPUTS_MOUNT, OUTPUTS_MOUNT, STATE_MOUNT, JobSpec


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


# What a checkout would hide or be mixed into.
_PLATFORM_DIRS = tuple(Mount("", d) for d in (OUTPUTS_MOUNT, STATE_MOUNT, INPUTS_MOUNT,
                                               sandbox.SHIM_MOUNT, sandbox.UNITS_MOUNT))


class CheckoutUnplaceable(ValueError):
    """source.git.path names a place the run's root cannot hold the files."""


def _checkout(spec: JobSpec, cwd: str) -> tuple[str, str | None]:
    """Where the source checkout goes, and a note when it cannot go where workingDir
    asked; CheckoutUnplaceable when source.git.path asked for a place it cannot go."""
    assert spec.source is not None
    if spec.source.path:
        wanted = os.path.join(cwd, spec.source.path)  # an absolute path stays as it is
        checkout = _mount_point(wanted)
        if checkout is None:
            raise CheckoutUnplaceable(
                f"source.git.path {spec.source.path} is {os.path.normpath(wanted)}, part of "
                "the runtime the run sees read-only: the checkout cannot be there")
        if sandbox.covered(checkout, _PLATFORM_DIRS):
            raise CheckoutUnplaceable(
                f"source.git.path {spec.source.path} is {checkout}, inside a directory "
                "the platform fills (outputs, state, inputs): the checkout cannot be there")
        return checkout, None
    checkout = _mount_point(spec.working_dir) or sandbox.SOURCE_MOUNT
    if spec.working_dir and checkout != os.path.normpath(spec.working_dir):
        return checkout, (f"the source checkout cannot be at {spec.working_dir} (the "
                          f"runtime's place); it is at {checkout}")
    return checkout, None


def contained(spec: JobSpec, run: RunDir, sb: Sandbox, image_roots: list[str]) -> Placement:
    notes: list[str] = []
    cwd = spec.working_dir
    if cwd and _mount_point(cwd) is None:
        notes.append(f"workingDir {cwd} cannot hold the Job's files (it is part of the "
                     f"runtime or not absolute); using {sandbox.WORK_MOUNT}")
        cwd = sandbox.WORK_MOUNT
    checkout = None
    if spec.source is not None:
        checkout, note = _checkout(spec, _mount_point(cwd) or sandbox.WORK_MOUNT)
        notes += [note] if note else []
        if not cwd and not spec.source.path:
            cwd = checkout
    point = _mount_point(cwd) or sandbox.WORK_MOUNT
    inputs = [(i.name, str(i.path)) for i in spec.inputs if i.path]
    mounts = sandbox.job_mounts(run.outputs, run.work, run.units, inputs,
                                (run.source, checkout) if checkout else None, image_roots)
    if not sandbox.covered(point, mounts):
        mounts.append(Mount(str(run.work), point, True))
    return Placement(sb, None, point, tuple(mounts), tuple(notes))


def uncontained(spec: JobSpec, run: RunDir, sb: Sandbox) -> Placement:
    notes: list[str] = []
    if spec.source is not None and not spec.source.path:
        cwd = str(run.source)
        if spec.working_dir and spec.working_dir != cwd:
            notes.append(f"workingDir {spec.working_dir} is served from the source "
                         f"checkout {cwd}")
    elif spec.working_dir and os.path.isdir(spec.working_dir):
        cwd = spec.working_dir
    else:
        cwd = str(run.work)
        if spec.working_dir:
            notes.append(f"workingDir {spec.working_dir} does not exist on this machine; "
                         f"using {cwd}")
    if spec.source is not None and spec.source.path:  # the path never moves the command
        notes.append(f"source.git.path {spec.source.path}: without a sandbox the checkout "
                     f"is the run's source directory ({run.source})")
    return Placement(sb, None, cwd, (), tuple(notes))


def place(spec: JobSpec, run: RunDir, sb: Sandbox, image_bin: str | None,
          image_roots: list[str], filesystems: tuple[tuple[str, str], ...] = ()) -> Placement:
    found = contained(spec, run, sb, image_roots) if sb.contained else uncontained(spec, run, sb)
    return Placement(found.sandbox, image_bin, found.working_dir, found.mounts, found.notes,
                     filesystems if sb.contained else ())

