"""Commit checks as Git notes: the default writer, needing no hosted API.

All checks of one commit live in ONE note under `refs/notes/nodus`: a JSON object keyed by
context (`{"nodus/prod/sync": {"state", "title", "summary", "annotations", "updatedAt"}}`),
written into the binding's bare mirror. With `push=True` the notes ref is also published:
fetch the remote's notes into `refs/notes/nodus-remote`, merge by context (the newer
`updatedAt` wins), recommit our notes on top of the remote tip so the push fast-forwards,
and when a racing writer got there first (the push is refused) do it all again, up to 5
times. Readers run `git fetch origin refs/notes/nodus:refs/notes/nodus` and
`git log --notes=nodus`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import pygit2
from nodus_gitops.checks.model import CheckRun
from nodus_gitops.floor.errors import ConfigError, PermanentError, SourceError, TransientError
from nodus_gitops.floor.redaction import scrub, url_without_userinfo
from nodus_gitops.hosts.credentials import Credentials
from nodus_gitops.source import _Callbacks, _split_url

NOTES_REF = "refs/notes/nodus"
REMOTE_COPY = "refs/notes/nodus-remote"
PUSH_ATTEMPTS = 5
# libgit2 refuses a non-fast-forward push itself, in one of these two words, before the
# server can; a server hook refusing it reaches push_update_reference instead.
_REFUSED = ("non-fastforward", "not present locally")

Notes = dict[str, dict[str, Any]]  # context -> entry, for one commit


def _utc_now() -> datetime:
    return datetime.now(UTC)


class _PushCallbacks(_Callbacks):
    refused: str | None = None

    def push_update_reference(self, refname: str, message: str | None) -> None:
        if message:
            self.refused = message


class _Refused(Exception):
    pass


class GitNotesWriter:
    """Writes checks into `repo` (a bare mirror or its path); pushes them to `remote_url`
    (default: the mirror's `origin`) when `push` is set. Not thread-safe across handles:
    give each thread its own writer, as with GitSource."""

    name = "gitnotes"

    def __init__(
        self,
        repo: pygit2.Repository | str | Path,
        remote_url: str | None = None,
        credentials: Credentials | None = None,
        *,
        push: bool = False,
        clock: Callable[[], datetime] = _utc_now,
        attempts: int = PUSH_ATTEMPTS,
    ) -> None:
        if isinstance(repo, pygit2.Repository):
            self._repo = repo
        else:
            try:
                self._repo = pygit2.Repository(str(repo))
            except (pygit2.GitError, KeyError) as exc:
                raise ConfigError(f"checks.gitnotes: no Git mirror at {repo}: {exc}") from None
        if remote_url is None and "origin" in self._repo.remotes.names():
            remote_url = self._repo.remotes["origin"].url
        if push and not remote_url:
            raise ConfigError("checks.gitnotes.push: the mirror has no remote to push to")
        url, user, password = _split_url(remote_url) if remote_url else ("", None, None)
        if credentials is None and (user or password):
            credentials = Credentials(username=user, password=password,
                                      hint="check the user and token in the repository URL")
        self._url = url
        self._credentials = credentials
        self._secrets = [s for s in (password, credentials and credentials.password) if s]
        self._push = push
        self._clock = clock
        self._attempts = attempts
        self._lock = threading.Lock()

    def post(self, run: CheckRun) -> None:
        entry = _entry(run, self._clock())
        with self._lock:
            self._write(run.commit, {run.context: entry}, newer_wins=False)
            if self._push:
                self._publish()

    def read(self, commit: str, ref: str = NOTES_REF) -> Notes:
        """The checks recorded for `commit` ({} when none, or when the note is not ours)."""
        try:
            message = self._repo.lookup_note(commit, ref).message
        except (KeyError, pygit2.GitError):
            return {}
        try:
            notes = json.loads(message)
        except ValueError:
            return {}  # someone else's free text: ours replaces it
        return notes if isinstance(notes, dict) else {}

    # -- local ------------------------------------------------------------------------

    def _write(self, commit: str, entries: Notes, *, newer_wins: bool) -> None:
        current = self.read(commit)
        merged = _merge(current, entries, newer_wins=newer_wins)
        if merged != current:
            signature = self._signature()
            self._repo.create_note(json.dumps(merged, indent=2, sort_keys=True) + "\n",
                                   signature, signature, commit, NOTES_REF, True)

    def _all(self, ref: str) -> dict[str, Notes]:
        try:
            found = list(self._repo.notes(ref))
        except (KeyError, pygit2.GitError):
            return {}
        return {str(note.annotated_id): self.read(str(note.annotated_id), ref)
                for note in found}

    def _tip(self, ref: str) -> pygit2.Oid | None:
        try:
            return self._repo.references[ref].target  # type: ignore[return-value]
        except KeyError:
            return None

    def _signature(self) -> pygit2.Signature:
        return pygit2.Signature("nodus-gitops", "nodus-gitops@localhost",
                                int(self._clock().timestamp()), 0)

    # -- remote -----------------------------------------------------------------------

    def _publish(self) -> None:
        for _ in range(self._attempts):
            remote = self._repo.remotes.create_anonymous(self._url)
            remote_tip = self._network(partial(self._fetch, remote))
            if not self._rebase_onto(remote_tip):
                return  # the remote already has everything we have
            try:
                self._network(partial(self._push_once, remote))
                return
            except _Refused:
                continue  # a racing writer pushed first: fetch, merge and try again
        raise TransientError(f"push of {NOTES_REF} to {url_without_userinfo(self._url)} "
                             "was refused "
                             f"{self._attempts} times in a row (racing writers)", delay=5.0)

    def _fetch(self, remote: pygit2.Remote) -> pygit2.Oid | None:
        callbacks = _Callbacks(self._credentials, url_without_userinfo(self._url))
        remote.fetch([f"+{NOTES_REF}:{REMOTE_COPY}"], callbacks=callbacks)
        names = {head.name for head in remote.list_heads(connect=False)}
        if NOTES_REF not in names:  # a fetch of a missing ref is silently a no-op
            if REMOTE_COPY in self._repo.references:
                self._repo.references.delete(REMOTE_COPY)
            return None
        return self._tip(REMOTE_COPY)

    def _rebase_onto(self, remote_tip: pygit2.Oid | None) -> bool:
        """Make the local notes ref a descendant of `remote_tip` holding both sides' notes;
        False when there is nothing to push."""
        local_tip = self._tip(NOTES_REF)
        if local_tip is None or local_tip == remote_tip:
            return False
        if remote_tip is None or self._repo.descendant_of(local_tip, remote_tip):
            return True
        ours = self._all(NOTES_REF)
        self._repo.references.create(NOTES_REF, remote_tip, force=True)
        for commit, entries in ours.items():  # a note is recommitted only where it differs
            self._write(commit, entries, newer_wins=True)
        return self._tip(NOTES_REF) != remote_tip

    def _push_once(self, remote: pygit2.Remote) -> None:
        callbacks = _PushCallbacks(self._credentials, url_without_userinfo(self._url))
        try:
            remote.push([f"{NOTES_REF}:{NOTES_REF}"], callbacks=callbacks)
        except pygit2.GitError as exc:
            if any(word in str(exc) for word in _REFUSED):
                raise _Refused() from None
            raise
        if callbacks.refused:
            raise _Refused()

    def _network(self, op: Callable[[], Any]) -> Any:
        """Git's failures as the check writers' errors, with no secret in the message."""
        try:
            return op()
        except _Refused:
            raise
        except SourceError as exc:  # authentication: retrying cannot help until fixed
            raise PermanentError(f"checks.gitnotes: {self._scrub(str(exc))}") from None
        except (pygit2.GitError, OSError) as exc:
            raise TransientError(f"checks.gitnotes: {url_without_userinfo(self._url)}: "
                                 f"{self._scrub(str(exc))}") from None

    def _scrub(self, message: str) -> str:
        held = self._credentials.redacted() if self._credentials else ()
        return scrub(message, (*self._secrets, *held), "<secret>")


def _entry(run: CheckRun, now: datetime) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "state": run.state.value,
        "title": run.title,
        "summary": run.summary,
        "annotations": [{"path": a.path, "line": a.line, "message": a.message,
                         "level": a.level.value} for a in run.annotations],
        "updatedAt": now.astimezone(UTC).isoformat().replace("+00:00", "Z"),
    }
    if run.details_url:
        entry["detailsUrl"] = run.details_url
    return entry


def _merge(base: Notes, other: Notes, *, newer_wins: bool) -> Notes:
    """`base` with `other`'s entries laid over it: all of them, or when `newer_wins` only
    those with a later updatedAt (a tie keeps `base`)."""
    merged = dict(base)
    for context, entry in other.items():
        if (not newer_wins or context not in merged
                or _when(entry) > _when(merged[context])):
            merged[context] = entry
    return merged


def _when(entry: Any) -> datetime:
    try:
        return datetime.fromisoformat(str(entry["updatedAt"]))
    except (KeyError, TypeError, ValueError):
        return datetime.min.replace(tzinfo=UTC)  # unreadable: the oldest
