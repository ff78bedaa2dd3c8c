"""Settings of the local backend: images, the accounting rate card, GPU slots and
timings. One frozen dataclass, serialised into every run directory so that a run's
supervisor keeps the settings it was started with.

The rates are local accounting rates, not a price list: they let `maxCostUSD`, the
plan's estimate and Sweep reports work the same way on a laptop as on the platform.
"""

from __future__ import annotations

import ipaddress
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

from nodus_gitops.providers.local.spec import parse_memory

# USD per GPU-hour by GPU type (local accounting rates).
DEFAULT_GPU_RATES: dict[str, float] = {
    "T4": 0.40,
    "L4": 0.80,
    "A10": 1.10,
    "A10G": 1.10,
    "L40S": 1.60,
    "A100": 2.50,
    "H100": 4.00,
    "H200": 5.00,
}


@dataclass(frozen=True)
class RateCard:
    """USD per hour: per CPU core, per GiB of memory, per GPU by type."""

    cpu_core_hour: float = 0.02
    memory_gib_hour: float = 0.005
    gpu_hour: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_GPU_RATES))
    default_gpu_hour: float = 1.00  # a GPU type missing from gpu_hour

    def gpu_rate(self, gpu_type: str | None) -> float:
        if gpu_type is None:
            return self.default_gpu_hour
        for name, rate in self.gpu_hour.items():
            if name.lower() == gpu_type.lower():
                return rate
        return self.default_gpu_hour

    def per_second(self, cpu: float, memory_bytes: int, gpu_types: list[str | None]) -> float:
        """The rate of one running process holding these resources, USD per second."""
        hourly = (
            cpu * self.cpu_core_hour
            + memory_bytes / (1 << 30) * self.memory_gib_hour
            + sum(self.gpu_rate(t) for t in gpu_types)
        )
        return hourly / 3600.0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RateCard:
        return cls(**data)


@dataclass(frozen=True)
class GpuSlot:
    """A declared GPU. Declared slots are simulated unless `simulated=False` says the
    machine really has it; `index` is what CUDA_VISIBLE_DEVICES receives (by default
    the next number after the detected GPUs)."""

    type: str
    memory: str | int = "24Gi"
    index: int | None = None
    simulated: bool = True

    @property
    def memory_bytes(self) -> int:
        return parse_memory(self.memory, "gpu_slots.memory")


SANDBOXES = ("bubblewrap", "none")
NETWORKS = ("shared", "none", "host")
DISK_LIMITS = ("auto", "filesystem", "polled")  # runfs.MODES


@dataclass(frozen=True)
class LocalConfig:
    """How the local backend runs Jobs.

    images: image name -> a virtualenv's bin directory, put first on PATH (and bound
        read-only into the sandbox with the Python it was made from).
    strict_images: an image missing from `images` fails the Job with ImagePullFailed
        (otherwise the host's runtime under /usr runs it and an event says so).
    gpu_slots: declared (simulated) GPUs, in addition to those nvidia-smi reports when
        `detect_gpus` is true.
    suspend_grace_seconds: time between SIGTERM and SIGKILL when stopping a run.
    suspend_retry_seconds, suspend_max_tries: a failed suspend is retried after this
        long, this many tries in all (the platform: ten minutes, three tries).
    sandbox: "bubblewrap" contains every run (its own user, namespaces and files); a
        machine where it cannot work fails Jobs with SandboxUnavailable. "none" runs
        Jobs as the reconciler's own user with the whole machine in view (a trusted
        laptop only; every Job says so in its status and events).
    network: "shared" (the default): each run (each gang) has a network namespace of its
        own with outbound access through slirp4netns, and cannot reach the host's
        loopback (127.0.0.1, nor 10.0.2.2); a machine without slirp4netns fails Jobs with
        SandboxUnavailable. "none": a loopback of its own only. "host": the host's own
        network namespace, every service on the host's loopback included (gives up that
        isolation).
    run_as_user, run_as_group: who runs the Jobs (a name or a number); by default the
        `nodus-run` user when it exists, else 65534 (nobody). Only a reconciler running
        as root can switch users; otherwise runs keep its uid inside their namespaces.
    pass_env: names of the reconciler's environment variables runs receive (nothing
        else of its environment reaches a run).
    max_log_bytes: a run's log keeps its first and last halves of this many bytes.
    max_output_bytes: the most a Job may write under /nodus (outputs, state, work,
        source); beyond it the Job fails with OutputLimitExceeded.
    min_free_bytes: new runs wait (Queued, DiskPressure) while the free space of the
        runs' file system, less what the unfinished Jobs and the new one may still write
        (their maxOutputBytes), would be under this, so the state database never
        competes with Job files.
    disk_limit: how a Job is held to max_output_bytes: "auto" gives each Job an ext4
        filesystem of its own (a loop-mounted sparse image: the kernel refuses writes
        past the cap) where the reconciler is root and the machine has loop devices and
        mkfs.ext4, else measures its files every few seconds ("polled"); "filesystem"
        requires the former, "polled" always measures.
    git_ca_bundle: a CA bundle (PEM) trusted by source.git fetches, besides the system's.
    source_hosts: hosts (names or addresses, as repo URLs write them) on a private network
        (RFC 1918, 100.64/10, fc00::/7, ...) that source.git may fetch from, such as a Git
        host on the LAN; loopback, link-local and unspecified addresses never.
    source_deny_networks: networks (CIDR) source.git never fetches from, whatever
        source_hosts says.
    use_cgroups: None uses the cgroup v1 memory controller for resources.memory when it
        is writable, else RLIMIT_AS; False always uses RLIMIT_AS; True requires cgroups.
    poll_seconds: how often a supervisor looks at its control file without a signal.
    prestart_supervisor: keep one supervisor process started ahead of need, so that a
        new Job's first run starts without waiting for an interpreter to start.
    python: the interpreter of the supervisors, bound read-only into every sandbox so
        that Jobs can run it.
    """

    images: dict[str, str] = field(default_factory=dict)
    strict_images: bool = False
    rates: RateCard = field(default_factory=RateCard)
    gpu_slots: list[GpuSlot] = field(default_factory=list)
    detect_gpus: bool = True
    suspend_grace_seconds: float = 10.0
    suspend_retry_seconds: float = 600.0
    suspend_max_tries: int = 3
    sandbox: str = "bubblewrap"
    network: str = "shared"
    run_as_user: int | str | None = None
    run_as_group: int | str | None = None
    pass_env: tuple[str, ...] = ()
    max_log_bytes: int | str = 64 << 20
    max_output_bytes: int | str = 4 << 30
    min_free_bytes: int | str = 1 << 30
    disk_limit: str = "auto"
    git_ca_bundle: str | None = None
    source_hosts: tuple[str, ...] = ()
    source_deny_networks: tuple[str, ...] = ()
    use_cgroups: bool | None = None
    poll_seconds: float = 0.1
    prestart_supervisor: bool = True
    python: str = sys.executable

    def __post_init__(self) -> None:
        """Refuse settings that cannot work, naming the setting; quantities become bytes."""
        if self.sandbox not in SANDBOXES:
            raise ValueError(f"sandbox: {self.sandbox!r} (use bubblewrap or none)")
        if self.disk_limit not in DISK_LIMITS:
            raise ValueError(f"diskLimit: {self.disk_limit!r} (use auto, filesystem or polled)")
        if self.network not in NETWORKS:
            raise ValueError(f"network: {self.network!r} (use shared, none or host)")
        if self.network == "none" and self.sandbox == "none":
            raise ValueError("network: none needs sandbox: bubblewrap (without a sandbox, runs "
                             "use the host's network)")
        for name, key in (("max_log_bytes", "maxLogBytes"), ("max_output_bytes", "maxOutputBytes"),
                          ("min_free_bytes", "minFreeBytes")):
            value = parse_memory(getattr(self, name), key)
            if value < 0 or (value == 0 and name != "min_free_bytes"):
                raise ValueError(f"{key}: {getattr(self, name)!r} must be more than 0")
            object.__setattr__(self, name, value)
        if isinstance(self.pass_env, str) or not all(
                isinstance(n, str) and n for n in self.pass_env):
            raise ValueError(f"passEnv: {self.pass_env!r} is not a list of variable names")
        object.__setattr__(self, "pass_env", tuple(self.pass_env))
        if self.max_log_bytes < 2:  # type: ignore[operator]
            raise ValueError("maxLogBytes: keep at least 2 bytes (a head and a tail)")
        object.__setattr__(self, "source_hosts", _source_hosts(self.source_hosts))
        object.__setattr__(self, "source_deny_networks",
                           _deny_networks(self.source_deny_networks))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _source_hosts(hosts: Any) -> tuple[str, ...]:
    """sourceHosts, canonical (lower case, no final dot, addresses in their usual form)."""
    if isinstance(hosts, str) or not all(isinstance(h, str) and h.strip(". ") for h in hosts):
        raise ValueError(f"sourceHosts: {hosts!r} is not a list of host names or addresses")
    canonical = []
    for host in hosts:
        host = host.strip().lower().rstrip(".")
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            canonical.append(host)
            continue
        if (address.is_loopback or address.is_link_local or address.is_unspecified
                or address.is_multicast):
            raise ValueError(f"sourceHosts: {host} is a loopback, link-local, unspecified or "
                             "multicast address: source.git never fetches from one")
        canonical.append(str(address))
    return tuple(canonical)


def _deny_networks(networks: Any) -> tuple[str, ...]:
    """sourceDenyNetworks as networks (an address with host bits set names its network)."""
    if isinstance(networks, str) or not all(isinstance(n, str) for n in networks):
        raise ValueError(f"sourceDenyNetworks: {networks!r} is not a list of networks (CIDR)")
    try:
        return tuple(str(ipaddress.ip_network(n.strip(), strict=False)) for n in networks)
    except ValueError as exc:
        raise ValueError(f"sourceDenyNetworks: {exc}") from None
