"""`spec.source.git`: resolve the ref to a commit once, at placement, and unpack that
commit's files (no .git, no submodules, no LFS downloads) into the run's source
directory, within the platform's archive limits.

A repo is only ever a GitHub `owner/name` (fetched from https://github.com) or an
https:// URL, never a path on this machine, and a ref never starts with `-`. Git runs
inside the run's sandbox, as the run user: every call restricts transports to https
(`protocol.allow=never`, `protocol.https.allow=always`) and puts `--` before its
positional arguments. The compressed limit is the size of the pack the fetch receives
(the commit's objects, zlib-compressed, as in a compressed archive): git keeps the pack
as one file (`fetch.unpackLimit=1`) written under a file-size limit of 100 MiB, so a
larger one stops as it arrives, on a tmpfs (contained) or the run's disk alike. The
archive is unpacked in the same sandbox (`untar.py`, tarfile's `data` filter, counting
entries and bytes as they come), where the checkout is the only writable directory of
the host: a server can send trees no honest host would, and the filter has had bypasses.

Where the fetch may go is the reconciler's to say, not the manifest's:

- the URL's host is resolved once, here, and every address checked before anything
  connects (`fetch_addresses`: loopback, link-local and the like never; a private
  address only for a host in `sourceHosts`; nothing in `sourceDenyNetworks`). git is
  then pinned to the addresses checked
  (`http.curloptResolve`) and follows no redirect (`http.followRedirects=false`), so
  neither a second resolution (DNS rebinding) nor a server leads it elsewhere;
- contained, with slirp4netns at hand, git runs in a network namespace of its own joined
  to the world by slirp4netns with `--disable-host-loopback`, as a run's `network:
  shared` (`usernet`: bubblewrap holds on `--block-fd` until slirp4netns, started on its
  pid, is ready), whatever the Job's `network`, and with no name resolution at all (an
  empty resolv.conf: it connects only where it was pinned); otherwise (`sandbox: none`,
  no slirp4netns) on the host's network, the rules above still holding;
- every failure of the network (an address refused, a name that does not resolve, a
  closed port, TLS, an HTTP error, the time limit) says one line,
  `cannot fetch URL: unreachable or refused` (`SourceUnreachable`), so that a Job's
  message tells nothing of what listens where; its detail goes to the reconciler's log.
  What follows a Git exchange that worked (the ref not found, the limits, an archive
  refused) says what it is.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from nodus_gitops.providers.local import child, procs, sandbox, untar, usernet
from nodus_gitops.providers.local.fetch_addresses import (
    AddressRefused,
    AddressRules,
    Resolver,
    checked_addresses,
)
from nodus_gitops.providers.local.runuser import RunUser
from nodus_gitops.providers.local.sandbox import Mount, Sandbox
from nodus_gitops.providers.local.spec import GitSource

MAX_COMPRESSED = 100 << 20
MAX_EXPANDED = 512 << 20
MAX_ENTRIES = 10_000
FETCH_SECONDS = 300.0
FETCH_DIR = "/nodus/fetch"
# The fetch's tmpfs: the pack at its limit, with room for its index and the refs.
FETCH_SCRATCH = MAX_COMPRESSED + (16 << 20)
TOO_LARGE = 5  # the fetch script's exit status for a pack at the compressed limit
CA_MOUNT = "/nodus/.ca-bundle.pem"
UNTAR_MOUNT = "/nodus/.untar.py"
CHECKOUT_MOUNT = "/nodus/checkout"
UNTAR = str(Path(untar.__file__).resolve())
RESOLV_MOUNT = "/etc/resolv.conf"
NOT_FOUND = 3  # the fetch script's exit status for a ref the repository does not have

# GitHub owner names: letters, digits and '-', not starting with '-'; repository names
# also take '.' and '_', but are never '.' or '..'.
OWNER_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]*/(?!\.\.?$)[A-Za-z0-9_.][A-Za-z0-9_.-]*$")
# https only, without user or password (credentials never belong in a manifest).
HTTPS_URL = re.compile(r"^https://[A-Za-z0-9.-]+(?::[0-9]{1,5})?(?:/[A-Za-z0-9_.~%+-]+)+/?$")
# A ref is one word that does not start with '-' (which git would read as an option).
# schemas/defs.schema.json says the same (its patterns also refuse a final newline).
REF = re.compile(r"^(?!-)[^\s\x00-\x1f\x7f]+$")

# $1 git (absolute), $2 the https URL, $3 the ref, $4 Python, $5 untar.py, $6 the
# checkout, $7 and $8 the entry and byte limits, $9 the compressed limit. The commit goes
# to stderr, then what untar.py says (entries skipped, or why it refused the archive:
# exit status 4); a pack that reached the compressed limit is exit status 5.
_SCRIPT = r"""
set -eu
g() { "$GIT" -c protocol.allow=never -c protocol.https.allow=always "$@"; }
# A fetch whose pack file may not grow past the limit (ulimit -f counts 512-byte blocks
# in a POSIX shell; an ignored SIGXFSZ makes the write fail instead of killing git).
fetch() { (ulimit -f $(($LIMIT / 512)); trap '' XFSZ; g -c fetch.unpackLimit=1 fetch -q "$@"); }
too_large() { [ -n "$(find . -type f -size +$(($LIMIT - 1))c)" ]; }
GIT=$1 LIMIT=$9
g init -q --bare .
if fetch --depth 1 -- "$2" "$3" 2>first-try.err; then
  c=$(g rev-parse --verify -q 'FETCH_HEAD^{commit}') || c=
else
  too_large && exit 5
  fetch -- "$2" '+refs/heads/*:refs/heads/*' '+refs/tags/*:refs/tags/*' || {
    too_large && exit 5; exit 2; }
  if ! c=$(g rev-parse --verify -q --end-of-options "$3^{commit}"); then
    cat first-try.err >&2
    exit 3
  fi
fi
[ -n "$c" ] || { echo "nodus-refused $3 is not a commit" >&2; exit 3; }
echo "nodus-commit $c" >&2
mkfifo archive.fifo
g archive --format=tar -- "$c" > archive.fifo &
archiver=$!
if ! "$4" -I -S "$5" "$6" "$7" "$8" < archive.fifo; then
  kill "$archiver" 2>/dev/null || true
  exit 4
fi
wait "$archiver"
"""


class SourceFetchError(Exception):
    """The repository or ref could not be fetched; the message says which."""


class SourceUnreachable(SourceFetchError):
    """A failure of the network, whatever it was: the message is the one line they all
    say; `detail` (the address, what git said) is for the reconciler's log only."""

    def __init__(self, url: str, detail: str):
        super().__init__(f"cannot fetch {url}: unreachable or refused")
        self.detail = detail


class FetchStopped(SourceFetchError):
    """The fetch was ended because the Job must stop (`why`: what `stop` said)."""

    def __init__(self, why: Any):
        super().__init__("the fetch was stopped")
        self.why = why


Stop = Callable[[], Any]  # polled while git runs: a reason to end it now, else None
STOP_POLL_SECONDS = 0.5


class FetchNetworkUnavailable(SourceFetchError):
    """slirp4netns could not give a contained fetch its network: this host's doing, never
    the repository's (the message says what it printed)."""


def git_settings(host: str, port: int, addresses: list[str],
                 ca_bundle: str | None) -> dict[str, str]:
    """git's configuration for one fetch, as GIT_CONFIG_* variables: no redirect, the
    checked addresses pinned for the URL's host (an address literal needs none)."""
    pairs = [("http.followRedirects", "false")]
    if ca_bundle:
        pairs.append(("http.sslCAInfo", ca_bundle))
    try:
        ipaddress.ip_address(host)
    except ValueError:
        listed = ",".join(f"[{a}]" if ":" in a else a for a in addresses)
        for name in dict.fromkeys((host, host.rstrip("."))):
            pairs.append(("http.curloptResolve", f"{name}:{port}:{listed}"))
    env = {"GIT_CONFIG_COUNT": str(len(pairs))}
    for n, (key, value) in enumerate(pairs):
        env[f"GIT_CONFIG_KEY_{n}"], env[f"GIT_CONFIG_VALUE_{n}"] = key, value
    return env


def repo_url(repo: str) -> str:
    """The https URL of `repo`; SourceFetchError for anything else (paths included)."""
    if OWNER_REPO.fullmatch(repo):
        return f"https://github.com/{repo.removesuffix('.git')}.git"
    if HTTPS_URL.fullmatch(repo):
        return repo
    raise SourceFetchError(f"repo {repo!r} is not owner/repository or an https:// URL")


def check_ref(ref: str) -> str:
    if not REF.fullmatch(ref):
        raise SourceFetchError(f"ref {ref!r} is not a branch, tag or commit (a ref never "
                               "starts with '-' or holds spaces)")
    return ref


def _report(err: str) -> tuple[str | None, int, str]:
    """(the commit, entries skipped, the last thing said) from the script's stderr."""
    commit, skipped, said = None, 0, []
    for line in err.splitlines():
        if line.startswith("nodus-commit "):
            commit = line.split()[1]
        elif line.startswith("nodus-skipped "):
            skipped = int(line.split()[1])
        elif line.startswith("nodus-refused "):
            said.append(line.removeprefix("nodus-refused "))
        elif line.strip():
            said.append(line.strip())
    return commit, skipped, said[-1] if said else ""


def extract_limited(stream: IO[bytes], dest: Path, *, max_entries: int = MAX_ENTRIES,
                    max_bytes: int = MAX_EXPANDED) -> int:
    """`untar.extract_limited` with the platform's limits; SourceFetchError past one."""
    try:
        return untar.extract_limited(stream, dest, max_entries=max_entries,
                                     max_bytes=max_bytes)
    except untar.ArchiveRefused as exc:
        raise SourceFetchError(str(exc)) from None


def fetch(source: GitSource, dest: Path, sb: Sandbox, git: str | None,
          ca_bundle: str | None = None, *, rules: AddressRules | None = None,
          slirp: str | None = None,
          getaddrinfo: Resolver = socket.getaddrinfo,
          stop: Stop | None = None) -> tuple[dict[str, str], int]:
    """Unpack `source` at its resolved commit into `dest`. Returns (status.source, how
    many entries the data filter left out). `slirp`: slirp4netns, for a contained
    fetch's network of its own (None: the host's). `stop` is asked every half second
    while git runs: what it returns (the Job was cancelled, its timeout passed) ends the
    fetch at once with FetchStopped."""
    url = repo_url(source.repo)
    ref = check_ref(source.ref)
    try:
        host, port, addresses = checked_addresses(url, rules or AddressRules(), getaddrinfo)
    except AddressRefused as exc:
        raise SourceUnreachable(url, str(exc)) from None
    if git is None:
        raise SourceFetchError("git is not installed on the reconciler's PATH")
    git = os.path.realpath(git)
    own_net = sb.contained and slirp is not None
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C", "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_TERMINAL_PROMPT": "0",
           **git_settings(host, port, addresses,
                          (CA_MOUNT if sb.contained else ca_bundle) if ca_bundle else None)}
    work = Path(tempfile.mkdtemp(prefix=".fetch-", dir=dest.parent))
    unpacked = work / "files"
    unpacked.mkdir(mode=0o700)
    limits = [str(MAX_ENTRIES), str(MAX_EXPANDED), str(MAX_COMPRESSED)]
    net = None
    try:
        if sb.contained:
            if not git.startswith("/usr/"):
                raise SourceFetchError(f"git ({git}) is outside /usr: the sandbox cannot run it")
            if sb.user.switch:
                os.chown(unpacked, sb.user.uid, sb.user.gid)
            mounts = [Mount(UNTAR, UNTAR_MOUNT), Mount(str(unpacked), CHECKOUT_MOUNT, True)]
            if ca_bundle:
                mounts.append(Mount(ca_bundle, CA_MOUNT))
            if own_net:  # no name resolution: git connects only where it was pinned
                (work / "resolv.conf").touch(0o644)
                mounts.append(Mount(str(work / "resolv.conf"), RESOLV_MOUNT))
            argv, stage = sandbox.bwrap_argv(sb, mounts, cwd=FETCH_DIR, tmp_bytes=16 << 20,
                                             share_net=True, own_resolv=own_net,
                                             scratch=((FETCH_DIR, FETCH_SCRATCH),))
            if own_net:
                assert slirp is not None
                net = _OwnNetwork(slirp, sb.user)
                argv = net.argv(argv)
            argv = [*argv, "--", "/bin/sh", "-c", _SCRIPT, "nodus-fetch", git, url, ref,
                    sys.executable, UNTAR_MOUNT, CHECKOUT_MOUNT, *limits]
            preexec = child.make_preexec(user=sb.user, stage=stage, own_net=own_net)
            cwd = "/"
        else:
            scratch = work / "git"
            scratch.mkdir()
            argv = ["/bin/sh", "-c", _SCRIPT, "nodus-fetch", git, url, ref, sys.executable,
                    UNTAR, str(unpacked), *limits]
            preexec, cwd = child.make_preexec(user=None), str(scratch)
        commit, skipped = _run(argv, env, cwd, preexec, url, addresses, net, stop)
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(unpacked, dest)
    finally:
        if net is not None:
            net.close()
        shutil.rmtree(work, ignore_errors=True)
    return {"repo": source.repo, "ref": source.ref, "commit": commit}, skipped


class _OwnNetwork:
    """The fetch's network namespace of its own, as a run's (`runs`, `usernet`): the
    child makes it (`child.make_preexec(own_net=True)`), bubblewrap keeps it
    (`--share-net`) and waits on `--block-fd` until slirp4netns, started on its pid,
    writes there that the network is up. We hold a write end of that pipe until the
    fetch ends, so a slirp4netns that dies before it is ready never lets git start."""

    def __init__(self, slirp: str, user: RunUser):
        self.path, self.user = slirp, user
        self.block_r, self.hold_w = os.pipe2(os.O_CLOEXEC)
        self.slirp: usernet.Slirp | None = None

    def argv(self, argv: list[str]) -> list[str]:
        """bubblewrap's argv, waiting for the network, as the run user (it starts as root
        of the child's user namespace)."""
        return [argv[0], "--block-fd", str(self.block_r), "--uid", str(self.user.uid),
                "--gid", str(self.user.gid), *argv[1:]]

    @property
    def pass_fds(self) -> tuple[int, ...]:
        return (self.block_r,) if self.block_r >= 0 else ()

    def start(self, pid: int) -> None:
        """slirp4netns on bubblewrap's namespaces (`pid`); OSError when it cannot start."""
        self._close_block()
        self.slirp = usernet.start(self.path, pid, self.user, self.hold_w)

    def _close_block(self) -> None:
        if self.block_r >= 0:
            os.close(self.block_r)
            self.block_r = -1

    def close(self) -> None:
        self._close_block()
        if self.hold_w >= 0:
            os.close(self.hold_w)
            self.hold_w = -1
        if self.slirp is not None:
            self.slirp.stop()


def _run(argv: list[str], env: dict[str, str], cwd: str, preexec: Callable[[], None],
         url: str, addresses: list[str], net: _OwnNetwork | None,
         stop: Stop | None = None) -> tuple[str, int]:
    """Run the fetch script: (commit, entries skipped)."""
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err, start_new_session=True,
                                preexec_fn=preexec, pass_fds=net.pass_fds if net else ())
        ended, stopped = _wait(proc, net, stop)
        err.seek(0)
        commit, skipped, message = _report(err.read().decode(errors="replace"))
    rc = proc.returncode
    if stopped is not None:
        raise FetchStopped(stopped)
    if ended is not None:  # the fetch's own network could not be had: the host's doing
        raise FetchNetworkUnavailable(f"the fetch's network of its own (slirp4netns) {ended}")
    if rc == TOO_LARGE or (rc not in (untar.REFUSED, 0) and "No space left" in message):
        raise SourceFetchError(f"the source is larger than {MAX_COMPRESSED >> 20} MiB "
                               "compressed")
    if rc in (untar.REFUSED, NOT_FOUND) or (rc == child.SETUP_FAILED
                                            and message.startswith("nodus: cannot set up")):
        raise SourceFetchError(message or f"git exited with code {rc}")
    if commit is None or rc != 0:
        how = "was stopped at the time limit" if rc == -signal.SIGKILL else f"exited {rc}"
        raise SourceUnreachable(url, f"git, connecting to {', '.join(addresses)}, {how}: "
                                f"{message or 'no message'}")
    return commit, skipped


def _wait(proc: subprocess.Popen, net: _OwnNetwork | None,
          stop: Stop | None = None) -> tuple[str | None, Any]:
    """Wait for the fetch to end (killed at FETCH_SECONDS, or when `stop` gives a
    reason): (what became of slirp4netns when it ended the fetch, None when it did not;
    what `stop` said, None when it said nothing)."""
    deadline = time.monotonic() + FETCH_SECONDS
    problem, stopped = None, None
    if net is not None:
        try:
            net.start(proc.pid)
        except (OSError, subprocess.SubprocessError) as exc:
            problem = f"could not start: {exc}"
    watched = [os.pidfd_open(proc.pid)]
    try:
        if net is not None and net.slirp is not None:
            with contextlib.suppress(OSError):
                watched.append(os.pidfd_open(net.slirp.pid))
        while problem is None and proc.poll() is None:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            select.select(watched, [], [], min(left, STOP_POLL_SECONDS) if stop else left)
            if stop is not None and proc.poll() is None and (stopped := stop()) is not None:
                break
            if net is not None and net.slirp is not None and net.slirp.ended() \
                    and proc.poll() is None:
                problem = (f"ended (exit status {net.slirp.proc.returncode}) before the "
                           f"fetch did: {net.slirp.said()}")
    finally:
        for fd in watched:
            os.close(fd)
        if proc.poll() is None:
            procs.signal_group(proc.pid, signal.SIGKILL)
        proc.wait()
    return problem, stopped
