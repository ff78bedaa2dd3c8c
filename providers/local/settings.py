"""`LocalConfig` resolved against this machine into the settings.json every run
directory carries: what contains the runs (bubblewrap's absolute path and whether it
works here, the run user, the network and slirp4netns, the Python runtime to bind), the
helpers by
absolute path, the GPU slots (detected and declared), the cgroup v1 memory group for
runs, the limits and the timings. A supervisor reads only this, so a Job keeps the
settings it started with even if the reconciler's config changes.

Helpers (bwrap, slirp4netns, git, nvidia-smi) are looked up once, here, on the reconciler's own
PATH; nothing a manifest sets can change which program runs.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from nodus_gitops.providers.local import (
    child,
    gpus,
    hostcheck,
    limits,
    runfs,
    runuser,
    sandbox,
    usernet,
)
from nodus_gitops.providers.local.config import LocalConfig
from nodus_gitops.providers.local.runtime import holding, python_roots
from nodus_gitops.providers.local.runuser import RunUser

log = logging.getLogger("nodus_gitops.local")
HELPERS = ("bwrap", "slirp4netns", "git", "nvidia-smi")
PROBE_TRIES = 3  # slirp4netns is tried this many times before runs are refused a network


def find_helper(name: str) -> str | None:
    """`name`'s absolute path on the reconciler's own PATH, or None."""
    found = shutil.which(name)
    return os.path.abspath(found) if found else None


def probe(bwrap: str | None, user: RunUser, network: str) -> str | None:
    """Why bubblewrap cannot contain a run here (None when it can): the same drop,
    staging and namespaces as a real run, running `true`."""
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed on the reconciler's PATH"
    sb = sandbox.Sandbox("bubblewrap", bwrap, network, user, (), None)
    argv, stage = sandbox.bwrap_argv(
        sb, [sandbox.Mount(str(sandbox.SHIM_DIR), sandbox.SHIM_MOUNT)], cwd="/", tmp_bytes=1 << 20)
    preexec = child.make_preexec(user=user, stage=stage)
    try:
        done = subprocess.run([*argv, "--", "true"], env={"PATH": "/usr/bin:/bin"}, cwd="/",
                              capture_output=True, timeout=30, preexec_fn=preexec)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bubblewrap ({bwrap}) could not start: {exc}"
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines() or ["no message"]
        return f"bubblewrap ({bwrap}) cannot create the run's namespaces here: {said[-1]}"
    return None


def probe_network(slirp: str | None, user: RunUser) -> str | None:
    """Why slirp4netns cannot give runs a network of their own here (None when it can):
    a network namespace of the run user's, slirp4netns on it as a run's, until ready."""
    if slirp is None:
        return sandbox.NO_SLIRP
    problem = None
    for _ in range(PROBE_TRIES):  # one failure on a loaded machine must not refuse every Job
        try:
            usernet.hold_network(slirp, user).stop()
            return None
        except OSError as exc:
            problem = (f"network: shared: slirp4netns ({slirp}) cannot give runs a network "
                       f"here: {exc}")
            log.warning("local backend: %s", problem)
    return problem


def _sandbox_problem(bwrap: str | None, user: RunUser,
                     network: str) -> tuple[str | None, str | None]:
    """Why runs cannot be contained here and its fix: the host's own cause
    (`hostcheck`) where one is found, else what the probe met."""
    for finding in (hostcheck.bubblewrap(bwrap), hostcheck.user_namespaces()):
        if not finding.ok:
            return finding.problem, finding.fix
    return probe(bwrap, user, network), None


def _network_problem(slirp: str | None, user: RunUser) -> tuple[str | None, str | None]:
    """Why runs cannot have a network of their own here (network: shared) and its fix."""
    if slirp is None:
        return sandbox.NO_SLIRP, sandbox.NO_SLIRP_FIX
    tun = hostcheck.tun_device(user)
    if not tun.ok:
        return f"network: shared: {tun.problem}", tun.fix
    problem = probe_network(slirp, user)
    return problem, (sandbox.SLIRP_FAILED_FIX if problem else None)


def resolve_sandbox(config: LocalConfig, helpers: dict[str, str | None],
                    root: Path) -> sandbox.Sandbox:
    if config.sandbox == "none":
        log.warning("local backend: sandbox: none: Jobs run as this process's user and see "
                    "the whole machine")
        me = RunUser(os.geteuid(), os.getegid(), False, "the reconciler's own user: sandbox: none")
        return sandbox.Sandbox("none", None, config.network, me, (), None)
    user = runuser.resolve(config.run_as_user, config.run_as_group)
    bwrap = helpers["bwrap"]
    problem, fix = _sandbox_problem(bwrap, user, config.network)
    slirp = helpers.get("slirp4netns") if config.network == "shared" else None
    if not problem and config.network == "shared":
        problem, fix = _network_problem(slirp, user)
    roots = tuple(python_roots(config.python))
    state_dir = os.path.dirname(os.path.abspath(root))
    if not problem and (wide := holding(roots, state_dir)) is not None:
        problem = (f"the supervisors' Python ({config.python}) is installed in {wide}, which "
                   f"holds the state directory {state_dir}: every run would see it; keep the "
                   "state directory outside the Python installation")
        fix = None
    if problem:
        log.error("local backend: %s; Jobs will fail with SandboxUnavailable", problem)
    return sandbox.Sandbox("bubblewrap", bwrap, config.network, user, roots, problem, slirp,
                           fix)


def resolve_disk(config: LocalConfig, root: Path, user: RunUser) -> dict[str, Any]:
    """How Jobs are held to maxOutputBytes here (`runfs.plan`), tried once for real."""
    disk = runfs.plan(int(config.max_output_bytes), config.disk_limit)  # type: ignore[arg-type]
    if disk["type"] == "filesystem":
        disk["owner"] = [user.uid, user.gid] if user.switch else None  # of the Job's dirs
        runfs.clean_spares(root)
        problem = runfs.probe(root, disk)
        if problem is not None:
            if config.disk_limit == "filesystem":
                raise ValueError(f"diskLimit: filesystem, but {problem}")
            disk = {"type": "polled", "problem": problem}
    if disk["type"] == "polled":
        (log.info if config.disk_limit == "polled" else log.warning)(
            "local backend: Jobs' files are measured every few seconds, not held to "
            "maxOutputBytes by a filesystem of their own: %s", disk["problem"])
    return disk


def resolve(config: LocalConfig, root: Path) -> dict[str, Any]:
    helpers = {name: find_helper(name) for name in HELPERS}
    sb = resolve_sandbox(config, helpers, root)
    detected = gpus.detect(helpers["nvidia-smi"]) if config.detect_gpus else []
    slots = gpus.all_slots(config.gpu_slots, detected)
    parent = limits.cgroup_parent() if config.use_cgroups is not False else None
    if config.use_cgroups and parent is None:
        raise ValueError("use_cgroups is set but the cgroup v1 memory controller is not writable")
    return {
        "root": str(root),
        "sandbox": sb.to_dict(),
        "helpers": helpers,
        "images": dict(config.images),
        "strictImages": config.strict_images,
        "passEnv": list(config.pass_env),
        "maxLogBytes": config.max_log_bytes,
        "maxOutputBytes": config.max_output_bytes,
        "minFreeBytes": config.min_free_bytes,
        "disk": resolve_disk(config, root, sb.user),
        "gitCaBundle": config.git_ca_bundle,
        "sourceHosts": list(config.source_hosts),
        "sourceDenyNetworks": list(config.source_deny_networks),
        "rates": config.to_dict()["rates"],
        "slots": [s.to_dict() for s in slots],
        "locksDir": str(root / ".gpus"),
        "cgroupParent": str(parent) if parent else None,
        "graceSeconds": config.suspend_grace_seconds,
        "suspendRetrySeconds": config.suspend_retry_seconds,
        "suspendMaxTries": config.suspend_max_tries,
        "pollSeconds": config.poll_seconds,
    }
