"""Provisioning a Job's runs, once per supervisor, when it first gets capacity: what
contains them (a sandbox that cannot work here fails the Job with SandboxUnavailable),
the image (a mapped virtualenv), the inputs, the source checkout, and where the command
will run. Problems become `ProvisionError(reason, message)`; notes become events."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nodus_gitops.floor.phases import Phase, Reason
from nodus_gitops.providers.local import child, jobstate, placement, runfs
from nodus_gitops.providers.local.placement import Placement
from nodus_gitops.providers.local.rundir import RunDir
from nodus_gitops.providers.local.runtime import holding, venv_roots
from nodus_gitops.providers.local.sandbox import Sandbox
from nodus_gitops.providers.local.spec import JobSpec

Emit = Callable[[str, str, bool], None]  # (reason, message, warning)
log = logging.getLogger("nodus_gitops.local")


class ProvisionError(Exception):
    """`fix`: what to change, when the reason's usual fix does not say it; `phase`: how
    the Job ends (Failed, or Cancelled when it was cancelled while it was prepared)."""

    def __init__(self, reason: Reason | None, message: str, fix: str | None = None,
                 phase: Phase = Phase.FAILED):
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.fix = fix
        self.phase = phase


# Why a Job being prepared must stop now (its phase, reason and message), else None.
Stop = Callable[[], tuple[Phase, Reason | None, str] | None]


def image_bin(spec: JobSpec, settings: dict[str, Any], first: bool, emit: Emit) -> str | None:
    if not spec.image:
        return None
    path = settings["images"].get(spec.image)
    if path is None:
        if settings["strictImages"]:
            raise ProvisionError(Reason.IMAGE_PULL_FAILED,
                                 f"image {spec.image} is not one of the local backend's images")
        if first:
            emit("ImageNotMapped", f"image {spec.image} is not mapped; the command runs with "
                 "the host's runtime (/usr)", True)
        return None
    if not os.path.isdir(path):
        raise ProvisionError(Reason.IMAGE_PULL_FAILED,
                             f"image {spec.image} maps to {path}, which does not exist")
    return path


UNREACHABLE_FIX = ("check the repository's URL and that its host serves https to this machine; "
                   "a host on a private network must be named in the local backend's "
                   "sourceHosts (the reconciler's log says why this fetch failed)")

NO_FETCH_NETWORK_FIX = ("run nodus-gitops doctor to see what this host lacks for slirp4netns, "
                        "through which source.git fetches go out; or set sandbox: none in the "
                        "local backend's config on a trusted machine")


def _fetch_source(spec: JobSpec, run: RunDir, settings: dict[str, Any], sb: Sandbox,
                  st: dict[str, Any], emit: Emit, stop: Stop | None = None) -> None:
    """Fetch source.git; a failure of the network says one line to the Job (no oracle of
    the host's ports) and its detail to the reconciler's log (the supervisor's)."""
    from nodus_gitops.providers.local import source as git_source  # only Jobs with source.git
    from nodus_gitops.providers.local.fetch_addresses import AddressRules

    assert spec.source is not None
    helpers = settings["helpers"]
    rules = AddressRules.of(settings.get("sourceHosts") or (),
                                       settings.get("sourceDenyNetworks") or ())
    try:
        st["source"], skipped = git_source.fetch(
            spec.source, run.source, sb, helpers["git"], settings.get("gitCaBundle"),
            rules=rules, slirp=(sb.slirp or helpers.get("slirp4netns")) if sb.contained else None,
            stop=stop)
    except git_source.FetchStopped as exc:  # cancelled, or its timeout passed, meanwhile
        phase, reason, message = exc.why
        raise ProvisionError(reason, message, phase=phase) from None
    except git_source.SourceUnreachable as exc:
        log.warning("local backend: %s: source.git %s@%s: %s", run.path, spec.source.repo,
                    spec.source.ref, exc.detail)
        raise ProvisionError(Reason.STORAGE_UNAVAILABLE, str(exc), UNREACHABLE_FIX) from None
    except git_source.FetchNetworkUnavailable as exc:
        raise ProvisionError(Reason.SANDBOX_UNAVAILABLE, f"cannot fetch source.git: {exc}",
                             NO_FETCH_NETWORK_FIX) from None
    except git_source.SourceFetchError as exc:
        raise ProvisionError(
            Reason.STORAGE_UNAVAILABLE,
            f"cannot fetch source.git {spec.source.repo}@{spec.source.ref}: {exc}",
        ) from None
    emit("SourceFetched", f"{spec.source.repo}@{spec.source.ref} is {st['source']['commit']}",
         False)
    if skipped:
        emit("SourceEntriesSkipped", f"{skipped} entries of the source were left out: links "
             "that leave the checkout or are absolute", True)


def _inputs(spec: JobSpec, root: Path, sb: Sandbox) -> tuple[tuple[str, str], ...]:
    """Check every input's path. An input in an earlier stage's own filesystem (unmounted
    when that stage finished) is looked at through a mount made for the look; contained
    runs then mount it read-only in their own mount namespace, so that nothing stays
    mounted on the host: returns those (image, mount point). Without a sandbox runs see
    the host's mounts: it is mounted read-only there, until that stage's Job goes."""
    filesystems: list[tuple[str, str]] = []
    for inp in spec.inputs:
        disk = runfs.disk_of(inp.path, root) if inp.path else None
        if disk is None:
            if not inp.path or not os.path.exists(inp.path):
                raise ProvisionError(Reason.STORAGE_UNAVAILABLE, f"input {inp.name} has no "
                                     f"readable path ({inp.path or 'unset'})")
            if sb.contained and (link := child.link_problem(inp.path)):
                raise ProvisionError(Reason.STORAGE_UNAVAILABLE, f"input {inp.name}: {link}")
            continue
        link = None
        if not sb.contained:
            problem = runfs.readable(disk)
            found = problem is None and os.path.exists(inp.path)
        else:
            with runfs.reading(disk) as problem:
                found = problem is None and os.path.exists(inp.path)
                link = child.link_problem(inp.path) if found else None
            image = disk / runfs.IMAGE_NAME
            if image.exists() and (str(image), str(disk / runfs.FILES)) not in filesystems:
                filesystems.append((str(image), str(disk / runfs.FILES)))
        if not found:
            raise ProvisionError(Reason.STORAGE_UNAVAILABLE,
                                 f"input {inp.name} has no readable path ({inp.path}"
                                 f"{': ' + problem if problem else ''})")
        if link:
            raise ProvisionError(Reason.STORAGE_UNAVAILABLE, f"input {inp.name}: {link}")
    return tuple(filesystems)


def provision(spec: JobSpec, run: RunDir, settings: dict[str, Any], st: dict[str, Any],
              emit: Emit, now: float, stop: Stop | None = None) -> Placement:
    """Prepare the Job's runs; records status.source and what contains the runs;
    raises ProvisionError. `stop` says when a long step (the source's fetch) must end."""
    first = not st["prepared"]
    sb = Sandbox.from_dict(settings["sandbox"])
    if sb.contained and sb.problem:
        raise ProvisionError(Reason.SANDBOX_UNAVAILABLE, sb.problem, sb.fix)
    bin_dir = image_bin(spec, settings, first, emit)
    filesystems = _inputs(spec, Path(os.path.abspath(settings["root"])), sb)
    roots = venv_roots(bin_dir) if bin_dir and sb.contained else []
    state_dir = os.path.dirname(os.path.abspath(settings["root"]))
    if (wide := holding(roots, state_dir)) is not None:
        raise ProvisionError(Reason.IMAGE_PULL_FAILED,
                             f"image {spec.image} maps to {bin_dir}, whose environment {wide} "
                             f"holds the state directory {state_dir}: map a virtualenv that "
                             "holds nothing else")
    try:  # where the files go is known before anything is fetched
        place = placement.place(spec, run, sb, bin_dir, roots, filesystems)
    except placement.CheckoutUnplaceable as exc:
        raise ProvisionError(Reason.STORAGE_UNAVAILABLE, str(exc),
                             "set source.git.path to a directory outside /usr, /etc and "
                             "the other runtime directories (such as /src), or leave it "
                             "out to check out into workingDir") from None
    if spec.source and (st["source"] is None or not run.source.is_dir()):
        _fetch_source(spec, run, settings, sb, st, emit, stop)
    if first:
        for note in place.notes:
            emit("WorkingDir", note, False)
        if not sb.contained:
            emit("NoSandbox", "sandbox: none in the local backend's config: the command runs "
                 "as the reconciler's own user and sees the whole machine; "
                 "NODUS_OUTPUTS_DIR, NODUS_CHECKPOINT_DIR and NODUS_INPUT_* point at the "
                 "run directory", True)
        if spec.dropped_env:
            emit("EnvIgnored", f"spec.env cannot set {', '.join(spec.dropped_env)}: the NODUS_ "
                 "prefix is reserved", True)
    st.update(sandbox=sb.type, network=sb.network if sb.contained else "host",
              runAs=f"{sb.user.uid}:{sb.user.gid} ({sb.user.note})")
    jobstate.set_condition(st, "Sandboxed", sb.contained,
                           "Bubblewrap" if sb.contained else "SandboxDisabled", sb.describe(), now)
    st["prepared"] = True
    return place
