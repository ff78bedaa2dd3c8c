"""Settings of the slurm backend (`providers.<name>` with `type: slurm`), read once from
the config's camelCase keys into a frozen value, and the JWT it authenticates with.

The token is read on every request (from the environment variable `tokenEnv`, else the
file `tokenFile`), so a rotated token is picked up without a restart; it is never
logged and never part of an error message.
"""

from __future__ import annotations

import base64
import getpass
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodus_gitops.floor.errors import ConfigError, refuse_unknown_settings
from nodus_gitops.providers.local.config import RateCard
from nodus_gitops.providers.local.spec import SpecError, parse_memory

DEFAULT_URL = "http://127.0.0.1:6820"
API_VERSIONS = ("v0.0.36", "v0.0.37", "v0.0.38")
_RATE_KEYS = {"cpuCoreHour": "cpu_core_hour", "memoryGiBHour": "memory_gib_hour",
              "gpuHour": "gpu_hour", "defaultGpuHour": "default_gpu_hour"}
KEYS = ("type", "url", "apiVersion", "user", "tokenEnv", "tokenFile", "root", "partitions",
        "defaultPartition", "scontrol", "slurmConf", "sandbox", "rates", "timeoutSeconds",
        "gpuMemory")


@dataclass(frozen=True)
class SlurmConfig:
    """How the provider reaches the cluster and where Jobs keep their files.

    root: a directory on the cluster's shared filesystem, the same path on the
        reconciler's host and on every compute node (job scripts, outputs, checkpoints).
    partitions: region class (placement.regions) -> partition; default_partition is used
        when a Job names no region (None: the cluster's default partition).
    scontrol: the `scontrol` the submit host runs for suspend/resume/hold (slurmrestd
        cannot); None or a missing program makes the backend unable to suspend.
    slurm_conf: SLURM_CONF for scontrol, when the cluster's config is not the default one.
    sandbox: "auto" runs each command under bubblewrap when the node has `bwrap`, so it
        sees /nodus/outputs, /nodus/state and /nodus/inputs/<name>; "none" never does.
    gpu_memory: GRES GPU type -> bytes of memory one GPU of it has (Slurm does not know);
        what a GPU memory floor is placed by (`gpus.placed`).
    """

    root: Path
    url: str = DEFAULT_URL
    api_version: str = "v0.0.38"
    user: str | None = None
    token_env: str = "SLURM_JWT"
    token_file: Path | None = None
    partitions: dict[str, str] = field(default_factory=dict)
    default_partition: str | None = None
    scontrol: str | None = "scontrol"
    slurm_conf: str | None = None
    sandbox: str = "auto"
    rates: RateCard = field(default_factory=RateCard)
    timeout_seconds: float = 20.0
    gpu_memory: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_settings(cls, name: str, settings: Mapping[str, Any],
                      state_dir: Path | None = None) -> SlurmConfig:
        """The config's `providers.<name>` (camelCase keys); unknown keys are refused
        with the setting named; `root` defaults to `<state dir>/slurm`."""
        return _from_settings(name, settings, state_dir)

    @property
    def job_user(self) -> str:
        return self.user or os.environ.get("SLURM_USER") or getpass.getuser()

    def token(self) -> str:
        """The JWT, from the environment variable, else the token file."""
        value = os.environ.get(self.token_env, "").strip()
        if value and value != "daemon":
            return value
        if self.token_file is not None:
            try:
                value = self.token_file.read_text().strip()
            except OSError as exc:
                raise ConfigError(f"slurm tokenFile {self.token_file}: cannot read it "
                                  f"({exc.strerror})") from None
            if value.startswith("SLURM_JWT="):
                value = value.split("=", 1)[1]
            if value:
                return value
        raise ConfigError(
            f"slurm backend: no token; set {self.token_env} (or tokenFile) to the output of "
            f"`scontrol token username={self.job_user}`")


def token_claims(token: str) -> dict[str, Any] | None:
    """The payload of a JWT (not verified: the cluster does that), or None when the
    text is not a JWT at all."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        raw = parts[1] + "=" * (-len(parts[1]) % 4)
        claims = json.loads(base64.urlsafe_b64decode(raw))
    except (ValueError, UnicodeDecodeError):
        return None
    return claims if isinstance(claims, dict) else None


def _str_map(name: str, key: str, value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"providers.{name}.{key}: expected a mapping of region: partition")
    return {str(k): str(v) for k, v in value.items()}


def _gpu_memory(name: str, value: Any) -> dict[str, int]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"providers.{name}.gpuMemory: expected a mapping of GPU type: "
                          "memory of one GPU (such as L4: 24Gi)")
    try:
        return {str(t): parse_memory(m, f"providers.{name}.gpuMemory.{t}")
                for t, m in value.items()}
    except SpecError as exc:
        raise ConfigError(str(exc)) from None


def _from_settings(name: str, settings: Mapping[str, Any], state_dir: Path | None = None
                   ) -> SlurmConfig:
    """SlurmConfig from `providers.<name>`; unknown keys are refused with the setting named."""
    refuse_unknown_settings(settings, KEYS, f"providers.{name}")
    root = settings.get("root") or (state_dir / "slurm" if state_dir else None)
    if not root:
        raise ConfigError(f"providers.{name}.root: a directory on the cluster's shared "
                          "filesystem is required")
    api = str(settings.get("apiVersion", "v0.0.38"))
    if api not in API_VERSIONS:
        raise ConfigError(f"providers.{name}.apiVersion: {api!r} is not served by slurmrestd "
                          f"22.05 without slurmdbd (use one of {', '.join(API_VERSIONS)})")
    sandbox = str(settings.get("sandbox", "auto"))
    if sandbox not in ("auto", "none"):
        raise ConfigError(f"providers.{name}.sandbox: {sandbox!r} (use auto or none)")
    rates = settings.get("rates") or {}
    refuse_unknown_settings(rates, _RATE_KEYS, f"providers.{name}.rates")
    token_file = settings.get("tokenFile")
    return SlurmConfig(
        root=Path(root),
        url=str(settings.get("url", DEFAULT_URL)).rstrip("/"),
        api_version=api,
        user=settings.get("user"),
        token_env=str(settings.get("tokenEnv", "SLURM_JWT")),
        token_file=Path(token_file) if token_file else None,
        partitions=_str_map(name, "partitions", settings.get("partitions")),
        default_partition=settings.get("defaultPartition"),
        scontrol=settings.get("scontrol", "scontrol") or None,
        slurm_conf=settings.get("slurmConf"),
        sandbox=sandbox,
        rates=RateCard(**{_RATE_KEYS[k]: v for k, v in rates.items()}),
        timeout_seconds=float(settings.get("timeoutSeconds", 20.0)),
        gpu_memory=_gpu_memory(name, settings.get("gpuMemory")),
    )
