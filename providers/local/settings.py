"""`LocalConfig` resolved against this machine into the settings.json every run
directory carries: whether bubblewrap works, the GPU slots (detected and declared),
the cgroup v1 memory group for runs, and the timings. A supervisor reads only this, so
a Job keeps the settings it started with even if the reconciler's config changes."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from providers.local import gpus, limits
from providers.local.config import LocalConfig


def bubblewrap_works() -> bool:
    """`bwrap` exists and can set up a mount namespace here."""
    exe = shutil.which("bwrap")
    if not exe:
        return False
    try:
        done = subprocess.run([exe, "--dev-bind", "/", "/", "--", "true"], capture_output=True,
                              timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def resolve(config: LocalConfig, root: Path) -> dict[str, Any]:
    bw = bubblewrap_works() if config.use_bubblewrap is None else config.use_bubblewrap
    slots = gpus.all_slots(config.gpu_slots, gpus.detect() if config.detect_gpus else [])
    parent = limits.cgroup_parent() if config.use_cgroups is not False else None
    if config.use_cgroups and parent is None:
        raise ValueError("use_cgroups is set but the cgroup v1 memory controller is not writable")
    return {
        "root": str(root),
        "bubblewrap": bw,
        "images": dict(config.images),
        "strictImages": config.strict_images,
        "rates": config.to_dict()["rates"],
        "slots": [s.to_dict() for s in slots],
        "locksDir": str(root / ".gpus"),
        "cgroupParent": str(parent) if parent else None,
        "graceSeconds": config.suspend_grace_seconds,
        "suspendRetrySeconds": config.suspend_retry_seconds,
        "suspendMaxTries": config.suspend_max_tries,
        "pollSeconds": config.poll_seconds,
    }
