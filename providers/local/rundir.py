"""One Job's run directory, `root/<project>/<name>/`, and the files in it.

The run directory is the only state of the local backend: the provider and the
Job's supervisor talk through it, and a restarted reconciler finds everything again by
reading it. Every JSON file is replaced atomically (`providers.jsonfiles`); events are
appended one JSON object a line.

    manifest.json    the Job as created (key, idempotency key, manifest, spec hash)
    settings.json    the resolved backend settings the supervisor runs with
    status.json      written by the supervisor after every change
    control.json     written by the provider: desired state, timeout, cost cap
    supervisor.json  pid and /proc start time of the supervisor process
    events.jsonl     lifecycle events
    logs/<index>-<attempt>.log       the last KEPT_ATTEMPTS attempts of each index
    sandbox/<index>-<attempt>.json   bubblewrap's status: the run's PID namespace
    disk/files/      everything the Job writes: outputs/ state/<index>/ work/ source/
                     units/<index>-<attempt>.jsonl, run-outputs/<index>-<attempt>/,
                     gang-shm/ (a gang's /dev/shm); the
                     mount point of the Job's own filesystem when it has one (`runfs`),
                     else a plain directory

Every run starts on fresh capacity: its /nodus/outputs is its own empty
`run-outputs/<index>-<attempt>/`, moved into `outputs/` when the run succeeds and
removed otherwise. What a run finds again is its index's checkpoint directories, one
for each of recovery.checkpointPaths: `state/<index>/` for the first (the
NODUS_CHECKPOINT_DIR), `state/<index>.<n>/` for the n-th after it.
    disk/nodus-fs.img, disk/nodus-fs.json   that filesystem's image and what it holds

The run directory is 0700. When runs switch users, the directories a run writes
(outputs, state/<index>, work, units, source) belong to the run user with mode 0700;
the rest, logs included, stays the reconciler's, out of every run's sight. `disk/` is
made when the Job first starts a run; run directories made before it existed keep
those directories at the top.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.providers.local.runuser import RunUser

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")

KEPT_ATTEMPTS = 10  # attempts of an index whose log and records stay
PRUNED_MARK = ".pruned"  # in logs/: older attempts' files were removed


def check_name(text: str, what: str) -> str:
    if not _SAFE_NAME.match(text) or text in (".", ".."):
        raise ValueError(f"{what} {text!r} cannot name a run directory")
    return text


def _owned_dir(path: Path, user: RunUser) -> None:
    """A directory the run writes: the run user's, 0700, when runs switch users."""
    path.mkdir(exist_ok=True)
    if user.switch:
        os.chown(path, user.uid, user.gid, follow_symlinks=False)
        path.chmod(0o700)


MAX_EVENTS_BYTES = 1 << 20  # a Job's events file; past it the oldest half goes


def tombstone_path(root: Path, key: ResourceKey) -> Path:
    """What stays of a Job its ttlSecondsAfterFinished removed (so a create of the same
    run returns it instead of running it again)."""
    return Path(root) / check_name(key.project, "project") / ".tombstones" / \
        f"{check_name(key.name, 'name')}.json"


def missing(root: Path, key: ResourceKey) -> str:
    """Why a Job has no run directory here: removed by its TTL, or never run here."""
    stone = tombstone_path(root, key)
    if stone.is_file():
        return (f"{key.short} finished and was removed, with its logs and outputs, by its "
                "ttlSecondsAfterFinished")
    return f"{key.short} has not run on this machine"


@dataclass(frozen=True)
class RunDir:
    path: Path

    @classmethod
    def for_key(cls, root: Path, key: ResourceKey) -> RunDir:
        return cls(Path(root) / check_name(key.project, "project") / check_name(key.name, "name"))

    # files
    @property
    def manifest(self) -> Path:
        return self.path / "manifest.json"

    @property
    def settings(self) -> Path:
        return self.path / "settings.json"

    @property
    def status(self) -> Path:
        return self.path / "status.json"

    @property
    def control(self) -> Path:
        return self.path / "control.json"

    @property
    def supervisor(self) -> Path:
        return self.path / "supervisor.json"

    @property
    def events(self) -> Path:
        return self.path / "events.jsonl"

    @property
    def supervisor_lock(self) -> Path:
        return self.path / "supervisor.lock"

    @property
    def provider_lock(self) -> Path:
        return self.path / "provider.lock"

    @property
    def disk(self) -> Path:
        return self.path / "disk"

    @property
    def image(self) -> Path:
        return self.disk / "nodus-fs.img"

    # directories
    @property
    def logs(self) -> Path:
        return self.path / "logs"

    @cached_property
    def files(self) -> Path:
        """Everything the Job writes (a run directory of an earlier layout: its top)."""
        if not self.disk.is_dir() and (self.path / "outputs").is_dir():
            return self.path
        return self.disk / "files"

    @property
    def units(self) -> Path:
        return self.files / "units"

    @property
    def outputs(self) -> Path:
        return self.files / "outputs"

    @property
    def state(self) -> Path:
        return self.files / "state"

    @property
    def work(self) -> Path:
        return self.files / "work"

    @property
    def source(self) -> Path:
        return self.files / "source"

    @property
    def run_outputs(self) -> Path:
        return self.files / "run-outputs"

    @property
    def gang_shm(self) -> Path:
        """The /dev/shm every rank of a gang shares (`gangspace`)."""
        return self.files / "gang-shm"

    @property
    def sandboxes(self) -> Path:
        return self.path / "sandbox"

    def sandbox_status_for(self, index: int, attempt: int) -> Path:
        return self.sandboxes / f"{index}-{attempt}.json"

    def state_for(self, index: int) -> Path:
        """The index's first checkpoint directory (NODUS_CHECKPOINT_DIR)."""
        return self.state / str(index)

    def checkpoint_dirs(self, index: int, count: int) -> list[Path]:
        """The index's directories for its `count` checkpoint paths, in their order."""
        return [self.state_for(index), *(self.state / f"{index}.{n}" for n in range(1, count))]

    def run_outputs_for(self, index: int, attempt: int) -> Path:
        """The outputs directory of one run, until it succeeded."""
        return self.run_outputs / f"{index}-{attempt}"

    def log_for(self, index: int, attempt: int) -> Path:
        return self.logs / f"{index}-{attempt}.log"

    def units_for(self, index: int, attempt: int) -> Path:
        return self.units / f"{index}-{attempt}.jsonl"

    def make_dirs(self) -> None:
        """The run directory at create; `disk/` comes when the Job first starts a run,
        on its own filesystem where it has one (`make_job_dirs`)."""
        self.path.mkdir(parents=True, exist_ok=True)
        self.path.chmod(0o700)
        for d in (self.logs, self.sandboxes):
            d.mkdir(exist_ok=True)

    def make_job_dirs(self, user: RunUser) -> None:
        """The Job's directories in `disk/files` (a plain directory made here when the
        Job has no filesystem of its own)."""
        from nodus_gitops.providers.local.runfs import job_dirs

        self.__dict__.pop("files", None)
        self.files.mkdir(mode=0o700, parents=True, exist_ok=True)
        job_dirs(self.files, (user.uid, user.gid) if user.switch else None)

    def make_run_dirs(self, index: int, attempt: int, checkpoints: int, user: RunUser) -> None:
        """What one run writes of its own: its index's checkpoint directories (kept when
        they exist) and its new, empty outputs directory."""
        for path in self.checkpoint_dirs(index, checkpoints):
            _owned_dir(path, user)
        self.run_outputs.mkdir(mode=0o700, exist_ok=True)
        _owned_dir(self.run_outputs_for(index, attempt), user)

    def make_gang_shm(self, user: RunUser) -> None:
        _owned_dir(self.gang_shm, user)

    def prune_attempts(self, index: int, attempt: int, keep: int = KEPT_ATTEMPTS) -> bool:
        """Remove the log, sandbox record and units file of `index`'s attempts before the
        last `keep` up to `attempt`: a Job retried without end (a huge backoffLimit)
        must not use up the disk's inodes one attempt at a time. True the first time
        any attempt's files of this Job go (`logs/.pruned` remembers it)."""
        gone = False
        for old in range(attempt - keep, 0, -1):  # back to the last one pruned before
            log = self.log_for(index, old)
            paths = (log, log.with_name(f".{log.name}.tail"),
                     self.sandbox_status_for(index, old), self.units_for(index, old))
            found = False
            for path in paths:
                try:
                    path.unlink()
                    found = True
                except FileNotFoundError:
                    pass
            if not found:
                break
            gone = True
        if not gone or (self.logs / PRUNED_MARK).exists():
            return False
        (self.logs / PRUNED_MARK).touch()
        return True

    def exists(self) -> bool:
        return self.manifest.exists()

    def event(
        self, reason: str, message: str, type_: str = "Normal", now: float | None = None
    ) -> None:
        """Append one event; a single write of one line, so concurrent writers interleave
        whole lines."""
        line = json.dumps(
            {
                "time": time.time() if now is None else now,
                "type": type_,
                "reason": reason,
                "message": message,
            },
            separators=(",", ":"),
        )
        fd = os.open(self.events, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
            size = os.fstat(fd).st_size
        finally:
            os.close(fd)
        if size > MAX_EVENTS_BYTES:
            self._trim_events(time.time() if now is None else now)

    def _trim_events(self, now: float) -> None:
        """Keep the newest half of the events and say how many older ones went: a Job
        retried without end writes one line an attempt, which no reservation bounds.
        (An event another process appends during the rewrite can be lost with them.)"""
        lines = self.events.read_bytes().splitlines(keepends=True)
        kept: list[bytes] = []
        size = 0
        for raw in reversed(lines):
            if size + len(raw) > MAX_EVENTS_BYTES // 2:
                break
            kept.append(raw)
            size += len(raw)
        dropped = len(lines) - len(kept)
        note = json.dumps({"time": now, "type": "Warning", "reason": "EventsTrimmed",
                           "message": f"{dropped} older events were dropped to keep this "
                                      f"Job's events under {MAX_EVENTS_BYTES >> 10} KiB"},
                          separators=(",", ":")).encode() + b"\n"
        part = self.events.with_name(f".{self.events.name}.{os.getpid()}")
        part.write_bytes(note + b"".join(reversed(kept)))
        os.chmod(part, 0o644)
        part.replace(self.events)

    def read_events(self) -> list[dict[str, Any]]:
        try:
            text = self.events.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in text.splitlines() if line.strip()]
