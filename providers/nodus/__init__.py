"""The Nodus API backend: Job, Pipeline and Sweep run natively by the platform.

`NodusProvider` (provider.py) speaks the Kubernetes-style API; `NodusConfig` (config.py)
reads the `providers.<name>` settings and the kubeconfig; errors.py maps the API's
`Status` answers to the reconciler's errors in one place. `from_settings(settings,
state_dir)` is the provider a config's section describes.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nodus_gitops.providers.nodus.config import NodusConfig
from nodus_gitops.providers.nodus.errors import InvalidManifest, causes_to_problems
from nodus_gitops.providers.nodus.provider import DryRunResult, NodusProvider

__all__ = ["DryRunResult", "InvalidManifest", "NodusConfig", "NodusProvider",
           "causes_to_problems", "from_settings"]


def from_settings(settings: Mapping[str, Any], state_dir: Path, *,
                  name: str = "nodus") -> NodusProvider:
    """The Nodus API backend a config's `providers.<name>` section describes (it keeps
    nothing in the state directory)."""
    return NodusProvider.from_settings(name, settings)
