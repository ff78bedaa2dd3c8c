"""`spec.source.git`: resolve the ref to a commit once, at placement, and unpack that
commit's files (no .git, no submodules, no LFS downloads) into the run's source
directory, within the platform's archive limits.

A repo is only ever a GitHub `owner/name` (fetched from https://github.com) or an
https:// URL, never a path on this machine, and a ref never starts with `-`. Git runs
inside the run's sandbox, as the run user, in namespaces of its own with the network
shared: every call restricts transports to https (`protocol.allow=never`,
`protocol.https.allow=always`) and puts `--` before its positional arguments, and the
objects land on a tmpfs the size of the compressed limit. Its archive streams out to
the supervisor, which unpacks it entry by entry with tarfile's `data` filter, counting
entries and bytes as they come.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO

from providers.local import child, sandbox
from providers.local.sandbox import Mount, Sandbox
from providers.local.spec import GitSource

MAX_COMPRESSED = 100 << 20
MAX_EXPANDED = 512 << 20
MAX_ENTRIES = 10_000
FETCH_SECONDS = 300.0
FETCH_DIR = "/nodus/fetch"
CA_MOUNT = "/nodus/.ca-bundle.pem"

# GitHub owner names: letters, digits and '-', not starting with '-'; repository names
# also take '.' and '_', but are never '.' or '..'.
OWNER_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]*/(?!\.\.?$)[A-Za-z0-9_.][A-Za-z0-9_.-]*$")
# https only, without user or password (credentials never belong in a manifest).
HTTPS_URL = re.compile(r"^https://[A-Za-z0-9.-]+(?::[0-9]{1,5})?(?:/[A-Za-z0-9_.~%+-]+)+/?$")
# A ref is one word that does not start with '-' (which git would read as an option).
# schemas/defs.schema.json says the same (its patterns also refuse a final newline).
REF = re.compile(r"^(?!-)[^\s\x00-\x1f\x7f]+$")

# $1 git (absolute), $2 the https URL, $3 the ref. The commit goes to stderr's last
# line, the archive to stdout.
_SCRIPT = r"""
set -eu
g() { "$GIT" -c protocol.allow=never -c protocol.https.allow=always "$@"; }
GIT=$1
g init -q --bare .
if g fetch -q --depth 1 -- "$2" "$3" 2>first-try.err; then
  c=$(g rev-parse --verify -q 'FETCH_HEAD^{commit}')
else
  g fetch -q -- "$2" '+refs/heads/*:refs/heads/*' '+refs/tags/*:refs/tags/*'
  if ! c=$(g rev-parse --verify -q --end-of-options "$3^{commit}"); then
    cat first-try.err >&2
    exit 3
  fi
fi
echo "nodus-commit $c" >&2
g archive --format=tar -- "$c"
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


def _commit_and_message(err: str) -> tuple[str | None, str]:
    commit, said = None, []
    for line in err.splitlines():
        if line.startswith("nodus-commit "):
            commit = line.split()[1]
        elif line.strip():
            said.append(line.strip())
    return commit, said[-1] if said else ""


def extract_limited(stream: IO[bytes], dest: Path, *, max_entries: int = MAX_ENTRIES,
                    max_bytes: int = MAX_EXPANDED) -> int:
    """Unpack a tar stream into `dest` with tarfile's data filter, refusing it past
    `max_entries` entries or `max_bytes` of files. Returns how many entries the filter
    left out (links leaving the checkout, absolute links)."""
    entries = expanded = skipped = 0
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for member in tar:
                entries += 1
                if entries > max_entries:
                    raise SourceFetchError(f"the source has more than {max_entries} entries")
                if member.isfile():
                    expanded += member.size
                    if expanded > max_bytes:
                        raise SourceFetchError(
                            f"the source expands to more than {max_bytes >> 20} MiB")
                try:
                    tar.extract(member, dest, filter="data")
                except tarfile.FilterError:
                    skipped += 1
    except tarfile.TarError as exc:
        raise SourceFetchError(f"the source archive is not readable: {exc}") from None
    return skipped


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    os.chown(root, uid, gid)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.chown(os.path.join(dirpath, name), uid, gid, follow_symlinks=False)


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
    unpacked.mkdir()
    try:
        if sb.contained:
            if not git.startswith("/usr/"):
                raise SourceFetchError(f"git ({git}) is outside /usr: the sandbox cannot run it")
            mounts = [Mount(ca_bundle, CA_MOUNT)] if ca_bundle else []
            argv, stage = sandbox.bwrap_argv(sb, mounts, cwd="/", tmp_bytes=16 << 20,
                                             share_net=True)
            argv = [*argv, "--size", str(MAX_COMPRESSED), "--tmpfs", FETCH_DIR, "--chdir",
                    FETCH_DIR, "--", "/bin/sh", "-c", _SCRIPT, "nodus-fetch", git, url, ref]
            preexec, cwd = child.make_preexec(user=sb.user, stage=stage), "/"
        else:
            scratch = work / "git"
            scratch.mkdir()
            argv = ["/bin/sh", "-c", _SCRIPT, "nodus-fetch", git, url, ref]
            preexec, cwd = child.make_preexec(user=None), str(scratch)
        commit, skipped = _run(argv, env, cwd, preexec, unpacked)
        if sb.user.switch:
            _chown_tree(unpacked, sb.user.uid, sb.user.gid)
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(unpacked, dest)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"repo": source.repo, "ref": source.ref, "commit": commit}, skipped


def _run(argv: list[str], env: dict[str, str], cwd: str, preexec: Callable[[], None],
         dest: Path) -> tuple[str, int]:
    """Run the fetch script, unpacking its archive into `dest`: (commit, skipped)."""
    failure: SourceFetchError | None = None
    skipped = 0
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=err, start_new_session=True,
                                preexec_fn=preexec)
        timer = threading.Timer(FETCH_SECONDS, proc.kill)
        timer.start()
        try:
            assert proc.stdout is not None
            try:
                skipped = extract_limited(proc.stdout, dest)
            except SourceFetchError as exc:
                proc.kill()
                failure = exc
            proc.stdout.close()
            rc = proc.wait()
        finally:
            timer.cancel()
        err.seek(0)
        commit, message = _commit_and_message(err.read().decode(errors="replace"))
    if commit is None or (rc != 0 and failure is None):
        if "No space left" in message:
            message = f"the source is larger than {MAX_COMPRESSED >> 20} MiB compressed"
        raise SourceFetchError(message or f"git exited with code {rc}")
    if failure is not None:
        raise failure
    return commit, skipped
