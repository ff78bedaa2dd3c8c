"""A Job's directory on the cluster's shared filesystem, `<root>/<project>/<name>/`:

    job.json        the provider's record: manifest, idempotency key, submissions, the
                    finished runs, the result (written atomically, under job.lock)
    wrapper.sh      the batch script every submission runs
    outputs/        the Job's outputs: what its succeeded runs wrote (declared outputs
                    are hashed from here)
    run-outputs/<index>-<attempt>/  a running run's own /nodus/outputs
    state/<index>/  each index's first checkpoint directory (NODUS_CHECKPOINT_DIR),
                    state/<index>.<n>/ for the n-th checkpoint path after it
    logs/<index>-<attempt>.log, units/<index>-<attempt>.jsonl, exits/<index>-<attempt>
    slurm/<jobid>.out  what Slurm itself writes (the wrapper's own errors)

The wrapper, running as the job's user on a compute node, creates the per-index
directories; the provider creates the rest and hands the tree to that user when the
reconciler runs as root.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from nodus_gitops.floor.errors import PermanentError
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.providers import jsonfiles

_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def read_json(path: Path) -> Any:
    """A record on the shared filesystem, or None when missing or not JSON."""
    return jsonfiles.read_json(path, unreadable_is_missing=True)


def write_json(path: Path, doc: Any) -> None:
    """Records hold the manifest: readable by the reconciler's user only."""
    jsonfiles.write_json(path, doc, mode=0o600)


class JobDir:
    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def for_key(cls, root: Path, key: ResourceKey) -> JobDir:
        for part in (key.project, key.name):
            if not _SAFE.match(part):
                raise PermanentError(f"{key.short}: {part!r} cannot name a directory on the "
                                     "cluster's shared filesystem")
        return cls(root / key.project / key.name)

    record = property(lambda self: self.path / "job.json")
    wrapper = property(lambda self: self.path / "wrapper.sh")
    outputs = property(lambda self: self.path / "outputs")
    logs = property(lambda self: self.path / "logs")
    units = property(lambda self: self.path / "units")
    exits = property(lambda self: self.path / "exits")
    slurm = property(lambda self: self.path / "slurm")

    def state(self, index: int) -> Path:
        return self.path / "state" / str(index)

    def tombstone(self) -> Path:
        return self.path.parent / ".tombstones" / f"{self.path.name}.json"

    def exists(self) -> bool:
        return self.record.exists()

    def read(self) -> dict[str, Any] | None:
        return read_json(self.record)

    def write(self, doc: dict[str, Any]) -> None:
        write_json(self.record, doc)

    @contextmanager
    def locked(self) -> Iterator[None]:
        self.path.mkdir(parents=True, exist_ok=True)
        with jsonfiles.exclusive_lock(self.path / "job.lock"):
            yield

    def prepare(self, wrapper: str, user: str) -> None:
        """Create the directories the provider owns and the wrapper; when the reconciler
        runs as root and jobs run as another user, hand them to that user."""
        for d in (self.outputs, self.logs, self.units, self.exits, self.slurm,
                  self.path / "state", self.path / "work"):
            d.mkdir(parents=True, exist_ok=True)
        self.wrapper.write_text(wrapper)
        self.wrapper.chmod(0o755)
        if os.geteuid() == 0 and user != "root":
            try:
                pw = pwd.getpwnam(user)
            except KeyError:
                return  # a user unknown here: the shared filesystem maps it
            for dirpath, _dirs, files in os.walk(self.path):
                os.chown(dirpath, pw.pw_uid, pw.pw_gid)
                for name in files:
                    os.chown(os.path.join(dirpath, name), pw.pw_uid, pw.pw_gid)

    def exit_status(self, index: int, attempt: int) -> int | None:
        """The command's exit code the wrapper recorded, None when it recorded none."""
        try:
            return int((self.exits / f"{index}-{attempt}").read_text().strip())
        except (OSError, ValueError):
            return None

    def killed_for_memory(self, job_id: int) -> bool:
        """Whether Slurm noted, in the job's own output, that it killed the job for
        exceeding its memory (JobAcctGatherParams=OverMemoryKill, without cgroups)."""
        try:
            text = (self.slurm / f"{job_id}.out").read_text(errors="replace")
        except OSError:
            return False
        return "exceeded memory limit" in text or "Exceeded job memory limit" in text

    def unit_count(self) -> int:
        total = 0
        if self.units.is_dir():
            for f in self.units.glob("*.jsonl"):
                with open(f, "rb") as fh:
                    total += sum(1 for line in fh if line.strip())
        return total

    def clear_state(self, index: int) -> None:
        """The index's checkpoint directories, one for each checkpoint path, go."""
        shutil.rmtree(self.state(index), ignore_errors=True)
        for extra in (self.path / "state").glob(f"{index}.*"):
            shutil.rmtree(extra, ignore_errors=True)

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
