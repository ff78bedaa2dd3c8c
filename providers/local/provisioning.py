"""Provisioning a Job's runs, once per supervisor, when it first gets capacity: the
image (a mapped virtualenv), the inputs, the source checkout, and where the command
will run. Problems become `ProvisionError(reason, message)`; notes become events."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from providers.local import sandbox
from providers.local.rundir import RunDir
from providers.local.spec import JobSpec
from reconciler.phases import Reason

Emit = Callable[[str, str, bool], None]  # (reason, message, warning)


class ProvisionError(Exception):
    def __init__(self, reason: Reason, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


def image_bin(spec: JobSpec, settings: dict[str, Any], first: bool, emit: Emit) -> str | None:
    if not spec.image:
        return None
    path = settings["images"].get(spec.image)
    if path is None:
        if settings["strictImages"]:
            raise ProvisionError(Reason.IMAGE_PULL_FAILED,
                                 f"image {spec.image} is not one of the local backend's images")
        if first:
            emit("ImageNotMapped",
                 f"image {spec.image} is not mapped; the command runs with the host's PATH", True)
        return None
    if not os.path.isdir(path):
        raise ProvisionError(Reason.IMAGE_PULL_FAILED,
                             f"image {spec.image} maps to {path}, which does not exist")
    return path


def provision(spec: JobSpec, run: RunDir, settings: dict[str, Any], st: dict[str, Any],
              emit: Emit) -> sandbox.Placement:
    """Prepare the Job's runs; records status.source; raises ProvisionError."""
    first = not st["prepared"]
    bin_dir = image_bin(spec, settings, first, emit)
    for inp in spec.inputs:
        if not inp.path or not os.path.exists(inp.path):
            raise ProvisionError(Reason.STORAGE_UNAVAILABLE,
                                 f"input {inp.name} has no readable path ({inp.path or 'unset'})")
    if spec.source and (st["source"] is None or not run.source.is_dir()):
        from providers.local import source as git_source  # only Jobs with source.git

        try:
            st["source"] = git_source.fetch(spec.source, run.source)
        except git_source.SourceFetchError as exc:
            raise ProvisionError(
                Reason.STORAGE_UNAVAILABLE,
                f"cannot fetch source.git {spec.source.repo}@{spec.source.ref}: {exc}",
            ) from None
        emit("SourceFetched",
             f"{spec.source.repo}@{spec.source.ref} is {st['source']['commit']}", False)
        if spec.source.path:
            emit("SourcePath", f"source.git.path {spec.source.path}: locally the checkout is "
                 f"the run's source directory ({run.source})", False)
    bw = bool(settings["bubblewrap"])
    cwd, note = sandbox.working_dir(spec, run, bw, spec.source is not None)
    if first:
        if note:
            emit("WorkingDir", note, False)
        if not bw:
            emit("NoSandbox", "bubblewrap is not available: /nodus is not mounted; "
                 "NODUS_OUTPUTS_DIR, NODUS_CHECKPOINT_DIR and NODUS_INPUT_* point at the "
                 "run directory", True)
        if spec.dropped_env:
            emit("EnvIgnored", f"spec.env cannot set {', '.join(spec.dropped_env)}: the NODUS_ "
                 "prefix is reserved", True)
    st["prepared"] = True
    return sandbox.Placement(bw, Path(settings["root"]), bin_dir, spec.source is not None, cwd)
