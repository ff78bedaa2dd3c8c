"""The `slurm` compute backend: runs Nodus Jobs (and, through the reconciler's
controllers, Pipelines and Sweeps) on a Slurm cluster via slurmrestd, with `scontrol`
for what REST cannot do and a shared directory for scripts, outputs and checkpoints.

Public surface:

    from_settings(settings, state_dir)       the Provider a config's section describes
    SlurmProvider(config)                    the Provider
    SlurmConfig.from_settings(name, dict)    its settings (camelCase keys in the config)
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nodus_gitops.providers.slurm.config import SlurmConfig
from nodus_gitops.providers.slurm.provider import SlurmProvider

__all__ = ["SlurmConfig", "SlurmProvider", "from_settings"]


def from_settings(settings: Mapping[str, Any], state_dir: Path, *,
                  name: str = "slurm") -> SlurmProvider:
    """The slurm backend a config's `providers.<name>` section describes."""
    return SlurmProvider(SlurmConfig.from_settings(name, settings, state_dir))
