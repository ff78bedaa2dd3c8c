"""Builds the provider a binding names from the config's `providers` section.

Every provider is wrapped by the workload controllers, which run the kinds a backend
does not know natively (Pipelines, Sweeps) as Jobs on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nodus_gitops.floor.errors import ConfigError
from nodus_gitops.providers.base import Provider

KNOWN_TYPES = ("local", "slurm", "nodus")

# providers.<name> settings of type local -> LocalConfig fields.
_LOCAL_KEYS = {
    "images": "images", "strictImages": "strict_images", "detectGpus": "detect_gpus",
    "suspendGraceSeconds": "suspend_grace_seconds", "sandbox": "sandbox",
    "network": "network", "runAsUser": "run_as_user", "runAsGroup": "run_as_group",
    "passEnv": "pass_env", "maxLogBytes": "max_log_bytes", "maxOutputBytes": "max_output_bytes",
    "minFreeBytes": "min_free_bytes", "diskLimit": "disk_limit", "gitCaBundle": "git_ca_bundle",
    "useCgroups": "use_cgroups", "prestartSupervisor": "prestart_supervisor",
}
_RATE_KEYS = {"cpuCoreHour": "cpu_core_hour", "memoryGiBHour": "memory_gib_hour",
              "gpuHour": "gpu_hour", "defaultGpuHour": "default_gpu_hour"}


def local_config(name: str, settings: dict[str, Any]):
    """LocalConfig from camelCase settings, unknown keys refused with the setting named."""
    from nodus_gitops.providers.local import GpuSlot, LocalConfig, RateCard

    values: dict[str, Any] = {}
    for key, value in settings.items():
        if key in ("type", "root"):
            continue
        if key in _LOCAL_KEYS:
            values[_LOCAL_KEYS[key]] = tuple(value) if key == "passEnv" and isinstance(
                value, list) else value
        elif key == "useBubblewrap":
            raise ConfigError(f"providers.{name}.useBubblewrap: replaced by sandbox: bubblewrap "
                              "(the default) or sandbox: none")
        elif key == "rates":
            unknown = set(value or {}) - set(_RATE_KEYS)
            if unknown:
                raise ConfigError(f"providers.{name}.rates: unknown {sorted(unknown)} (known: "
                                  f"{', '.join(_RATE_KEYS)})")
            values["rates"] = RateCard(**{_RATE_KEYS[k]: v for k, v in value.items()})
        elif key == "gpuSlots":
            try:
                values["gpu_slots"] = [GpuSlot(**slot) for slot in value or []]
            except TypeError as e:
                raise ConfigError(f"providers.{name}.gpuSlots: {e} (each slot: type, "
                                  "memory, index, simulated)") from None
        else:
            raise ConfigError(f"providers.{name}: unknown setting {key!r} (known: type, root, "
                              f"rates, gpuSlots, {', '.join(_LOCAL_KEYS)})")
    try:
        return LocalConfig(**values)
    except ValueError as exc:
        raise ConfigError(f"providers.{name}.{exc}") from None


def build_provider(name: str, settings: dict[str, Any], state_dir: Path) -> Provider:
    kind = settings.get("type", name)
    if kind == "local":
        from nodus_gitops.providers.local import LocalProvider

        root = Path(settings.get("root") or state_dir / "local")
        inner: Provider = LocalProvider(root, local_config(name, settings))
    elif kind == "slurm":
        from nodus_gitops.providers.slurm import SlurmProvider, from_settings

        inner = SlurmProvider(from_settings(name, settings, state_dir))
    elif kind == "nodus":
        from nodus_gitops.providers.nodus import NodusProvider

        inner = NodusProvider.from_settings(name, settings)
    else:
        raise ConfigError(f"providers.{name}.type: {kind!r} is not available in this build "
                          f"(known: {', '.join(KNOWN_TYPES)}; available: local, slurm, nodus)")
    from nodus_gitops.workloads import CompositeProvider

    return CompositeProvider(inner, state_dir / "workloads")
