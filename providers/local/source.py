"""`spec.source.git`: resolve the ref to a commit once, at placement, and unpack that
commit's files (no .git, no submodules, no LFS downloads) into the run's source
directory, within the platform's archive limits.

A repo is only ever a GitHub `owner/name` (fetched from https://github.com) or an
https:// URL, never a path on this machine, and a ref never starts with `-`. Git runs
inside the run's sandbox, as the run user, in namespaces of its own with the network
shared: every call restricts transports to https (`protocol.allow=never`,
`protocol.https.allow=always`) and puts `--` before its positional arguments. The
compressed limit is the size of the pack the fetch receives (the commit's objects,
zlib-compressed, as in a compressed archive): git keeps the pack as one file
(`fetch.unpackLimit=1`) written under a file-size limit of 100 MiB, so a larger one stops
as it arrives, on a tmpfs (contained) or the run's disk alike. The archive is unpacked in
the same sandbox (`untar.py`, tarfile's `data` filter, counting entries and bytes as
they come), where the checkout is the only writable directory of the host: a server
can send trees no honest host would, and the filter has had bypasses.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO

from nodus_gitops.providers.local import child, procs, sandbox, untar
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
  c=$(g rev-parse --verify -q 'FETCH_HEAD^{commit}')
else
  too_large && exit 5
  fetch -- "$2" '+refs/heads/*:refs/heads/*' '+refs/tags/*:refs/tags/*' || {
    too_large && exit 5; exit 2; }
  if ! c=$(g rev-parse --verify -q --end-of-options "$3^{commit}"); then
    cat first-try.err >&2
    exit 3
  fi
fi
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
          ca_bundle: str | None = None) -> tuple[dict[str, str], int]:
    """Unpack `source` at its resolved commit into `dest`. Returns (status.source, how
    many entries the data filter left out)."""
    url = repo_url(source.repo)
    ref = check_ref(source.ref)
    if git is None:
        raise SourceFetchError("git is not installed on the reconciler's PATH")
    git = os.path.realpath(git)
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C", "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_COUNT": "0"}
    if ca_bundle:
        env.update(GIT_CONFIG_COUNT="1", GIT_CONFIG_KEY_0="http.sslCAInfo",
                   GIT_CONFIG_VALUE_0=CA_MOUNT if sb.contained else ca_bundle)
    work = Path(tempfile.mkdtemp(prefix=".fetch-", dir=dest.parent))
    unpacked = work / "files"
    unpacked.mkdir(mode=0o700)
    limits = [str(MAX_ENTRIES), str(MAX_EXPANDED), str(MAX_COMPRESSED)]
    try:
        if sb.contained:
            if not git.startswith("/usr/"):
                raise SourceFetchError(f"git ({git}) is outside /usr: the sandbox cannot run it")
            if sb.user.switch:
                os.chown(unpacked, sb.user.uid, sb.user.gid)
            mounts = [Mount(UNTAR, UNTAR_MOUNT), Mount(str(unpacked), CHECKOUT_MOUNT, True)]
            if ca_bundle:
                mounts.append(Mount(ca_bundle, CA_MOUNT))
            argv, stage = sandbox.bwrap_argv(sb, mounts, cwd=FETCH_DIR, tmp_bytes=16 << 20,
                                             share_net=True,
                                             scratch=((FETCH_DIR, FETCH_SCRATCH),))
            argv = [*argv, "--", "/bin/sh", "-c", _SCRIPT, "nodus-fetch", git, url, ref,
                    sys.executable, UNTAR_MOUNT, CHECKOUT_MOUNT, *limits]
            preexec, cwd = child.make_preexec(user=sb.user, stage=stage), "/"
        else:
            scratch = work / "git"
            scratch.mkdir()
            argv = ["/bin/sh", "-c", _SCRIPT, "nodus-fetch", git, url, ref, sys.executable,
                    UNTAR, str(unpacked), *limits]
            preexec, cwd = child.make_preexec(user=None), str(scratch)
        commit, skipped = _run(argv, env, cwd, preexec)
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(unpacked, dest)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"repo": source.repo, "ref": source.ref, "commit": commit}, skipped


def _run(argv: list[str], env: dict[str, str], cwd: str,
         preexec: Callable[[], None]) -> tuple[str, int]:
    """Run the fetch script: (commit, entries skipped)."""
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err, start_new_session=True,
                                preexec_fn=preexec)
        timer = threading.Timer(FETCH_SECONDS, procs.signal_group, (proc.pid, signal.SIGKILL))
        timer.start()
        try:
            rc = proc.wait()
        finally:
            timer.cancel()
        err.seek(0)
        commit, skipped, message = _report(err.read().decode(errors="replace"))
    if commit is None or rc != 0:
        if rc == TOO_LARGE or (rc != untar.REFUSED and "No space left" in message):
            message = f"the source is larger than {MAX_COMPRESSED >> 20} MiB compressed"
        raise SourceFetchError(message or f"git exited with code {rc}")
    return commit, skipped
