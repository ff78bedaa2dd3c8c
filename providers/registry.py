"""Builds the raw backend a binding names from the config's `providers` section.

Every backend package exposes the same `from_settings(settings, state_dir, *, name)`;
this picks the package by the section's `type` (the section's name by default). What
wraps a backend (the workload controllers, the metrics) is the composition root's
business (`nodus_gitops.backends`), not the providers'.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nodus_gitops.floor.errors import ConfigError
from nodus_gitops.providers.base import Provider

BACKENDS = {
    "local": "nodus_gitops.providers.local",
    "slurm": "nodus_gitops.providers.slurm",
    "nodus": "nodus_gitops.providers.nodus",
}
KNOWN_TYPES = tuple(BACKENDS)


def build(name: str, settings: Mapping[str, Any], state_dir: Path) -> Provider:
    """The backend `providers.<name>` describes, unwrapped; a type this build does not
    have is a ConfigError naming the setting."""
    kind = settings.get("type", name)
    if kind not in BACKENDS:
        raise ConfigError(f"providers.{name}.type: {kind!r} is not available in this build "
                          f"(known: {', '.join(KNOWN_TYPES)})")
    package = importlib.import_module(BACKENDS[kind])
    return package.from_settings(settings, Path(state_dir), name=name)
