"""The local backend from the config's `providers.<name>` settings (`type: local`): its
camelCase keys read into a `LocalConfig` (unknown ones refused with the setting named)
and the one place its root directory is decided."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nodus_gitops.floor.errors import ConfigError, refuse_unknown_settings
from nodus_gitops.providers.local.config import GpuSlot, LocalConfig, RateCard
from nodus_gitops.providers.local.provider import LocalProvider

# providers.<name> settings of type local -> LocalConfig fields.
_LOCAL_KEYS = {
    "images": "images", "strictImages": "strict_images", "detectGpus": "detect_gpus",
    "suspendGraceSeconds": "suspend_grace_seconds", "sandbox": "sandbox",
    "network": "network", "runAsUser": "run_as_user", "runAsGroup": "run_as_group",
    "passEnv": "pass_env", "maxLogBytes": "max_log_bytes", "maxOutputBytes": "max_output_bytes",
    "minFreeBytes": "min_free_bytes", "diskLimit": "disk_limit", "gitCaBundle": "git_ca_bundle",
    "useCgroups": "use_cgroups", "prestartSupervisor": "prestart_supervisor",
    "sourceHosts": "source_hosts", "sourceDenyNetworks": "source_deny_networks",
}
_RATE_KEYS = {"cpuCoreHour": "cpu_core_hour", "memoryGiBHour": "memory_gib_hour",
              "gpuHour": "gpu_hour", "defaultGpuHour": "default_gpu_hour"}


def root_of(settings: Mapping[str, Any], state_dir: Path) -> Path:
    """Where the backend keeps its run directories: `root`, else `<state dir>/local`."""
    return Path(settings.get("root") or Path(state_dir) / "local")


def local_config(name: str, settings: Mapping[str, Any]) -> LocalConfig:
    """LocalConfig from camelCase settings, unknown keys refused with the setting named."""
    refuse_unknown_settings(set(settings) - {"useBubblewrap"},
                            ["type", "root", "rates", "gpuSlots", *_LOCAL_KEYS],
                            f"providers.{name}")
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
            refuse_unknown_settings(value or {}, _RATE_KEYS, f"providers.{name}.rates")
            values["rates"] = RateCard(**{_RATE_KEYS[k]: v for k, v in value.items()})
        else:  # gpuSlots, the only key left
            try:
                values["gpu_slots"] = [GpuSlot(**slot) for slot in value or []]
            except TypeError as e:
                raise ConfigError(f"providers.{name}.gpuSlots: {e} (each slot: type, "
                                  "memory, index, simulated)") from None
    try:
        return LocalConfig(**values)
    except ValueError as exc:
        raise ConfigError(f"providers.{name}.{exc}") from None


def from_settings(settings: Mapping[str, Any], state_dir: Path, *,
                  name: str = "local") -> LocalProvider:
    """The local backend `providers.<name>` describes."""
    return LocalProvider(root_of(settings, state_dir), local_config(name, settings))
