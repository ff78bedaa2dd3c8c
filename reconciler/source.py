"""The Git source: follow one branch of one remote and read its manifests from Git objects.

One bare mirror per remote holds the objects. Watching a branch costs one `list_heads`
round trip; a fetch happens only when the branch moved. Manifests and tree diffs are read
straight from the object database: no work tree is ever checked out, and nothing here
shells out to `git`. Credentials reach libgit2 only through callbacks, never through the
stored remote URL, and never appear in messages or reprs.
"""

from __future__ import annotations

import copy
import fnmatch
import hashlib
import logging
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TypeVar
from urllib.parse import unquote, urlsplit

import pygit2
from nodus_gitops.floor.errors import ConfigError, SourceError
from nodus_gitops.floor.redaction import scrub, url_without_userinfo
from nodus_gitops.floor.retry import Backoff as Backoff  # re-exported (sync.py)
from nodus_gitops.hosts.credentials import Credentials, split_userinfo
from nodus_gitops.manifests import MAX_FILE_BYTES, Oversized, is_manifest_path
from pygit2.enums import CredentialType, FileMode, RepositoryOpenFlag

MAX_AUTH_ATTEMPTS = 3  # libgit2 re-asks forever when a server keeps answering 401
_FILE_MODES = (FileMode.BLOB, FileMode.BLOB_EXECUTABLE)  # symlinks/submodules aren't manifests
_SCP_LIKE = re.compile(r"^[^/]*:")  # git's rule: a colon before the first slash means host:path
_MIRROR_REFSPEC = "+refs/heads/*:refs/remotes/origin/*"  # fetches name their branch anyway
# libgit2 keeps every fetch as a pack of its own and never repacks (git's `gc --auto`
# would): past this many packs the mirror is packed into one, since every object lookup
# searches each pack and fetches slow down as they pile up.
MAX_MIRROR_PACKS = 50

log = logging.getLogger("nodus_gitops.source")
_T = TypeVar("_T")


@dataclass(frozen=True)
class ChangedPaths:
    """YAML files that differ between two commits; a rename is a delete plus an add."""

    added: tuple[str, ...] = ()
    modified: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()


@dataclass(frozen=True)
class CommitInfo:
    sha: str
    author: str
    email: str
    message: str  # first line only
    time: datetime  # author time, in the author's UTC offset


def _split_url(url: str) -> tuple[str, str | None, str | None]:
    """(URL to store in the mirror's config, user, password) for any URL git accepts.

    User info moves to the callbacks so no token lands in the mirror's config (see
    `split_userinfo`). Local paths become absolute so the same remote always maps to the
    same mirror.
    """
    if "://" not in url and not _SCP_LIKE.match(url):
        return str(Path(url).expanduser().resolve()), None, None
    return split_userinfo(url)


# libgit2 waits forever on a remote that accepts a connection and then stalls; these are
# process-wide, so they are set once, before the first network call (milliseconds).
CONNECT_TIMEOUT_MS = 10_000
IO_TIMEOUT_MS = 30_000


def set_network_timeouts(connect_ms: int = CONNECT_TIMEOUT_MS,
                         io_ms: int = IO_TIMEOUT_MS) -> None:
    pygit2.settings.server_connect_timeout = connect_ms
    pygit2.settings.server_timeout = io_ms


def _local_path(url: str) -> str | None:
    """The path of a remote given as a path (or file:// URL) on this machine, else None."""
    if url.startswith("file://"):
        return unquote(urlsplit(url).path)
    if "://" in url or _SCP_LIKE.match(url):
        return None
    return url


def _mirror_name(url: str) -> str:
    """A readable, collision-free directory name: `<repo>-<sha256(url)[:16]>.git`."""
    stem = re.split(r"[/:]", url.rstrip("/"))[-1].removesuffix(".git")
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", stem)[:40] or "repo"
    return f"{stem}-{hashlib.sha256(url.encode()).hexdigest()[:16]}.git"


def _clean_path(path: str) -> str:
    return "/".join(p for p in path.replace("\\", "/").split("/") if p not in ("", "."))


def _is_manifest(name: str, mode: int, prefix: str) -> bool:
    under = not prefix or name.startswith(prefix + "/")
    return mode in _FILE_MODES and is_manifest_path(name) and under


def _subtree(tree: pygit2.Tree, prefix: str) -> pygit2.Tree | None:
    """The folder `prefix` of `tree`, or None where there is none (missing, or a file)."""
    if not prefix:
        return tree
    try:
        found = tree[prefix]
    except KeyError:
        return None
    return found if isinstance(found, pygit2.Tree) else None


def _diff_trees(old: pygit2.Tree | None, new: pygit2.Tree | None,
                base: str) -> Iterator[tuple[str, str]]:
    """`(added|modified|deleted, path)` for each manifest file that differs between two
    folders, in no particular order.

    A subfolder whose object id is the same on both sides is skipped whole, so a change
    of one file among 10,000 reads only the folders on its path; libgit2's tree diff
    walks every entry of both trees instead. A stack, not recursion: any depth is fine.
    """
    folders: list[tuple[pygit2.Tree | None, pygit2.Tree | None, str]] = [(old, new, base)]
    while folders:
        old, new, base = folders.pop()
        before = {e.name: e for e in old} if old is not None else {}
        after = {e.name: e for e in new} if new is not None else {}
        for name in before.keys() | after.keys():
            was, now = before.get(name), after.get(name)
            if was is not None and now is not None and was.id == now.id \
                    and was.filemode == now.filemode:
                continue
            path = f"{base}/{name}" if base else name
            was_tree = was if isinstance(was, pygit2.Tree) else None
            now_tree = now if isinstance(now, pygit2.Tree) else None
            if was_tree is not None or now_tree is not None:
                folders.append((was_tree, now_tree, path))
            was_file = was is not None and was_tree is None and _is_manifest(
                path, was.filemode, "")
            now_file = now is not None and now_tree is None and _is_manifest(
                path, now.filemode, "")
            if was_file and now_file:
                if was.id != now.id:  # a mode-only change is not a manifest change
                    yield "modified", path
            elif now_file:
                yield "added", path
            elif was_file:
                yield "deleted", path


class _Callbacks(pygit2.RemoteCallbacks):
    """Answers libgit2's credential requests for one network operation, at most 3 times."""

    def __init__(self, credentials: Credentials | None, url: str) -> None:
        super().__init__()
        self._creds = credentials or Credentials()
        self._url = url
        self.attempts = 0

    def failure(self, why: str) -> SourceError:
        hint = self._creds.hint or "set a token or an SSH key for this repository"
        return SourceError(f"authentication failed for {self._url}: {why}; {hint}")

    def credentials(
        self, url: str, username_from_url: str | None, allowed_types: CredentialType
    ) -> pygit2.Username | pygit2.UserPass | pygit2.Keypair:
        creds = self._creds
        user = username_from_url or creds.username or "git"  # HTTP URLs carry no user here
        if allowed_types & CredentialType.USERNAME:  # SSH asks who first; not an attempt
            return pygit2.Username(user)
        self.attempts += 1
        if self.attempts > MAX_AUTH_ATTEMPTS:
            raise self.failure(f"the remote rejected the credentials {MAX_AUTH_ATTEMPTS} times")
        password = creds.secret(fresh=self.attempts > 1)
        if allowed_types & CredentialType.SSH_KEY and (creds.ssh_key or not password):
            if creds.ssh_key is None:
                return pygit2.KeypairFromAgent(user)
            return pygit2.Keypair(
                user,
                creds.ssh_pubkey and os.path.expanduser(creds.ssh_pubkey),
                os.path.expanduser(creds.ssh_key),
                creds.ssh_passphrase or "",
            )
        if allowed_types & CredentialType.USERPASS_PLAINTEXT and password:
            return pygit2.UserPass(user, password)
        raise self.failure("the remote requires credentials and none are configured")


class GitSource:
    """One branch of one remote, mirrored under `mirror_dir`.

    Not thread-safe: libgit2 repository handles must not be shared between threads, so
    use one GitSource per thread (they may share `mirror_dir`).
    """

    def __init__(
        self, url: str, branch: str, mirror_dir: Path, credentials: Credentials | None = None
    ) -> None:
        remote_url, user, password = _split_url(url)
        if credentials is None and (user or password):
            credentials = Credentials(username=user, password=password,
                                      hint="check the user and token in the repository URL")
        if not pygit2.reference_is_valid_name(f"refs/heads/{branch}"):
            raise ConfigError(f"branch {branch!r} is not a valid Git branch name")
        if not pygit2.settings.server_timeout:
            set_network_timeouts()
        self.url = url_without_userinfo(remote_url)  # the only form of the URL that messages show
        self.branch = branch
        self.path = Path(mirror_dir) / _mirror_name(remote_url)
        self._credentials = credentials
        self._secrets = [s for s in (password, credentials and credentials.password,
                                     credentials and credentials.ssh_passphrase) if s]
        self._ref = f"refs/heads/{branch}"
        self._tracking = f"refs/remotes/origin/{branch}"
        try:
            if (self.path / "HEAD").is_file():
                self._repo = pygit2.Repository(str(self.path))
            else:
                self._repo = pygit2.init_repository(str(self.path), bare=True)
            if "origin" not in self._repo.remotes.names():
                self._repo.remotes.create("origin", remote_url, _MIRROR_REFSPEC)
        except (OSError, pygit2.GitError) as exc:
            raise ConfigError(f"cannot create the Git mirror {self.path}: {exc}") from None
        self._local_path = _local_path(remote_url)
        self._shared = False  # set by the first fetch (an existing mirror reads its file)

    def __repr__(self) -> str:
        return f"GitSource({self.url!r}, branch={self.branch!r}, path={str(self.path)!r})"

    def reader(self) -> GitSource:
        """This source on its own libgit2 handle, for reading commits and files from
        another thread (the dashboard's) while this one fetches; nothing is fetched by it.
        Raises SourceError when the mirror cannot be opened."""
        twin = copy.copy(self)
        try:
            twin._repo = pygit2.Repository(str(self.path))
        except (OSError, pygit2.GitError) as exc:
            raise SourceError(f"cannot open the Git mirror {self.path}: {exc}") from None
        return twin

    # -- the remote --------------------------------------------------------------------

    def remote_head(self) -> str:
        """The SHA the branch points at on the remote now (one round trip, no fetch)."""
        return self._branch_sha(self._network(lambda r, cb: r.list_heads(callbacks=cb)))

    def fetch(self) -> str:
        """Fetch the branch (force-pushes included) and return its new tip SHA."""
        return self._network(self._fetch)

    def poll(self, last_seen: str | None) -> str | None:
        """The branch's new tip when it differs from `last_seen` (fetched), else None.

        A no-change poll costs one `list_heads`; a change is fetched over that same
        connection. When the tip is unchanged but missing here (a wiped mirror), it is
        fetched again and None is still returned.
        """

        def op(remote: pygit2.Remote, cb: _Callbacks) -> str | None:
            head = self._branch_sha(remote.list_heads(callbacks=cb))
            if head == last_seen and head in self._repo:
                return None
            return self._fetch(remote, cb)

        tip = self._network(op)
        return None if tip == last_seen else tip

    def _fetch(self, remote: pygit2.Remote, cb: _Callbacks) -> str:
        self._share_local_objects()
        remote.fetch([f"+{self._ref}:{self._tracking}"], callbacks=cb)
        self._compact()
        # The advertisement of that same connection says whether the branch exists.
        sha = self._branch_sha(remote.list_heads(connect=False))
        tip = str(self._repo.references[self._tracking].target)
        if tip != sha:  # the ref update and the advertisement must agree
            raise SourceError(f"fetch of '{self.branch}' from {self.url} did not reach {sha}")
        return tip

    def _compact(self) -> None:
        """Pack the mirror into one pack once fetches have left more than
        MAX_MIRROR_PACKS. The old packs go once the new one is complete; other handles
        on this mirror find their objects in the new pack (libgit2 rescans on a miss)."""
        pack_dir = self.path / "objects" / "pack"
        old = sorted(pack_dir.glob("pack-*.pack"))
        if len(old) <= MAX_MIRROR_PACKS or self._shared:  # shared: packing would copy all
            return
        try:
            # Written aside, then moved in (pack before index, as git does), so its name
            # is known: only the packs it replaces are removed, never one written since.
            with tempfile.TemporaryDirectory(dir=pack_dir) as aside:
                self._repo.pack(aside)
                (written,) = Path(aside).glob("pack-*.pack")
                for suffix in (".pack", ".idx"):
                    written.with_suffix(suffix).replace(pack_dir / f"{written.stem}{suffix}")
            for pack in old:
                if pack.stem == written.stem:
                    continue  # the same objects in the same pack: it was just rewritten
                for part in pack_dir.glob(f"{pack.stem}.*"):
                    if part.suffix in (".pack", ".idx", ".rev", ".bitmap"):
                        part.unlink(missing_ok=True)
        except (pygit2.GitError, OSError, ValueError) as exc:  # the fetch itself succeeded
            log.warning("could not pack the Git mirror", extra={"mirror": str(self.path),
                                                                "error": str(exc)})

    def _share_local_objects(self) -> None:
        """Read the objects of a remote on this machine's disk in place, as `git clone
        --shared` does, rather than copying them in: for a local fetch libgit2 builds a
        pack by walking every tree of the commit the mirror already has (1 ms per 1,000
        files here); with the objects shared, a fetch only moves the ref. What the remote
        may prune later is what it no longer reaches (say, the commit before a
        force-push); a missing old commit makes the sync read the new one whole."""
        if self._shared or self._local_path is None:
            return
        try:
            git_dir = Path(pygit2.Repository(self._local_path, RepositoryOpenFlag.NO_SEARCH)
                           .path)
            common = git_dir / "commondir"  # a linked worktree keeps its objects there
            if common.is_file():
                git_dir = (git_dir / common.read_text().strip()).resolve()
        except (pygit2.GitError, KeyError, OSError):
            return  # not (yet) a repository: the fetch says what is wrong
        objects = git_dir / "objects"
        if not (objects / "pack").is_dir():
            return  # an object store of another shape: fetches copy, as before
        alternates = self.path / "objects" / "info" / "alternates"
        try:
            if not alternates.is_file() or alternates.read_text().strip() != str(objects):
                alternates.parent.mkdir(parents=True, exist_ok=True)
                partial = alternates.with_name(f"alternates.{os.getpid()}.tmp")
                partial.write_text(f"{objects}\n")
                partial.replace(alternates)  # whole or not at all, for other handles
            self._repo.odb.add_disk_alternate(str(objects))
        except (OSError, pygit2.GitError) as exc:
            log.warning("cannot share the objects of a local remote", extra={
                "mirror": str(self.path), "error": str(exc)})
            return
        self._shared = True

    def branches(self, patterns: Iterable[str]) -> dict[str, str]:
        """`{branch: sha}` of the remote's branches matching any glob (`preview/*`)."""
        patterns = list(patterns)

        def op(remote: pygit2.Remote, cb: _Callbacks) -> dict[str, str]:
            found = {}
            for head in remote.list_heads(callbacks=cb):
                name = head.name.removeprefix("refs/heads/")
                if head.name.startswith("refs/heads/") and any(
                        fnmatch.fnmatchcase(name, p) for p in patterns):
                    found[name] = str(head.oid)
            return found

        return self._network(op)

    def has(self, sha: str) -> bool:
        """Whether the mirror holds the object `sha` (a commit fetched before)."""
        return sha in self._repo

    def resolve(self, ref: str) -> str:
        """The commit `ref` names: a SHA already fetched, or a branch, tag or other ref
        on the remote (`feature`, `v1.2`, `refs/pull/7/head`), fetched on demand."""
        try:
            return str(self._repo.revparse_single(ref).peel(pygit2.Commit).id)
        except (KeyError, ValueError, pygit2.GitError):
            pass
        full = ref if ref.startswith("refs/") else None

        def op(remote: pygit2.Remote, cb: _Callbacks) -> str:
            names = [h.name for h in remote.list_heads(callbacks=cb)]
            candidates = [full] if full else [f"refs/heads/{ref}", f"refs/tags/{ref}"]
            found = next((c for c in candidates if c in names), None)
            if found is None:
                raise SourceError(f"ref '{ref}' not found on {self.url}")
            remote.fetch([f"+{found}:refs/nodus/resolved"], callbacks=cb)
            return str(self._repo.revparse_single("refs/nodus/resolved").peel(pygit2.Commit).id)

        return self._network(op)

    def fetch_pull_head(self, number: int) -> str | None:
        """The head commit of pull request `number` as the remote publishes it, fetched:
        `refs/pull/<n>/head` (GitHub, Gitea, Forgejo) or `refs/merge-requests/<n>/head`
        (GitLab), found in one listing of the remote's refs. A fork's commits are only
        there. None when the remote publishes neither."""
        wanted = (f"refs/pull/{number}/head", f"refs/merge-requests/{number}/head")

        def op(remote: pygit2.Remote, cb: _Callbacks) -> str | None:
            names = {h.name for h in remote.list_heads(callbacks=cb)}
            found = next((ref for ref in wanted if ref in names), None)
            if found is None:
                return None
            remote.fetch([f"+{found}:refs/nodus/resolved"], callbacks=cb)
            return str(self._repo.revparse_single("refs/nodus/resolved").peel(pygit2.Commit).id)

        return self._network(op)

    def _network(self, op: Callable[[pygit2.Remote, _Callbacks], _T]) -> _T:
        callbacks = _Callbacks(self._credentials, self.url)
        try:
            return op(self._repo.remotes["origin"], callbacks)
        except SourceError:
            raise
        except (pygit2.GitError, KeyError, ValueError, OSError) as exc:
            reason = self._scrub(str(exc).strip("'\""))
            if reason == "unsupported URL protocol" and self.url.startswith("/"):
                reason = "no Git repository at this path"  # libgit2's words for a missing path
            if re.search(r"\b401\b|authentication|credentials", reason, re.I):
                raise callbacks.failure(reason) from None
            raise SourceError(f"cannot reach {self.url}: {reason}") from None

    def _branch_sha(self, heads: Iterable[pygit2.remotes.RemoteHead]) -> str:
        for head in heads:
            if head.name == self._ref:
                return str(head.oid)
        raise SourceError(f"branch '{self.branch}' not found on {self.url}")

    def _scrub(self, text: str) -> str:
        held = self._credentials.redacted() if self._credentials else ()
        return scrub(text, (*self._secrets, *held))

    # -- the object database -----------------------------------------------------------

    def read_tree(self, commit: str, path: str = "") -> dict[str, bytes]:
        """Every YAML file under `path` at `commit`, keyed by repo-relative POSIX path;
        one over the manifest limit is an `Oversized` stand-in, never read."""
        prefix = _clean_path(path)
        tree = self._commit(commit).tree
        if prefix:
            try:
                tree = tree[prefix]
            except KeyError:
                raise SourceError(f"path '{prefix}' not found at commit {commit}") from None
            if not isinstance(tree, pygit2.Tree):
                raise SourceError(f"path '{prefix}' at commit {commit} is a file, not a folder")
        found: dict[str, bytes] = {}
        stack: list[tuple[str, pygit2.Tree]] = [(prefix, tree)]
        while stack:
            base, node = stack.pop()
            for entry in node:
                name = f"{base}/{entry.name}" if base else entry.name
                if isinstance(entry, pygit2.Tree):  # cheaper than building a FileMode
                    stack.append((name, entry))
                elif _is_manifest(name, entry.filemode, ""):
                    found[name] = self._content(entry)
        return dict(sorted(found.items()))

    def changed_paths(self, old: str, new: str, path: str = "") -> ChangedPaths:
        """YAML files under `path` added, modified or deleted from `old` to `new`.

        Works across unrelated histories (a force-push): only the two trees matter. A
        missing `old` raises SourceError; the caller then falls back to `read_tree`.
        """
        prefix = _clean_path(path)
        found: dict[str, list[str]] = {"added": [], "modified": [], "deleted": []}
        try:
            for change, name in _diff_trees(_subtree(self._commit(old).tree, prefix),
                                            _subtree(self._commit(new).tree, prefix), prefix):
                found[change].append(name)
        except (KeyError, pygit2.GitError) as exc:  # a tree of `old` pruned by its remote
            raise SourceError(f"commit {old} is incomplete in the mirror of {self.url} "
                              f"({exc}): read the full tree instead") from None
        return ChangedPaths(**{change: tuple(sorted(names)) for change, names in found.items()})

    def read_blobs(self, commit: str, paths: Iterable[str]) -> dict[str, bytes]:
        """The contents of `paths` at `commit` (for re-reading only what changed), sizes
        checked as in `read_tree`."""
        tree = self._commit(commit).tree
        found: dict[str, bytes] = {}
        for path in map(_clean_path, paths):
            try:
                blob = tree[path]
            except KeyError:
                raise SourceError(f"'{path}' not found at commit {commit}") from None
            if not isinstance(blob, pygit2.Blob):
                raise SourceError(f"'{path}' at commit {commit} is not a file")
            found[path] = self._content(blob)
        return found

    def _content(self, blob: pygit2.Blob) -> bytes:
        """A blob's bytes, or for one over the manifest limit an `Oversized` sized from
        its object header: a tree entry is a lazy handle, and its `data` (or `size`)
        would inflate the whole object first."""
        size = self._repo.odb.read_header(blob.id)[1]
        return Oversized(size) if size > MAX_FILE_BYTES else blob.data

    def commit_info(self, sha: str) -> CommitInfo:
        commit = self._commit(sha)
        who = commit.author
        when = datetime.fromtimestamp(who.time, timezone(timedelta(minutes=who.offset)))
        first_line = commit.message.split("\n", 1)[0].strip()
        return CommitInfo(str(commit.id), who.name, who.email, first_line, when)

    def _commit(self, sha: str) -> pygit2.Commit:
        try:
            obj = self._repo[sha]
        except (KeyError, ValueError):
            raise SourceError(
                f"commit {sha} is not in the mirror of {self.url} (not fetched, or gone "
                "after a history rewrite): read the full tree instead"
            ) from None
        if not isinstance(obj, pygit2.Commit):
            raise SourceError(f"{sha} in {self.url} is a {obj.type_str}, not a commit")
        return obj
