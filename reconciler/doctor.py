"""`nodus-gitops doctor`: whether this machine and the config can run Jobs, a check a line.

Each check says what it saw; one that fails says why and, on the line under it, the fix.
The local backend's host findings are `providers.local.hostcheck`'s and its verdict is
`settings.resolve_sandbox`'s, the calls the backend makes at start-up, so doctor and a
Job's SandboxUnavailable message name the same cause in the same words. Doctor only
reads: no state database is created or migrated, remotes are listed into a temporary
mirror, and the local backend's probes run in a temporary directory. A check that breaks
is that check's failure, with the error's text; every line is masked as the dashboard is.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pygit2
from nodus_gitops.floor.errors import ConfigError, NodusGitopsError, ProviderError
from nodus_gitops.floor.redaction import mask_url_passwords
from nodus_gitops.locations import find_config
from nodus_gitops.providers.local import (
    build,
    diskuse,
    hostcheck,
    landlock,
    limits,
    runfs,
    runuser,
    sandbox,
)
from nodus_gitops.providers.local import settings as local
from nodus_gitops.providers.nodus import NodusConfig, NodusProvider
from nodus_gitops.providers.registry import KNOWN_TYPES
from nodus_gitops.providers.slurm.client import SlurmClient
from nodus_gitops.providers.slurm.config import SlurmConfig
from nodus_gitops.source import GitSource
from nodus_gitops.state import engine as engines
from nodus_gitops.state import migrations
from nodus_gitops.web.redact import Masker, configured_secrets
from pygit2.enums import Feature
from sqlalchemy import URL, create_engine, inspect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

if TYPE_CHECKING:
    from nodus_gitops.config import Binding, Settings
    from nodus_gitops.providers.local.config import LocalConfig

REACH_SECONDS = 10.0  # the most a backend's answer is waited for
BROKEN_FIX = "the check could not finish: the error above says why"
CONFIG_FIX = ("correct the config or the flag the error names, or point --config "
              "(NODUS_GITOPS_CONFIG) at a config this user can read")
STATE_DIR_FIX = ("point --state-dir (NODUS_GITOPS_HOME, the config's stateDir) at a directory "
                 "this user can write, or let this user write that one")
STATE_URL_FIX = ("start the database or correct --state (NODUS_GITOPS_STATE, the config's "
                 "state): postgresql+psycopg://USER@HOST:5432/DB or sqlite:////PATH")
SANDBOX_FIX = ("remove the cause above; or set sandbox: none in the local backend's config to "
               "run Jobs uncontained, on a machine you trust")
NOBODY_FIX = ("create the nodus-run system user, as the quick start does (useradd --system "
              "--no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin nodus-run): "
              "65534 is often shared by other daemons, which could then reach the runs' files")


@dataclass(frozen=True)
class Found:
    """What one check saw; `problem` None when it passes, `note` a pass with a caveat."""

    seen: str
    problem: str | None = None
    fix: str | None = None
    note: bool = False


@dataclass(frozen=True)
class Check:
    group: str  # the backend's name, or state, git, remotes, config
    name: str
    found: Found

    @property
    def ok(self) -> bool:
        return self.found.problem is None

    def text(self) -> str:
        f = self.found
        status = "FAIL" if not self.ok else "note" if f.note else "ok"
        line = f"{status:<4} {self.name}: {f.seen}" + (f": {f.problem}" if f.problem else "")
        return line + (f"\n  fix: {f.fix}" if f.fix and (f.note or not self.ok) else "")

    def as_dict(self) -> dict[str, Any]:
        f = self.found
        return {"name": self.name, "ok": self.ok, "seen": f.seen, "problem": f.problem,
                "fix": f.fix, "group": self.group, "note": f.note}


def check(group: str, name: str, probe: Callable[[], Found]) -> Check:
    try:
        return Check(group, name, probe())
    except Exception as exc:  # noqa: BLE001 - a broken check fails alone, never the report
        return Check(group, name, Found("the check broke", f"{type(exc).__name__}: {exc}",
                                        BROKEN_FIX))


# -- the report -----------------------------------------------------------------------


def run(args: argparse.Namespace, load: Callable[[], Settings]) -> int:
    """`nodus-gitops doctor`: print the report; 0 when nothing failed, else 1."""
    checks, secrets = report(args, load)
    masker = Masker(secrets)
    shown = [Check(c.group, c.name, Found(
        masker.text(c.found.seen), c.found.problem and masker.text(c.found.problem),
        c.found.fix and masker.text(c.found.fix), c.found.note)) for c in checks]
    ok = all(c.ok for c in shown)
    if args.output == "json":
        print(json.dumps({"ok": ok, "checks": [c.as_dict() for c in shown]}, indent=2))
    else:
        print("\n".join(c.text() for c in shown))
    return 0 if ok else 1


def report(args: argparse.Namespace,
           load: Callable[[], Settings]) -> tuple[list[Check], frozenset[str]]:
    """Every check, and the secrets the settings name (to mask). A config that cannot be
    read is the one failure; nothing here raises."""
    where = "cannot be read"
    try:
        config = find_config(getattr(args, "config", None), os.environ)
        where = f"{config.path} ({config.named_by})" if config.path else "none: the defaults"
        settings = load()
    except Exception as exc:  # noqa: BLE001
        return [Check("config", "config", Found(where, str(exc), CONFIG_FIX))], frozenset()
    try:
        secrets = configured_secrets(settings)
    except Exception:  # noqa: BLE001 - token shapes and URL passwords are masked anyway
        secrets = frozenset()
    try:
        return all_checks(settings, where), secrets
    except Exception as exc:  # noqa: BLE001 - each check is guarded; this is the rest
        return [Check("config", "doctor", Found("the report broke", f"{type(exc).__name__}: "
                                                f"{exc}", BROKEN_FIX))], secrets


def all_checks(settings: Settings, where: str) -> list[Check]:
    backends = [b.provider for b in settings.bindings] or list(settings.providers) or ["local"]
    backends = list(dict.fromkeys(backends))
    checks = [check("config", "config", lambda: Found(
        f"{where}; {len(settings.bindings)} repo binding(s); backends: {', '.join(backends)}")),
        check("state", "state directory", lambda: state_directory(settings.state_dir)),
        check("state", "state database", lambda: state_database(settings)),
        check("git", "git", lambda: git_binary(local.find_helper("git"))),
        check("git", "libgit2", libgit2)]
    for binding in settings.bindings:
        checks.append(check("remotes", f"remote {binding.id}",
                            lambda b=binding: remote(b)))
    verdicts = []
    for name in backends:
        raw = settings.provider_settings(name)
        kind = raw.get("type", name)
        suffix = "" if name == kind else f" ({name})"
        if kind == "local":
            host, verdict = local_checks(name, raw, settings.state_dir, suffix)
            checks += host
            verdicts.append(verdict)
        elif kind == "slurm":
            checks.append(check(name, f"slurmrestd reachable{suffix}",
                                lambda n=name, r=raw: slurm(n, r, settings.state_dir)))
        elif kind == "nodus":
            checks.append(check(name, f"Nodus API reachable{suffix}",
                                lambda n=name, r=raw: nodus(n, r, settings)))
        else:
            checks.append(Check(name, f"backend {name}", Found(
                f"type {kind}", f"providers.{name}.type: {kind!r} is not available in this "
                f"build (known: {', '.join(KNOWN_TYPES)})", f"set providers.{name}.type")))
    return checks + verdicts


# -- state, Git ------------------------------------------------------------------------


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def state_directory(state_dir: Path) -> Found:
    path, me = state_dir.absolute(), os.geteuid()
    if path.is_dir():
        if os.access(path, os.W_OK | os.X_OK):
            return Found(f"{path} (writable)")
        return Found(str(path), f"{path} is not writable by uid {me}", STATE_DIR_FIX)
    if path.exists():
        return Found(str(path), f"{path} is not a directory", STATE_DIR_FIX)
    parent = _existing(path)
    if os.access(parent, os.W_OK | os.X_OK):
        return Found(f"{path} does not exist yet: serve or reconcile creates it ({parent} "
                     "is writable)")
    return Found(f"{path} does not exist", f"{parent} is not writable by uid {me}, so "
                 f"{path} cannot be made there", STATE_DIR_FIX)


def state_database(settings: Settings) -> Found:
    """The store's schema revision, read with its own migration helpers; nothing is made."""
    if settings.state_url is None or not settings.state_url.strip():
        url = URL.create("sqlite", database=str(settings.state_dir.absolute() / engines.STATE_FILE))
    else:
        try:
            url = engines.resolve_url(settings.state_url, None)
        except ConfigError as exc:
            return Found(mask_url_passwords(settings.state_url), str(exc), STATE_URL_FIX)
    label = engines.display(url)
    postgres = url.get_backend_name() == "postgresql"
    kind = "PostgreSQL" if postgres else "SQLite"
    if not postgres and not Path(url.database or "").is_file():
        return Found(f"{label}: none yet: serve or reconcile creates it")
    try:
        engine = (create_engine(url, poolclass=NullPool, connect_args={"connect_timeout": 5})
                  if postgres else engines.create_state_engine(url, read_only=True))
        try:
            with engine.connect() as conn:
                found = migrations.current_revision(conn)
                legacy = migrations.legacy_version(conn) if found is None else None
                tables = (inspect(conn).get_table_names()
                          if found is None and legacy is None else [])
        finally:
            engine.dispose()
    except DBAPIError as exc:
        said = str(exc.orig or exc).strip().splitlines() or ["no message"]
        return Found(kind, f"cannot connect to the state database {label}: "
                     f"{mask_url_passwords(said[0])}", STATE_URL_FIX)
    except ImportError as exc:
        return Found(kind, f"{label} needs psycopg 3 ({exc})",
                     "pip install 'nodus-gitops[postgres]'")
    head = migrations.head()
    if found == head:
        return Found(f"{label} at schema revision {found} (this release's)")
    if found in {s.revision for s in migrations.scripts().walk_revisions()}:
        return Found(f"{label} at schema revision {found}, before this release's {head}: "
                     "serve or reconcile upgrades it when it starts", note=True)
    if found is not None:
        return Found(kind, f"the schema of {label} ({found}) is newer than this release "
                     f"({head})", "use the release that wrote it, or point --state elsewhere")
    if legacy is not None:
        return Found(f"{label} at the pre-Alembic version {legacy}: serve or reconcile "
                     "upgrades it when it starts", note=True)
    if tables:
        return Found(kind, f"{label} holds tables ({', '.join(tables[:5])}) but no "
                     "nodus-gitops schema", "point --state at a database of its own")
    return Found(f"{label} reachable, empty: serve or reconcile creates the schema")


def _version(argv: list[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10,
                              env={"PATH": "/usr/bin:/bin"}, cwd="/")
    except (OSError, subprocess.SubprocessError) as exc:
        return f"version unknown: {exc}"
    said = (done.stdout.strip() or done.stderr.strip()).splitlines()
    return said[0] if said else "version unknown"


def git_binary(path: str | None) -> Found:
    if path is None:
        return Found("not installed on the reconciler's PATH: a Job's source.git cannot be "
                     "fetched (the reconciler itself reads Git through libgit2)",
                     fix="install git (apt-get install git)", note=True)
    return Found(f"{_version([path, '--version'])} ({path})")


def libgit2() -> Found:
    features = [f.name.lower() for f in (Feature.HTTPS, Feature.SSH) if pygit2.features & f]
    return Found(f"libgit2 {pygit2.LIBGIT2_VERSION} (pygit2 {pygit2.__version__}; "
                 f"{', '.join(features) or 'no https, no ssh'})")


def remote(binding: Binding) -> Found:
    """The binding's branch on its remote: one ref listing with its credentials, into a
    mirror of its own that is removed after."""
    seen = f"branch {binding.branch}"
    fix = (f"check the url, the branch and the credentials of repo binding {binding.id} "
           "(--repo and --branch, or its entry under repos: in the config)")
    try:
        with tempfile.TemporaryDirectory(prefix="nodus-doctor-git-") as tmp:
            source = GitSource(binding.url, binding.branch, Path(tmp), binding.credentials())
            sha = source.remote_head()
    except NodusGitopsError as exc:  # unreachable, no such branch, credentials refused
        return Found(seen, str(exc), fix)
    return Found(f"{binding.url} branch {binding.branch} at {sha[:12]}")


# -- remote backends --------------------------------------------------------------------


def slurm(name: str, raw: dict[str, Any], state_dir: Path) -> Found:
    try:
        config = SlurmConfig.from_settings(name, raw, state_dir)
    except ConfigError as exc:
        return Found(f"providers.{name}", str(exc), f"correct providers.{name} as the error says")
    config = replace(config, timeout_seconds=min(config.timeout_seconds, REACH_SECONDS))
    where = f"GET {config.url}/slurm/{config.api_version}/ping"
    client = SlurmClient(config)
    try:
        doc = client.ping()
    except (ConfigError, ProviderError) as exc:
        return Found(where, str(exc), f"check that slurmrestd serves providers.{name}.url "
                     f"({config.url}) and that the token in {config.token_env} (or "
                     f"providers.{name}.tokenFile) is current")
    finally:
        client.close()
    pings = [p for p in doc.get("pings") or [] if isinstance(p, dict)]
    said = ", ".join(f"{p.get('hostname')} {p.get('ping')}" for p in pings)
    return Found(f"{where}: {said or 'answered'}")


def nodus(name: str, raw: dict[str, Any], settings: Settings) -> Found:
    fix = f"correct providers.{name} as the error says"
    try:
        config = NodusConfig.from_settings(name, raw)
    except ConfigError as exc:
        return Found(f"providers.{name}", str(exc), fix)
    config = replace(config, timeout=min(config.timeout, REACH_SECONDS))
    project = next((b.project for b in settings.bindings if b.provider == name),
                   config.project or "default")
    try:
        with NodusProvider(config) as provider:
            owned = provider.list_owned(project, settings.instance)
    except (ConfigError, ProviderError) as exc:
        return Found(config.url, str(exc), f"check providers.{name}.url ({config.url}) and "
                     f"the API key in {config.credential_setting}")
    return Found(f"{config.url}: project {project} lists {len(owned)} resource(s) of "
                 f"instance {settings.instance}")


# -- the local backend ------------------------------------------------------------------


@contextmanager
def _quiet(logger: str) -> Iterator[None]:
    """The backend logs what doctor prints: keep it off stderr meanwhile."""
    log = logging.getLogger(logger)
    was, log.disabled = log.disabled, True
    try:
        yield
    finally:
        log.disabled = was


@contextmanager
def _scratch(near: Path) -> Iterator[Path]:
    """A temporary directory in `near` (the state directory: the runs' disk) where it
    can write, else in the system's temporary directory; removed after."""
    base = near if near.is_dir() and os.access(near, os.W_OK | os.X_OK) else None
    with tempfile.TemporaryDirectory(prefix=".nodus-doctor-", dir=base) as tmp:
        yield Path(tmp)


def _needed(found: hostcheck.Finding, needed: bool, why: str) -> Found:
    """A hostcheck Finding, or its caveat where the config does not use that part."""
    if needed:
        return Found(found.seen, found.problem, found.fix)
    return Found(f"{found.seen} (not used: {why})", note=not found.ok)


def local_checks(name: str, raw: dict[str, Any], state_dir: Path,
                 suffix: str) -> tuple[list[Check], Check]:
    """The host's findings for a local backend, and its verdict (the last line)."""
    verdict_name = f"local backend can run Jobs{suffix}"
    try:
        config = build.local_config(name, raw)
    except ConfigError as exc:
        return [], Check(name, verdict_name, Found(f"providers.{name}", str(exc),
                                                   f"correct providers.{name} in the config"))
    root = build.root_of(raw, state_dir)
    helpers = {helper: local.find_helper(helper) for helper in local.HELPERS}
    contained = config.sandbox == "bubblewrap"
    shared = contained and config.network == "shared"
    why = "sandbox: none" if not contained else f"network: {config.network}"
    probes: list[tuple[str, Callable[[], Found]]] = [
        ("bubblewrap", lambda: _needed(_bubblewrap(helpers["bwrap"]), contained, why)),
        ("user namespaces", lambda: _needed(hostcheck.user_namespaces(), contained, why)),
        ("slirp4netns", lambda: _needed(_slirp(helpers["slirp4netns"]), shared, why)),
        ("tun device", lambda: _needed(_tun(config), shared, why)),
        ("Landlock", lambda: landlock_scope(contained)),
        ("disk limit", lambda: job_filesystems(config, root)),
        ("memory cgroup", lambda: memory_cgroup(config)),
        ("run user", lambda: run_user(config, contained)),
        ("disk space", lambda: disk_space(config, root)),
        ("inodes", lambda: inodes(root)),
    ]
    checks = [check(name, f"{what}{suffix}", probe) for what, probe in probes]
    return checks, check(name, verdict_name, lambda: can_run_jobs(config, helpers, root))


def can_run_jobs(config: LocalConfig, helpers: dict[str, str | None], root: Path) -> Found:
    """The backend's own verdict: `resolve_sandbox`, as at start-up, on a scratch root
    in the same directory as the real one (only the root's parent is read)."""
    try:
        with _scratch(root.parent) as scratch, _quiet("nodus_gitops.local"):
            sb = local.resolve_sandbox(config, helpers, scratch / "local")
    except ValueError as exc:  # a runAsUser or runAsGroup this machine lacks
        return Found("the backend cannot start", str(exc),
                     "correct runAsUser or runAsGroup in the local backend's config")
    if sb.problem:
        return Found("SandboxUnavailable", sb.problem, sb.fix or SANDBOX_FIX)
    if not sb.contained:
        return Found(sb.describe(), note=True, fix="set sandbox: bubblewrap (the default) "
                     "where the host has it, so that runs are contained")
    return Found(f"bubblewrap ({sb.bwrap}) runs them as {sb.user.describe()}, network: "
                 f"{sb.network}" + (f" through {sb.slirp}" if sb.user_net else ""))


def _bubblewrap(path: str | None) -> hostcheck.Finding:
    found = hostcheck.bubblewrap(path)
    return replace(found, seen=f"{path} ({_version([path, '--version'])})") \
        if path and found.ok else found


def _slirp(path: str | None) -> hostcheck.Finding:
    if path is None:
        return hostcheck.Finding("not installed", sandbox.NO_SLIRP, sandbox.NO_SLIRP_FIX)
    return hostcheck.Finding(f"{path} ({_version([path, '--version'])})")


def _tun(config: LocalConfig) -> hostcheck.Finding:
    try:
        user = runuser.resolve(config.run_as_user, config.run_as_group)
    except ValueError as exc:
        return hostcheck.Finding("no run user", str(exc), "correct runAsUser or runAsGroup")
    return hostcheck.tun_device(user)


def landlock_scope(contained: bool) -> Found:
    missing = landlock.scoping()
    if missing is None:
        seen = (f"ABI {landlock.abi()}: each run is a domain of its own, scoped for abstract "
                "Unix sockets and signals")
        return Found(seen if contained else f"{seen} (not used: sandbox: none)")
    return Found(f"{missing}: runs are not scoped", note=True,
                 fix="Linux 6.12 or later scopes them; meanwhile keep network: shared or "
                     "none (with network: host runs reach the host's abstract sockets)")


def job_filesystems(config: LocalConfig, root: Path) -> Found:
    """`runfs.plan` and, where it offers one, `runfs.probe` in a scratch directory."""
    try:
        disk = runfs.plan(int(config.max_output_bytes), config.disk_limit)  # type: ignore[arg-type]
    except ValueError as exc:
        return Found("no filesystem of their own", str(exc),
                     "run the reconciler as root on a host with loop devices and mkfs.ext4, "
                     "or set diskLimit: auto in the local backend's config")
    if disk["type"] == "filesystem":
        with _scratch(root.parent) as scratch:
            problem = runfs.probe(scratch, disk)
        if problem is None:
            return Found(f"own filesystem: an ext4 image for each Job, loop-mounted "
                         f"({disk['mkfs']})")
        if config.disk_limit == "filesystem":
            return Found("no filesystem of their own", f"diskLimit: filesystem, but {problem}",
                         "set diskLimit: auto, or fix the loop devices named above")
        disk = {"type": "polled", "problem": problem}
    why = disk["problem"]
    fix = ("run the reconciler as root (with loop devices and mkfs.ext4) where Jobs are not "
           "trusted" if "not root" in why else "load the loop module (modprobe loop); in a "
           "container, give it the loop devices" if "loop" in why else "install e2fsprogs "
           "(apt-get install e2fsprogs)" if "mkfs" in why else None)
    return Found(f"polled, because {why}", note=True, fix=fix)


def memory_cgroup(config: LocalConfig) -> Found:
    if config.use_cgroups is False:
        return Found("not used (useCgroups: false): resources.memory is held by RLIMIT_AS",
                     note=True)
    parent = limits.cgroup_parent()
    if parent is not None:
        return Found(f"{parent} (cgroup v1: a run over resources.memory is OOMKilled)")
    if config.use_cgroups:
        return Found("none writable", "use_cgroups is set but the cgroup v1 memory controller "
                     "is not writable", "run the reconciler as root with the cgroup v1 memory "
                     f"controller at {limits.CGROUP_MEMORY}, or remove useCgroups")
    return Found(f"no writable cgroup v1 memory controller ({limits.CGROUP_MEMORY}): "
                 "resources.memory is held by RLIMIT_AS (address space), a weaker limit",
                 note=True)


def run_user(config: LocalConfig, contained: bool) -> Found:
    if not contained:
        return Found("the reconciler's own user (sandbox: none)", note=True)
    try:
        user = runuser.resolve(config.run_as_user, config.run_as_group)
    except ValueError as exc:
        return Found("none", str(exc), "create that user or group, or correct runAsUser or "
                     "runAsGroup in the local backend's config")
    if not user.switch:
        return Found(f"{user.describe()}: runs keep its uid inside their namespaces", note=True)
    if config.run_as_user is None and user.uid == runuser.NOBODY:
        return Found(user.describe(), note=True, fix=NOBODY_FIX)
    return Found(user.describe())


def _bytes(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.1f} MiB"


def disk_space(config: LocalConfig, root: Path) -> Found:
    """Free bytes where the Jobs' files go against what a first Job needs to start: its
    own cap (its image, or maxOutputBytes), a run's log and records, and minFreeBytes."""
    path = _existing(root.absolute())
    free = diskuse.free_bytes(path)
    if free is None:
        return Found(f"{path}: cannot be measured", note=True)
    cap, floor = int(config.max_output_bytes), int(config.min_free_bytes)  # type: ignore[arg-type]
    try:
        own = runfs.plan(cap, config.disk_limit).get("imageBytes", cap)
    except ValueError:
        own = cap
    needed = floor + own + diskuse.log_bytes(1, int(config.max_log_bytes))  # type: ignore[arg-type]
    seen = (f"{_bytes(free)} free under {path}; a Job needs {_bytes(needed)} to start "
            f"(minFreeBytes {_bytes(floor)}, its maxOutputBytes and maxLogBytes)")
    if free < needed:
        return Found(seen, f"{free} bytes free where the Jobs' files go, under the "
                     f"{needed} a new run needs: Jobs wait Queued (DiskPressure)",
                     "free space there, or lower maxOutputBytes, maxLogBytes or minFreeBytes "
                     "in the local backend's config (or give it a root on a larger disk)")
    return Found(seen)


def inodes(root: Path) -> Found:
    path = _existing(root.absolute())
    counted = diskuse.free_inodes(path)
    if counted is None:
        return Found(f"{path}: this file system does not count inodes")
    free, floor = counted
    seen = f"{free} free under {path} (the floor: {floor})"
    if free < floor:
        return Found(seen, f"{free} inodes free where the Jobs' files go, under the floor of "
                     f"{floor} (5% of the disk's, at most {diskuse.MIN_FREE_INODES}): new runs "
                     "wait", "remove files there, or give the local backend a root on "
                     "another disk")
    return Found(seen)
