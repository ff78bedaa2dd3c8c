"""What contains a run: bubblewrap's argv for one run, and the mounts a Job's runs share.

A contained run starts in namespaces of its own (`--unshare-all`), as its own session,
dying with its supervisor. Its network namespace is its own too unless the config says
`network: host` (`--share-net`): with `network: shared`, the default, slirp4netns gives
it outbound access and nothing of the host's loopback (`usernet`); with `network: none`
it has a loopback only. Its root is a fresh tmpfs holding only:

- the runtime, read-only: /usr with the /bin, /lib* links (or directories) of the host,
  the parts of /etc that programs need (no shadow, no sudoers, no host keys), the
  Python the supervisors run (and the one each mapped image was made from);
- a /proc and /dev of its own, a private /tmp and /dev/shm (each at most
  resources.memory; the ranks of a gang share their gang's /dev/shm, `gangspace`);
  the root and /dev themselves are read-only;
- its own /nodus/outputs (empty when it starts), its Job's /nodus/work, its index's
  checkpoint directories at recovery.checkpointPaths (/nodus/state), the units
  file directory, the source checkout, the `nodus` shim read-only, and read-only
  /nodus/inputs/<name>.

Each run is its own Landlock domain where the kernel can scope one (`landlock`): its
processes reach each other's abstract Unix sockets, never another run's or the host's
(the ranks of a gang share one domain and one network namespace, `gangspace`).

Nothing of the state directory, the config, the repository mirror or other runs is
mounted, and the run's own PID namespace shows no process of the host. The program
that builds this, bubblewrap, and slirp4netns are always the absolute paths resolved
when the backend started, never looked up on a PATH a manifest could set.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodus_gitops.providers.local import landlock
from nodus_gitops.providers.local.child import staged_path
from nodus_gitops.providers.local.runuser import RunUser
from nodus_gitops.providers.local.spec import INPUTS_MOUNT, OUTPUTS_MOUNT, STATE_MOUNT

SHIM_DIR = Path(__file__).resolve().parent / "shim"
SHIM_MOUNT = "/nodus/.shim"
WORK_MOUNT = "/nodus/work"
SOURCE_MOUNT = "/nodus/source"
UNITS_MOUNT = "/nodus/.units"
RUN_TMP = "/tmp"
RUN_PATH = "/usr/local/bin:/usr/bin:/bin"

# Top-level names that are the runtime on a Debian-like system: links into /usr, or
# directories of their own on systems without a merged /usr.
_TOP_LEVEL = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# What programs read from /etc: users and groups by name (no shadow), name resolution,
# TLS roots, time zones, the dynamic linker's cache, alternatives' links.
ETC_ENTRIES = (
    "passwd", "group", "hosts", "host.conf", "resolv.conf", "nsswitch.conf", "gai.conf",
    "services", "protocols", "networks", "localtime", "timezone", "ld.so.cache",
    "ld.so.conf", "ld.so.conf.d", "ssl", "ca-certificates", "ca-certificates.conf",
    "pki", "alternatives", "mime.types", "os-release", "debian_version", "nvidia",
)
# Paths of the runtime and of the sandbox itself: never a mount point for Job files.
_RESERVED = ("/usr", "/etc", "/proc", "/dev", *(f"/{name}" for name in _TOP_LEVEL))
_NVIDIA_DEVICES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")


@dataclass(frozen=True)
class Mount:
    source: str  # the host path
    dest: str  # where the run sees it
    writable: bool = False


@dataclass(frozen=True)
class Sandbox:
    """The resolved `sandbox` settings (settings.json)."""

    type: str  # bubblewrap | none
    bwrap: str | None  # the absolute path of bubblewrap, resolved once
    network: str  # shared (its own, through slirp4netns) | none | host
    user: RunUser
    runtime: tuple[str, ...]  # Python installations bound read-only at their own path
    problem: str | None  # why bubblewrap cannot contain runs here
    slirp: str | None = None  # the absolute path of slirp4netns (network: shared)
    fix: str | None = None  # what to change for `problem`, when not the usual fix

    @property
    def contained(self) -> bool:
        return self.type == "bubblewrap"

    @property
    def user_net(self) -> bool:
        """Runs get a network namespace of their own with slirp4netns in it."""
        return self.contained and self.network == "shared"

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "bwrap": self.bwrap, "network": self.network,
                "user": self.user.to_dict(), "runtime": list(self.runtime),
                "problem": self.problem, "slirp": self.slirp, "fix": self.fix}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Sandbox:
        sb = cls(data["type"], data["bwrap"], data["network"],
                 RunUser.from_dict(data["user"]), tuple(data["runtime"]), data["problem"],
                 data.get("slirp"), data.get("fix"))
        if sb.user_net and not sb.slirp and not sb.problem:
            # settings written before network: shared had slirp4netns: never the host's
            return cls(sb.type, sb.bwrap, sb.network, sb.user, sb.runtime, NO_SLIRP, None,
                       NO_SLIRP_FIX)
        return sb

    def network_words(self) -> str:
        """Which network its runs have, as the Sandboxed condition says it."""
        if not self.contained or self.network == "host":
            return "the host's own, its loopback services included"
        if self.network == "none":
            return "none (loopback only)"
        return ("its own, outbound through slirp4netns; the host's loopback (127.0.0.1, "
                "10.0.2.2) is unreachable")

    def describe(self) -> str:
        """The Sandboxed condition's message."""
        if not self.contained:
            return ("sandbox: none: the command runs as the reconciler's own user and sees "
                    "the whole machine")
        missing = landlock.scoping()
        scope = ("; a Landlock domain of its own: no abstract Unix socket or process outside "
                 "the run is reachable" if missing is None else
                 f"; not scoped by Landlock ({missing}): with network: host, runs can reach "
                 "each other's and the host's abstract Unix sockets")
        return (f"bubblewrap: runs as {self.user.describe()}, in namespaces of its own "
                f"(network: {self.network}: {self.network_words()}), seeing only the runtime "
                f"and its own /nodus{scope}")


NO_SLIRP = ("network: shared needs slirp4netns (runs get a network of their own through "
            "it), which is not installed on the reconciler's PATH")
NO_SLIRP_FIX = ("install slirp4netns (apt-get install slirp4netns); or set network: none in "
                "the local backend's config (runs then get a loopback of their own and no "
                "outbound network)")
SLIRP_FAILED_FIX = ("run nodus-gitops doctor to see what this host lacks for it; or set "
                    "network: none in the local backend's config (runs then get a loopback "
                    "of their own and no outbound network)")


SLIRP_DNS = "10.0.2.3"  # slirp4netns' DNS forwarder, on a run's own network


def own_net_resolv_conf(host: str = "/etc/resolv.conf") -> bytes | None:
    """The resolv.conf a run on a network of its own (`network: shared`) gets instead of
    the host's, when every nameserver the host names is on its loopback (systemd-
    resolved's 127.0.0.53, a local dnsmasq), which the run cannot reach: slirp4netns'
    forwarder, the host's search and options lines kept. None: the host's file works as
    it is (or there is none)."""
    try:
        with open(host, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    servers = [line.split()[1] for line in lines
               if line.split()[:1] == ["nameserver"] and len(line.split()) > 1]
    if not servers or not all(_loopback(server) for server in servers):
        return None
    kept = [line for line in lines if line.split()[:1] in (["search"], ["domain"], ["options"])]
    return "\n".join([f"nameserver {SLIRP_DNS}", *kept, ""]).encode()


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%")[0]).is_loopback
    except ValueError:
        return False


def runtime_args(own_resolv: bool = False) -> list[str]:
    """bubblewrap arguments for the host's runtime, read-only (without the host's
    resolv.conf when the run gets one of its own)."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in _TOP_LEVEL:
        path = f"/{name}"
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for name in ETC_ENTRIES:
        if not (own_resolv and name == "resolv.conf"):
            args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    return args


def in_runtime(path: str) -> bool:
    """True for / and paths of the runtime and of /proc, /dev (no Job files there)."""
    return path == "/" or any(path == r or path.startswith(r + "/") for r in _RESERVED)


def covered(path: str, mounts: list[Mount] | tuple[Mount, ...]) -> bool:
    return any(path == m.dest or path.startswith(m.dest.rstrip("/") + "/") for m in mounts)


def gpu_devices(indexes: list[int]) -> list[str]:
    """The device files of real GPUs (by index) with the driver's shared ones."""
    if not indexes:
        return []
    return [f"/dev/{name}" for name in _NVIDIA_DEVICES] + [f"/dev/nvidia{i}" for i in indexes]


def bwrap_argv(
    sandbox: Sandbox,
    mounts: list[Mount],
    *,
    cwd: str,
    tmp_bytes: int,
    devices: list[str] = (),  # type: ignore[assignment]
    share_net: bool | None = None,
    scratch: tuple[tuple[str, int], ...] = (),
    shm: str | None = None,
    own_resolv: bool = False,
) -> tuple[list[str], list[str]]:
    """(bubblewrap's argv up to its `--`, the host paths the child stages for it).

    Sources are staged when the child drops from root to the run user (they may lie
    where that user cannot go); the argv then names their staged paths. `scratch` adds
    tmpfs mounts (path, bytes); `shm` is a host directory bound at /dev/shm instead of
    a tmpfs of the run's own (a gang's, `gangspace`). `share_net` keeps the network
    namespace bubblewrap starts in (by default only with `network: host`); `own_resolv`
    leaves out the host's resolv.conf (the run's is bound from a memory file, `runs`).
    The root and /dev, tmpfs without a size, are remounted read-only last: only /tmp,
    /dev/shm, the scratch mounts and the writable binds take what a run writes."""
    assert sandbox.bwrap is not None
    net = sandbox.network == "host" if share_net is None else share_net
    tmp = str(max(tmp_bytes, 1 << 20))
    argv = [sandbox.bwrap, "--unshare-all", *(["--share-net"] if net else []),
            "--die-with-parent", "--new-session", "--proc", "/proc", "--dev", "/dev",
            *([] if shm else ["--size", tmp, "--tmpfs", "/dev/shm"]),
            "--size", tmp, "--tmpfs", RUN_TMP,
            *runtime_args(own_resolv)]
    stage: list[str] = []

    def source(path: str) -> str:
        if not sandbox.user.switch:
            return path
        stage.append(path)
        return staged_path(len(stage) - 1)

    # The runtime is the host's, named by the config: bound from its real path (the
    # child opens what it stages without following links), at the path it names.
    for root in sandbox.runtime:
        argv += ["--ro-bind", source(os.path.realpath(root)), root]
    # Parents before what lies below them: a workingDir of /nodus bound last would
    # cover the Job's own /nodus/outputs, /nodus/state and the shim.
    for m in sorted(mounts, key=lambda m: m.dest.rstrip("/").count("/")):
        argv += ["--bind" if m.writable else "--ro-bind", source(m.source), m.dest]
    if shm:
        argv += ["--bind", source(shm), "/dev/shm"]
    for dev in devices:
        argv += ["--dev-bind-try", dev, dev]
    for path, size in scratch:
        argv += ["--size", str(size), "--tmpfs", path]
    argv += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", cwd]
    return argv, stage


def env_args(env: dict[str, str]) -> list[str]:
    """bubblewrap arguments that give the run exactly `env`. bubblewrap itself starts
    with an empty environment: a manifest's LD_PRELOAD, LD_LIBRARY_PATH or GCONV_PATH
    must never reach the loader of the program that builds the sandbox."""
    args = ["--clearenv"]
    for name, value in env.items():
        if "\0" in name or "\0" in value or "=" in name:
            raise ValueError(f"the environment variable {name.split(chr(0))[0]!r} cannot be "
                             "passed (a NUL character, or '=' in its name)")
        args += ["--setenv", name, value]
    return args


def job_mounts(run_outputs: Path, run_work: Path, run_units: Path, inputs: list[tuple[str, str]],
               source: tuple[Path, str] | None, extra_roots: list[str]) -> list[Mount]:
    """The mounts every run of a Job shares (its index's state is added per run)."""
    mounts = [Mount(str(SHIM_DIR), SHIM_MOUNT),
              *(Mount(os.path.realpath(root), root) for root in extra_roots),  # the runtime
              Mount(str(run_outputs), OUTPUTS_MOUNT, True),
              Mount(str(run_work), WORK_MOUNT, True),
              Mount(str(run_units), UNITS_MOUNT, True)]
    if source is not None:
        mounts.append(Mount(str(source[0]), source[1], True))
    for name, path in inputs:
        mounts.append(Mount(path, f"{INPUTS_MOUNT}/{name}"))
    return mounts


# Where the platform puts its own files: no checkpoint path can be there.
_PLATFORM_MOUNTS = (OUTPUTS_MOUNT, INPUTS_MOUNT, SHIM_MOUNT, UNITS_MOUNT)


def checkpoint_points(paths: tuple[str, ...], within: str | None = None,
                      ) -> tuple[list[str | None], list[str]]:
    """Where a run sees each of its checkpoint directories (None: that path cannot be
    one) and why the paths that cannot be are refused; `within` is the one tree a
    sandbox can make them in, where it has one. The first one, the NODUS_CHECKPOINT_DIR,
    falls back to /nodus/state."""
    points: list[str | None] = []
    refused: list[str] = []
    for path in paths:
        if in_runtime(path):
            refused.append(f"{path} is part of the runtime")
            points.append(None)
        elif any(path == p or path.startswith(p + "/") for p in _PLATFORM_MOUNTS):
            refused.append(f"{path} is where the platform puts its own files")
            points.append(None)
        elif within is not None and not path.startswith(within.rstrip("/") + "/"):
            refused.append(f"{path} is outside {within}, where this sandbox makes them")
            points.append(None)
        else:
            points.append(path)
    if points[0] is None:
        points[0] = STATE_MOUNT
        for n in range(1, len(points)):
            if points[n] == STATE_MOUNT:
                refused.append(f"{STATE_MOUNT} holds the first checkpoint directory")
                points[n] = None
    return points, refused


def run_mounts(shared: tuple[Mount, ...], outputs: Path,
               checkpoints: list[tuple[Path, str | None]]) -> list[Mount]:
    """One run's mounts: its Job's shared ones, with the run's own outputs directory at
    /nodus/outputs, and its index's checkpoint directories at their points."""
    mounts = [Mount(str(outputs), OUTPUTS_MOUNT, True) if m.dest == OUTPUTS_MOUNT else m
              for m in shared]
    mounts += [Mount(str(d), point, True) for d, point in checkpoints if point is not None]
    return mounts
