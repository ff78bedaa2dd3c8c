"""Fixtures for the slurm backend: a real single-node cluster (start.sh, once a session,
reused when already running), a provider over a fresh directory of its shared root per
test, Job manifests running the test interpreter, and polling with deadlines.

Tests that need the cluster are marked `slurm`; they are skipped, with the reason, only
where Slurm cannot be installed or started here (not root, apt failing)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from nodus_gitops.floor.identity import (
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    MANAGED_BY_VALUE,
    ResourceKey,
)
from nodus_gitops.providers.base import Observed, Workload
from nodus_gitops.providers.slurm import SlurmConfig, SlurmProvider

from tests.support.waiting import wait_for

HERE = Path(__file__).resolve().parent
PROJECT = "team-a"
INSTANCE = "test"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers",
                            "slurm: needs the test Slurm cluster (tests/providers/slurm/start.sh)")


@dataclass(frozen=True)
class Cluster:
    env: dict[str, str]  # SLURM_URL, SLURM_USER, SLURM_JWT, SLURM_CONF, NODUS_SLURM_ROOT, ...
    session_root: Path

    def settings(self, root: Path, **extra: Any) -> dict[str, Any]:
        return {"type": "slurm", "url": self.env["SLURM_URL"], "user": self.env["SLURM_USER"],
                "tokenEnv": "NODUS_TEST_UNSET_TOKEN",
                "tokenFile": self.env["NODUS_SLURM_TOKEN_FILE"], "root": str(root),
                "slurmConf": self.env["SLURM_CONF"], "partitions": {"us": "debug", "eu": "eu"},
                **extra}

    def run(self, *argv: str) -> str:
        """A Slurm client command (squeue, scontrol) against the test cluster."""
        env = {**os.environ, "SLURM_CONF": self.env["SLURM_CONF"]}
        env.pop("SLURM_JWT", None)
        return subprocess.run(argv, capture_output=True, text=True, env=env,
                              check=True, timeout=30).stdout


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[Cluster]:
    try:
        proc = subprocess.run([str(HERE / "start.sh")], capture_output=True, text=True,
                              timeout=300)
    except subprocess.TimeoutExpired:
        pytest.fail("tests/providers/slurm/start.sh did not finish in 300 s")
    if proc.returncode in (2, 3):
        pytest.skip(f"Slurm cannot be installed or started here: {proc.stderr.strip()}")
    if proc.returncode != 0:
        pytest.fail(f"tests/providers/slurm/start.sh failed ({proc.returncode}): "
                    f"{proc.stderr[-2000:]}")
    env = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    session_root = Path(env["NODUS_SLURM_ROOT"]) / f"pytest-{uuid.uuid4().hex[:8]}"
    session_root.mkdir(parents=True)
    yield Cluster(env, session_root)
    shutil.rmtree(session_root, ignore_errors=True)


def manifest(name: str, code: str | None = None, *, command: list[str] | None = None,
             **spec: Any) -> dict[str, Any]:
    cmd = command if command is not None else [sys.executable, "-c", code or "pass"]
    return {
        "apiVersion": "nodus.dev/v1", "kind": "Job",
        "metadata": {"name": name,
                     "labels": {LABEL_MANAGED_BY: MANAGED_BY_VALUE, LABEL_INSTANCE: INSTANCE}},
        "spec": {"command": cmd, **spec},
    }


class Slurm:
    """A provider over one test's directory, plus helpers."""

    def __init__(self, cluster: Cluster, root: Path, **extra: Any) -> None:
        self.cluster = cluster
        self.root = root
        self.config = SlurmConfig.from_settings("slurm", cluster.settings(root, **extra))
        self.provider = SlurmProvider(self.config)
        self.keys: list[ResourceKey] = []

    def key(self, name: str) -> ResourceKey:
        k = ResourceKey("Job", PROJECT, name)
        self.keys.append(k)
        return k

    def create(self, name: str, code: str | None = None, *, idem: str | None = None,
               **spec: Any) -> ResourceKey:
        k = self.key(name)
        self.provider.create(Workload(k, manifest(name, code, **spec), "h"), idem or f"{name}-1")
        return k

    def patch(self, k: ResourceKey, **changes: Any) -> Observed:
        doc = (self.root / k.project / k.name / "job.json").read_text()
        import json

        m = json.loads(doc)["manifest"]
        m["spec"].update(changes)
        return self.provider.patch(Workload(k, m, "h2"), {"spec": changes})

    def wait(self, k: ResourceKey, until: Callable[[Observed], bool] | str | None = None,
             timeout: float = 60.0, provider: Any = None) -> Observed:
        last, held = wait_for(provider or self.provider, k, until, timeout, interval=0.2)
        if held:
            return last
        raise AssertionError(f"timed out waiting on {k}: last {last}")

    def job_ids(self, k: ResourceKey) -> list[int]:
        import json

        doc = json.loads((self.root / k.project / k.name / "job.json").read_text())
        return [s["jobId"] for s in doc["submissions"]]

    def slurm_states(self, job_id: int) -> list[str]:
        return [t.state for t in self.provider.client.job(job_id) or []]

    def cleanup(self) -> None:
        for k in self.keys:
            try:
                self.provider.delete(k)
            except Exception:  # noqa: BLE001 - best effort: never hide the test's own failure
                pass


@pytest.fixture
def slurm_factory(slurm_cluster: Cluster, request: pytest.FixtureRequest
                  ) -> Iterator[Callable[..., Slurm]]:
    made: list[Slurm] = []

    def make(**extra: Any) -> Slurm:
        root = slurm_cluster.session_root / f"{request.node.name[:40]}-{len(made)}"
        h = Slurm(slurm_cluster, root, **extra)
        made.append(h)
        return h

    yield make
    for h in made:
        h.cleanup()


@pytest.fixture
def slurm(slurm_factory: Callable[..., Slurm]) -> Slurm:
    return slurm_factory()
