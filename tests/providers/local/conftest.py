"""Fixtures for the local backend: a provider over a temporary root, Job manifests
running the test interpreter, and polling with deadlines (never fixed long sleeps)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from nodus_gitops.floor.identity import (
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    MANAGED_BY_VALUE,
    ResourceKey,
)
from nodus_gitops.floor.phases import is_terminal
from nodus_gitops.providers.base import Observed, Workload
from nodus_gitops.providers.jsonfiles import read_json
from nodus_gitops.providers.local import procs, runfs
from nodus_gitops.providers.local.config import LocalConfig
from nodus_gitops.providers.local.provider import LocalProvider
from nodus_gitops.providers.local.rundir import RunDir

from tests.support.waiting import wait_for

PROJECT = "team-a"
INSTANCE = "test"
HAS_BWRAP = shutil.which("bwrap") is not None


def manifest(
    name: str, code: str | None = None, *, command: list[str] | None = None, **spec: Any
) -> dict[str, Any]:
    cmd = command if command is not None else [sys.executable, "-c", code or "pass"]
    return {
        "apiVersion": "nodus.dev/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY_VALUE, LABEL_INSTANCE: INSTANCE},
        },
        "spec": {"command": cmd, **spec},
    }


class Local:
    """A provider over `root` plus helpers; `reopen()` is a restarted reconciler."""

    def __init__(self, root: Path, config: LocalConfig):
        self.root = root
        self.config = config
        self.provider = LocalProvider(root, config)
        self.keys: list[ResourceKey] = []

    def reopen(self, **changes: Any) -> LocalProvider:
        return LocalProvider(self.root, replace(self.config, **changes))

    def create(
        self, name: str, code: str | None = None, *, key: str | None = None, **spec: Any
    ) -> ResourceKey:
        k = ResourceKey("Job", PROJECT, name)
        self.keys.append(k)
        self.provider.create(Workload(k, manifest(name, code, **spec), "hash"), key or f"{name}-1")
        return k

    def patch(self, k: ResourceKey, **spec_changes: Any) -> Observed:
        doc = read_json(self.run(k).manifest)
        m = doc["manifest"]
        m["spec"].update(spec_changes)
        return self.provider.patch(Workload(k, m, "hash2"), {"spec": spec_changes})

    def run(self, k: ResourceKey) -> RunDir:
        return RunDir.for_key(self.root, k)

    def wait(
        self,
        k: ResourceKey,
        until: Callable[[Observed], bool] | str | None = None,
        timeout: float = 20.0,
        provider: LocalProvider | None = None,
    ) -> Observed:
        """Poll get() until `until` holds (a phase name, a predicate, or terminal)."""
        last, held = wait_for(provider or self.provider, k, until, timeout, interval=0.03)
        if held:
            if is_terminal(last.phase):  # its files, unmounted as it finished, read-only
                run = self.run(k)
                runfs.readable(run.disk)
            return last
        events = self.run(k).read_events() if self.run(k).exists() else []
        raise AssertionError(f"timed out waiting on {k}: last {last}\nevents: {events}")

    def log(self, k: ResourceKey, index: int = 0) -> str:
        return "\n".join(self.provider.logs(k, index))

    def supervisor_pid(self, k: ResourceKey) -> int:
        return read_json(self.run(k).supervisor)["pid"]

    def cleanup(self) -> None:
        for k in self.keys:
            run = self.run(k)
            sup = read_json(run.supervisor) or {}
            procs.kill_recorded(sup.get("pid"), sup.get("ticks"))
            for rec in ((read_json(run.status) or {}).get("runs") or {}).values():
                procs.kill_recorded(rec.get("pid"), rec.get("ticks"))
        runfs.detach_all(self.root)  # the Jobs' own filesystems, so that none outlives the test


@contextmanager
def writable(run: RunDir) -> Iterator[None]:
    """A finished Job's files made writable for a moment, as only root can: its own
    filesystem is mounted read-only once the Job finished."""
    remount = runfs.mounted(run.files) and bool(os.statvfs(run.files).f_flag & os.ST_RDONLY)
    if remount:
        runfs.detach(run.files)
        runfs.mount_image(run.image, run.files)
    try:
        yield
    finally:
        if remount:
            runfs.detach(run.files)
            runfs.readable(run.disk)


def local_config(**changes: Any) -> LocalConfig:
    """The tests' settings: short grace and poll, no GPU detection, and no pre-started
    supervisors by default (they cost CPU the suite needs)."""
    config = LocalConfig(suspend_grace_seconds=2.0, detect_gpus=False, poll_seconds=0.05,
                         prestart_supervisor=False)
    return replace(config, **changes)


@pytest.fixture
def local_factory(tmp_path: Path) -> Iterator[Callable[..., Local]]:
    made: list[Local] = []

    def make(**changes: Any) -> Local:
        h = Local(tmp_path / f"root{len(made)}", local_config(**changes))
        made.append(h)
        return h

    yield make
    for h in made:
        h.cleanup()


@pytest.fixture
def local(local_factory: Callable[..., Local]) -> Local:
    return local_factory()
