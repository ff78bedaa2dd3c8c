"""JSON records on disk, for the backends whose state is files (local, slurm): each
resource has a directory `<root>/<project>/<name>/` holding its records.

Every record is replaced atomically (a temporary file beside it, then `os.replace`), so
a reader sees the old record or the new one, never half of one; a read-modify-write of
records holds `exclusive_lock` on a lock file beside them.
"""

from __future__ import annotations

import fcntl
import itertools
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from nodus_gitops.floor.identity import owned_by

_SEQUENCE = itertools.count()


@contextmanager
def exclusive_lock(path: Path, *, mode: int = 0o644) -> Iterator[None]:
    """Hold an exclusive flock on the lock file `path` (made with `mode` when missing);
    other processes wait. The lock goes with the descriptor, even if the holder dies."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, mode)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def write_json(path: Path, data: Any, *, mode: int = 0o644) -> None:
    """Replace `path` atomically with `data` as JSON (file permissions `mode`)."""
    tmp = path.parent / f".{path.name}.{os.getpid()}.{next(_SEQUENCE)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, separators=(",", ":"), sort_keys=True)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def read_json(path: Path, *, unreadable_is_missing: bool = False) -> Any:
    """The JSON in `path`, or None when it does not exist (or, with
    `unreadable_is_missing`, when it is not JSON either)."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except ValueError:
        if unreadable_is_missing:
            return None
        raise


def owned_records(project_dir: Path, record: str, instance: str, *,
                  unreadable_is_missing: bool = False) -> Iterator[dict[str, Any]]:
    """The record file `record` of each resource directory in `project_dir`, in name
    order, whose manifest carries this instance's ownership labels; hidden entries and
    directories without the record are passed over."""
    if not project_dir.is_dir():
        return
    for entry in sorted(project_dir.iterdir()):
        if entry.name.startswith("."):
            continue
        doc = read_json(entry / record, unreadable_is_missing=unreadable_is_missing)
        if doc and owned_by(doc.get("manifest") or {}, instance):
            yield doc
