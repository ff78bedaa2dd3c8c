"""Cleaning up after tests of the local backend: the Job processes a test left running
(a Suspended run sleeps until told) and the Jobs' own filesystems, which would otherwise
outlive the test's folder as mounts and loop devices."""

from __future__ import annotations

from pathlib import Path

from providers.jsonfiles import read_json
from providers.local import procs, runfs


def stop_local_runs(root: Path) -> None:
    """Stop every supervisor and run recorded under the local backend's `root`, then
    unmount every Job filesystem below it."""
    for run in (p for p in root.glob("*/*") if p.is_dir()):
        supervisor = read_json(run / "supervisor.json") or {}
        procs.kill_recorded(supervisor.get("pid"), supervisor.get("ticks"))
        for rec in ((read_json(run / "status.json") or {}).get("runs") or {}).values():
            procs.kill_recorded(rec.get("pid"), rec.get("ticks"))
    runfs.detach_all(root)
