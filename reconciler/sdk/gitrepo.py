"""Commits to the manifests repository with pygit2 alone: fetch the branch into a bare
cache, build the new tree from the tip's tree in memory (no work tree), commit, push.

An edit is a function of the tip's tree that returns the files to write and the commit
message, or nothing to write. When the push is rejected because the branch moved, the
branch is fetched again and the edit re-applied to the new tip, a few times; an edit
that looks at the tree first (an idempotency key, the current `spec.state`) is thus
safe to retry.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pygit2
from nodus_gitops.floor.errors import ConfigError, SourceError
from nodus_gitops.hosts.credentials import Credentials
from nodus_gitops.manifests import is_manifest_path
from nodus_gitops.sdk import errors
from nodus_gitops.source import GitSource
from pygit2.enums import FileMode

PUSH_ATTEMPTS = 5
_PUSH_REF = "refs/nodus-sdk/push"
log = logging.getLogger("nodus_gitops.sdk")


@dataclass
class Edit:
    """What an edit decided: files to write (path -> content) and the commit message;
    no files means nothing to commit. `value` is handed back to the caller."""

    files: dict[str, bytes] = field(default_factory=dict)
    message: str = ""
    value: object = None


@dataclass(frozen=True)
class Written:
    """The outcome of `Repository.commit`: the commit made (None when nothing changed)
    and the edit's value."""

    commit: str | None
    value: object


class _Rejected(Exception):
    pass


class _PushCallbacks(pygit2.RemoteCallbacks):
    """Credentials as the reconciler's source answers them, plus the remote's verdict on
    each ref update."""

    def __init__(self, inner: pygit2.RemoteCallbacks) -> None:
        super().__init__()
        self._inner = inner
        self.rejected: str | None = None
        self.remote_said: list[str] = []  # the remote's own words (a hook's stderr)

    def credentials(self, url, username_from_url, allowed_types):  # type: ignore[no-untyped-def]
        return self._inner.credentials(url, username_from_url, allowed_types)

    def sideband_progress(self, string: str) -> None:
        self.remote_said.append(string)

    def push_update_reference(self, refname: str, message: str | None) -> None:
        if message:
            said = " ".join("".join(self.remote_said).split())
            self.rejected = f"{refname}: {message}" + (f" ({said})" if said else "")


class Repository(GitSource):
    """One branch of the manifests repository, cached under `cache_dir`. Not thread-safe;
    the Client serialises its calls."""

    def __init__(self, url: str, branch: str, cache_dir: Path,
                 credentials: Credentials | None = None) -> None:
        try:
            super().__init__(url, branch, Path(cache_dir), credentials)
        except ConfigError as exc:
            raise errors.ConfigError(str(exc)) from None

    def fetch_tip(self) -> str | None:
        """Fetch the branch and return its tip; None when the remote has no such branch
        yet (the first commit then starts it)."""

        def op(remote: pygit2.Remote, cb: pygit2.RemoteCallbacks) -> str | None:
            heads = remote.list_heads(callbacks=cb)
            if not any(h.name == self._ref for h in heads):
                return None
            return self._fetch(remote, cb)

        return self._guard(lambda: self._network(op))

    def files(self, tip: str | None, folder: str = "") -> dict[str, bytes]:
        """The YAML files under `folder` at `tip` (none when the folder is missing)."""
        if tip is None:
            return {}
        try:
            return self.read_tree(tip, folder)
        except SourceError:
            return {}

    def commit(self, edit: Callable[[str | None], Edit], author: pygit2.Signature) -> Written:
        """Apply `edit` to the branch's tip, commit as `author` and push; retried on a
        rejected push (the branch moved) up to PUSH_ATTEMPTS times."""
        last, refused_at = "", None
        for attempt in range(1, PUSH_ATTEMPTS + 1):
            tip = self.fetch_tip()
            if refused_at is not None and tip == refused_at:  # not a race: a refusal
                raise errors.GitError(f"{self.url} refused the push to {self.branch}: {last}")
            decided = edit(tip)
            if not decided.files:
                return Written(None, decided.value)
            sha = self._make_commit(tip, decided, author)
            try:
                self._push(sha)
            except _Rejected as exc:
                last, refused_at = str(exc), tip
                log.info("push rejected (%s), retrying (attempt %d)", last, attempt)
                continue
            return Written(sha, decided.value)
        raise errors.GitError(f"could not push to {self.url} branch {self.branch}: the branch "
                              f"kept moving ({PUSH_ATTEMPTS} attempts; last: {last})")

    def _make_commit(self, tip: str | None, edit: Edit, author: pygit2.Signature) -> str:
        index = pygit2.Index()
        if tip is not None:
            index.read_tree(self._commit(tip).tree)
        for path, content in edit.files.items():
            if not is_manifest_path(path):
                raise errors.ConfigError(f"{path}: the SDK writes YAML manifests only")
            blob = self._repo.create_blob(content)
            index.add(pygit2.IndexEntry(path, blob, FileMode.BLOB))
        tree = index.write_tree(self._repo)
        parents = [pygit2.Oid(hex=tip)] if tip else []
        oid = self._repo.create_commit(None, author, author, edit.message, tree, parents)
        return str(oid)

    def _push(self, sha: str) -> None:
        self._repo.references.create(_PUSH_REF, pygit2.Oid(hex=sha), force=True)

        def op(remote: pygit2.Remote, cb: pygit2.RemoteCallbacks) -> None:
            callbacks = _PushCallbacks(cb)
            try:
                remote.push([f"{_PUSH_REF}:{self._ref}"], callbacks=callbacks)
            except pygit2.GitError as exc:
                text = str(exc)
                if any(w in text.lower() for w in ("fast-forward", "fastforward",
                                                   "not present locally")):
                    raise _Rejected(text) from None
                raise
            if callbacks.rejected:
                raise _Rejected(callbacks.rejected)

        self._guard(lambda: self._network(op))
        self._repo.references.create(self._tracking, pygit2.Oid(hex=sha), force=True)

    def _guard(self, call: Callable[[], object]):  # type: ignore[no-untyped-def]
        try:
            return call()
        except _Rejected:
            raise
        except SourceError as exc:
            text = str(exc)
            if text.startswith("authentication failed"):
                raise errors.AuthError(text) from None
            raise errors.GitError(text) from None
