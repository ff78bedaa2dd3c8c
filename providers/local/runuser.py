"""Who runs a Job's processes: an unprivileged user, never the reconciler's own.

A reconciler running as root drops to the configured user (by default `nodus-run` when
that user exists, else 65534, nobody) in the forked child before bubblewrap starts: as
root, bubblewrap's own `--uid` maps back to root outside the namespace and is no drop
at all. A reconciler that is not root cannot switch users: its runs keep its uid inside
their namespaces, and their status says so.
"""

from __future__ import annotations

import grp
import os
import pwd
from dataclasses import dataclass
from typing import Any

DEFAULT_USER = "nodus-run"
NOBODY = 65534


@dataclass(frozen=True)
class RunUser:
    uid: int
    gid: int
    switch: bool  # the child drops from root to uid/gid before exec
    note: str  # how status.runAs explains it

    def to_dict(self) -> dict[str, Any]:
        return {"uid": self.uid, "gid": self.gid, "switch": self.switch, "note": self.note}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunUser:
        return cls(int(data["uid"]), int(data["gid"]), bool(data["switch"]), str(data["note"]))

    def describe(self) -> str:
        return f"uid {self.uid}, gid {self.gid} ({self.note})"


def _user(value: int | str | None) -> tuple[int, int | None, str]:
    """(uid, its primary gid when known, what it is)."""
    if value is None:
        try:
            pw = pwd.getpwnam(DEFAULT_USER)
            return pw.pw_uid, pw.pw_gid, f"the {DEFAULT_USER} user"
        except KeyError:
            return NOBODY, NOBODY, "nobody: no nodus-run user exists"
    if isinstance(value, int) or str(value).isdigit():
        uid = int(value)
        try:
            return uid, pwd.getpwuid(uid).pw_gid, "runAsUser"
        except KeyError:
            return uid, None, "runAsUser"
    try:
        pw = pwd.getpwnam(str(value))
    except KeyError:
        raise ValueError(f"runAsUser: there is no user {value!r} on this machine") from None
    return pw.pw_uid, pw.pw_gid, f"runAsUser {value}"


def _group(value: int | str | None, fallback: int | None) -> int:
    if value is None:
        return NOBODY if fallback is None else fallback
    if isinstance(value, int) or str(value).isdigit():
        return int(value)
    try:
        return grp.getgrnam(str(value)).gr_gid
    except KeyError:
        raise ValueError(f"runAsGroup: there is no group {value!r} on this machine") from None


def resolve(user: int | str | None, group: int | str | None,
            euid: int | None = None) -> RunUser:
    """The run user for these settings; `ValueError` names a setting that cannot work."""
    euid = os.geteuid() if euid is None else euid
    if euid != 0:
        return RunUser(euid, os.getegid(), False,
                       "the reconciler's own user: it is not root, so it cannot switch users")
    uid, primary, what = _user(user)
    gid = _group(group, primary)
    if uid == 0 or gid == 0:
        raise ValueError("runAsUser, runAsGroup: runs never run as root (uid or gid 0)")
    return RunUser(uid, gid, True, what)
