"""A project's budget hold as a backend keeps it: one small file in the project's
directory (`<root>/<project>/.budget-hold.json`, hidden so that no listing of Jobs
takes it for one), written atomically by the backend when the reconciler says the
project spent its budget or may spend again, and read by whatever drives the
project's Jobs (the local supervisors on each tick, the Slurm backend on each get).

No file means no hold: a project never budgeted, or one whose hold was lifted before
any of its Jobs existed, is untouched.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from nodus_gitops.providers.jsonfiles import read_json, write_json

FILE = ".budget-hold.json"


@dataclass(frozen=True)
class Hold:
    exceeded: bool
    message: str


def path_of(project_dir: Path) -> Path:
    return Path(project_dir) / FILE


def read(project_dir: Path) -> Hold:
    doc = read_json(path_of(project_dir), unreadable_is_missing=True) or {}
    return Hold(bool(doc.get("exceeded")), str(doc.get("message") or ""))


def write(project_dir: Path, exceeded: bool, message: str) -> bool:
    """Record the hold; True when it changed (a hold placed or lifted, a new message).
    Lifting a hold nobody placed writes nothing."""
    project_dir = Path(project_dir)
    now = Hold(exceeded, message if exceeded else "")
    if read(project_dir) == now or (not exceeded and not path_of(project_dir).exists()):
        return False
    project_dir.mkdir(parents=True, exist_ok=True)
    write_json(path_of(project_dir), {"exceeded": now.exceeded, "message": now.message})
    return True


class Watch:
    """The hold of one project, read again only when its file changed (one stat a call)."""

    def __init__(self, project_dir: Path):
        self.path = path_of(project_dir)
        self._sig: tuple | None = None
        self._hold = Hold(False, "")

    def current(self) -> Hold:
        try:
            s = os.stat(self.path)
        except FileNotFoundError:
            self._sig, self._hold = None, Hold(False, "")
            return self._hold
        sig = (s.st_mtime_ns, s.st_ino, s.st_size)
        if sig != self._sig:
            self._sig, self._hold = sig, read(self.path.parent)
        return self._hold
