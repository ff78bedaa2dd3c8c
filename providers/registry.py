"""Builds the provider a binding names from the config's `providers` section.

Every provider is wrapped by the workload controllers, which run the kinds a backend
does not know natively (Pipelines, Sweeps) as Jobs on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from providers.base import Provider
from reconciler.errors import ConfigError

KNOWN_TYPES = ("local", "slurm", "nodus")


def build_provider(name: str, settings: dict[str, Any], state_dir: Path) -> Provider:
    kind = settings.get("type", name)
    if kind == "local":
        from providers.local import LocalConfig, LocalProvider

        options = {k: v for k, v in settings.items() if k not in ("type", "root")}
        config = LocalConfig.from_dict(options) if options else LocalConfig()
        root = Path(settings.get("root") or state_dir / "local")
        inner: Provider = LocalProvider(root, config)
    else:
        raise ConfigError(f"providers.{name}.type: {kind!r} is not available in this build "
                          f"(known: {', '.join(KNOWN_TYPES)}; available: local)")
    from reconciler.workloads import CompositeProvider

    return CompositeProvider(inner, state_dir / "workloads")
