"""Tests of the local backend: a small disk to fill, and cleaning up after them (the Job
processes a test left running, since a Suspended run sleeps until told, and the Jobs' own
filesystems, which would otherwise outlive the test's folder as mounts and loop
devices)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from nodus_gitops.providers.jsonfiles import read_json
from nodus_gitops.providers.local import procs, runfs


def stop_local_runs(root: Path) -> None:
    """Stop every supervisor and run recorded under the local backend's `root`, then
    unmount every Job filesystem below it."""
    for run in (p for p in root.glob("*/*") if p.is_dir()):
        supervisor = read_json(run / "supervisor.json") or {}
        procs.kill_recorded(supervisor.get("pid"), supervisor.get("ticks"))
        for rec in ((read_json(run / "status.json") or {}).get("runs") or {}).values():
            procs.kill_recorded(rec.get("pid"), rec.get("ticks"))
    runfs.detach_all(root)


@contextmanager
def small_tmpfs(disk: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` (`24m`) mounted at `disk`: a whole disk for a test to fill; the
    test skips where tmpfs cannot be mounted. Unmounted with whatever was mounted in it."""
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                              str(disk)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        runfs.detach_all(disk)
        subprocess.run(["umount", "-l", str(disk)], check=False)
