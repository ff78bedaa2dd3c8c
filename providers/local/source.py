"""`spec.source.git`: resolve the ref to a commit once, at placement, and unpack that
commit's files (no .git, no submodules, no LFS downloads) into the run's source
directory, within the platform's archive limits. Uses the git command line; a repo is
`owner/name` (GitHub), an URL, or a local path."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from providers.local.spec import GitSource

MAX_ENTRIES = 10_000
MAX_EXPANDED = 512 << 20
_OWNER_REPO = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")


class SourceFetchError(Exception):
    """The repository or ref could not be fetched; the message says which."""


def repo_url(repo: str) -> str:
    if "://" in repo or repo.startswith("git@") or os.path.isabs(repo) or os.path.exists(repo):
        return repo
    if _OWNER_REPO.match(repo):
        return f"https://github.com/{repo.removesuffix('.git')}.git"
    return repo


def _git(args: list[str], cwd: Path, timeout: float = 120) -> str:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "GIT_TERMINAL_PROMPT": "0",
        "HOME": os.environ.get("HOME", "/"),
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    try:
        done = subprocess.run(
            ["git", *args], cwd=cwd, env=env, capture_output=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SourceFetchError(f"git {args[0]}: {exc}") from None
    if done.returncode != 0:
        last = (done.stderr.decode(errors="replace").strip().splitlines() or ["failed"])[-1]
        raise SourceFetchError(last)
    return done.stdout.decode(errors="replace")


def fetch(source: GitSource, dest: Path) -> dict[str, str]:
    """Unpack `source` at its resolved commit into `dest`; returns status.source."""
    url = repo_url(source.repo)
    with tempfile.TemporaryDirectory(prefix="nodus-src-") as tmp:
        git_dir = Path(tmp)
        _git(["init", "-q", "--bare", "."], git_dir)
        try:
            _git(["fetch", "-q", "--depth", "1", url, source.ref], git_dir)
        except SourceFetchError:
            # a commit id that is not a branch or tag tip: fetch everything, then look it up
            _git(
                [
                    "fetch",
                    "-q",
                    url,
                    "+refs/heads/*:refs/remotes/origin/*",
                    "+refs/tags/*:refs/tags/*",
                ],
                git_dir,
            )
            commit = _git(
                ["rev-parse", "--verify", "-q", f"{source.ref}^{{commit}}"], git_dir
            ).strip()
        else:
            commit = _git(["rev-parse", "FETCH_HEAD^{commit}"], git_dir).strip()
        archive = git_dir / "src.tar"
        with open(archive, "wb") as out:
            done = subprocess.run(
                ["git", "archive", "--format=tar", commit],
                cwd=git_dir,
                stdout=out,
                stderr=subprocess.PIPE,
                check=False,
            )
        if done.returncode != 0:
            raise SourceFetchError(done.stderr.decode(errors="replace").strip())
        _extract(archive, dest)
    return {"repo": source.repo, "ref": source.ref, "commit": commit}


def _extract(archive: Path, dest: Path) -> None:
    import tarfile  # only Jobs with source.git need it

    with tarfile.open(archive) as tar:
        members = tar.getmembers()
        if len(members) > MAX_ENTRIES:
            raise SourceFetchError(
                f"the source has {len(members)} entries; the limit is {MAX_ENTRIES}"
            )
        expanded = sum(m.size for m in members if m.isfile())
        if expanded > MAX_EXPANDED:
            raise SourceFetchError(
                f"the source expands to {expanded >> 20} MiB; the limit is 512 MiB"
            )
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        tar.extractall(dest, filter="data")
