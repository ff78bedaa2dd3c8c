"""The `slurm` compute backend: runs Nodus Jobs (and, through the reconciler's
controllers, Pipelines and Sweeps) on a Slurm cluster via slurmrestd, with `scontrol`
for what REST cannot do and a shared directory for scripts, outputs and checkpoints.

Public surface:

    SlurmProvider(config)                    the Provider
    SlurmConfig, from_settings(name, dict)   its settings (camelCase keys in the config)
"""

from nodus_gitops.providers.slurm.config import SlurmConfig, from_settings
from nodus_gitops.providers.slurm.provider import SlurmProvider

__all__ = ["SlurmConfig", "SlurmProvider", "from_settings"]
