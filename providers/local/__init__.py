"""The `local` compute backend: runs Nodus Jobs as processes on this machine with the
platform's semantics (phases, reasons, indexes, limits, suspend and recovery).

Public surface, for the reconciler and the CLI:

    from_settings(settings, state_dir)      the Provider a config's section describes
    LocalProvider(root, config, clock)      the Provider
    LocalConfig, RateCard, GpuSlot          its settings
    estimate(manifest, rates) -> str        the plan's cost estimate
    copy_output(root, key, name, dest)      `nodus cp`, hash-checked
    output_path(root, key, name)            a stored output's path (Pipeline inputs)
    iter_logs(root, key, index, follow)     `nodus logs`

Names are imported on first use (PEP 562: the module's `__getattr__` below, which
imports, and probes nothing), so that a Job's supervisor (a module of this package,
started once per Job) does not pay for the provider's imports.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nodus_gitops.providers.local.provider import LocalProvider

_EXPORTS = {
    "GpuSlot": "nodus_gitops.providers.local.config",
    "LocalConfig": "nodus_gitops.providers.local.config",
    "RateCard": "nodus_gitops.providers.local.config",
    "estimate": "nodus_gitops.providers.local.cost",
    "iter_logs": "nodus_gitops.providers.local.logs",
    "copy_output": "nodus_gitops.providers.local.outputs",
    "output_path": "nodus_gitops.providers.local.outputs",
    "LocalProvider": "nodus_gitops.providers.local.provider",
}

__all__ = sorted([*_EXPORTS, "from_settings"])


def from_settings(settings: Mapping[str, Any], state_dir: Path, *,
                  name: str = "local") -> LocalProvider:
    """The local backend a config's `providers.<name>` section describes (`build`)."""
    from nodus_gitops.providers.local import build

    return build.from_settings(settings, state_dir, name=name)


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
