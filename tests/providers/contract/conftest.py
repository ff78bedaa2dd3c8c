"""One contract for every compute backend: `backend` yields each in turn, ready for the
cases of test_contract.py.

- fake: `providers.base.FakeProvider` as the core's tests use it (no handler);
- local: real processes under bubblewrap (tests/providers/local's harness);
- slurm: the test cluster (tests/providers/slurm's harness; skipped, saying why, where
  it cannot start);
- nodus: the hosted API, served by respx from an in-memory API that keeps Jobs in the
  shapes of tests/testdata/nodus/ (tests/providers/nodus's fixtures).

A `Backend` is the provider plus what only that backend can tell: how long a phase may
take to come, how many runs it started for a key, what still runs after a delete, and
how the answer to a create gets lost on its way back to the caller.
"""

from __future__ import annotations

import copy
import json
import re
import time
import uuid
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import unquote

import httpx
import pytest
import respx
from nodus_gitops.floor.errors import TransientError
from nodus_gitops.floor.identity import (
    ANNOTATION_SPEC_HASH,
    API_VERSION,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    MANAGED_BY_VALUE,
    ResourceKey,
)
from nodus_gitops.providers.base import FakeProvider, Observed, Provider, Workload
from nodus_gitops.providers.jsonfiles import read_json
from nodus_gitops.providers.local import procs
from nodus_gitops.providers.nodus import NodusProvider
from nodus_gitops.providers.nodus.objects import PLURALS
from nodus_gitops.providers.slurm import SlurmProvider
from nodus_gitops.providers.slurm.client import SlurmClient

from tests.providers.local.conftest import (
    HAS_BWRAP,
    Local,
    local_factory,  # noqa: F401 - a fixture, asked for by name
)
from tests.providers.nodus.conftest import API_KEY, RECORDED_URL, fixture, status
from tests.providers.slurm.conftest import (
    Slurm,
    slurm_cluster,  # noqa: F401 - fixtures, asked for by name
    slurm_factory,  # noqa: F401
)
from tests.support.waiting import Until, wait_for

PROJECT = "team-a"
INSTANCE = "test"
GONE_DEADLINE = 30.0  # seconds a deleted Job's processes may take to go


def job_manifest(name: str, command: str, spec_hash: str, **spec: Any) -> dict[str, Any]:
    """A Job as a repository holds it, with the labels and annotations the reconciler
    sets: a shell command (the seeds: pipelines need an explicit shell), a time limit
    and a spending cap."""
    return {
        "apiVersion": API_VERSION,
        "kind": "Job",
        "metadata": {
            "name": name,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY_VALUE, LABEL_INSTANCE: INSTANCE},
            "annotations": {ANNOTATION_SPEC_HASH: spec_hash},
        },
        "spec": {"command": ["sh", "-c", command], "timeout": "10m", "maxCostUSD": "1",
                 **spec},
    }


class Backend(ABC):
    """A provider ready for the contract's cases, and what only its backend can tell."""

    name: str

    def __init__(self, provider: Provider) -> None:
        self.provider = provider

    def job(self, name: str, command: str, **spec: Any) -> Workload:
        key = ResourceKey("Job", PROJECT, name)
        return Workload(key, job_manifest(name, command, "h1", **spec), "h1")

    @abstractmethod
    def wait(self, key: ResourceKey, until: Until = None) -> Observed:
        """Poll get() until `until` holds (a phase, a predicate, or by default a terminal
        phase), within this backend's deadline; AssertionError with the last answer."""

    def create_losing_answer(self, workload: Workload, idempotency_key: str) -> None:
        """Create `workload`; the caller never learns the answer."""
        self.provider.create(workload, idempotency_key)  # returned, and never read

    @abstractmethod
    def started(self, key: ResourceKey) -> int:
        """How many workloads the backend itself started for `key`."""

    @abstractmethod
    def identity(self, key: ResourceKey) -> str:
        """What the backend calls the workload it holds for `key`, from its own records
        (not through the provider): a new one means the workload was replaced."""

    @abstractmethod
    def runs(self, key: ResourceKey) -> list[Any]:
        """What runs for `key` now, as the backend itself knows it."""

    @abstractmethod
    def left_running(self, runs: list[Any]) -> list[Any]:
        """Those of `runs` still running once they had time to stop."""


def _polled(provider: Provider, key: ResourceKey, until: Until, timeout: float,
            interval: float) -> Observed:
    last, held = wait_for(provider, key, until, timeout, interval)
    if not held:
        raise AssertionError(f"timed out waiting on {key}: last {last}")
    return last


# -- fake ----------------------------------------------------------------------------


class FakeBackend(Backend):
    name = "fake"

    def __init__(self) -> None:
        self.fake = FakeProvider()
        super().__init__(self.fake)

    def wait(self, key: ResourceKey, until: Until = None) -> Observed:
        return _polled(self.fake, key, until, timeout=2.0, interval=0.01)

    def started(self, key: ResourceKey) -> int:
        # The fake calls its handler with "create" for each resource it makes.
        return self.fake.calls.count(("create", key))

    def identity(self, key: ResourceKey) -> str:
        return self.fake.resources[key].provider_id

    def runs(self, key: ResourceKey) -> list[Any]:
        return [key] if key in self.fake.resources else []

    def left_running(self, runs: list[Any]) -> list[Any]:
        return [k for k in runs if k in self.fake.resources]


# -- local ---------------------------------------------------------------------------


class LocalBackend(Backend):
    name = "local"

    def __init__(self, local: Local) -> None:
        self.local = local
        super().__init__(local.provider)

    def job(self, name: str, command: str, **spec: Any) -> Workload:
        workload = super().job(name, command, **spec)
        self.local.keys.append(workload.key)  # its processes are ended after the test
        return workload

    def wait(self, key: ResourceKey, until: Until = None) -> Observed:
        return self.local.wait(key, until, timeout=30.0)

    def started(self, key: ResourceKey) -> int:
        return [e["reason"] for e in self.local.provider.events(key)].count("Created")

    def identity(self, key: ResourceKey) -> str:
        return read_json(self.local.run(key).manifest)["uid"]

    def runs(self, key: ResourceKey) -> list[tuple[int, int]]:
        """The (pid, start ticks) of the Job's supervisor and of each run of its command."""
        run = self.local.run(key)
        records = [read_json(run.supervisor) or {}]
        records += ((read_json(run.status) or {}).get("runs") or {}).values()
        return [(r["pid"], r["ticks"]) for r in records if r.get("pid")]

    def left_running(self, runs: list[Any]) -> list[Any]:
        deadline = time.monotonic() + GONE_DEADLINE
        alive = runs
        while alive and time.monotonic() < deadline:
            alive = [(pid, ticks) for pid, ticks in alive if procs.is_same_process(pid, ticks)]
            time.sleep(0.05)
        return alive


# -- slurm ---------------------------------------------------------------------------

SLURM_ACTIVE = frozenset({"PENDING", "CONFIGURING", "RUNNING", "SUSPENDED", "COMPLETING",
                          "REQUEUED", "RESIZING", "SIGNALING", "STOPPED", "STAGE_OUT"})


class AnswerLosingClient(SlurmClient):
    """The slurmrestd client, over a connection that can drop the answer to a submission
    after slurmctld took the job (`lose_next`)."""

    lose_next = False

    def submit(self, script: str, job: dict[str, Any]) -> int:
        job_id = super().submit(script, job)
        if self.lose_next:
            self.lose_next = False
            raise TransientError(f"the answer to submitting Slurm job {job_id} was lost")
        return job_id


class SlurmBackend(Backend):
    name = "slurm"

    def __init__(self, slurm: Slurm) -> None:
        self.slurm = slurm
        self.client = AnswerLosingClient(slurm.config)
        slurm.provider.close()
        slurm.provider = SlurmProvider(slurm.config, client=self.client)  # it deletes our keys
        super().__init__(slurm.provider)

    def job(self, name: str, command: str, **spec: Any) -> Workload:
        workload = super().job(name, command, **spec)
        self.slurm.keys.append(workload.key)
        return workload

    def wait(self, key: ResourceKey, until: Until = None) -> Observed:
        return self.slurm.wait(key, until, timeout=90.0)

    def create_losing_answer(self, workload: Workload, idempotency_key: str) -> None:
        self.client.lose_next = True
        with pytest.raises(TransientError, match="was lost"):
            self.provider.create(workload, idempotency_key)

    def _record(self, key: ResourceKey) -> dict[str, Any]:
        return json.loads((self.slurm.root / key.project / key.name / "job.json").read_text())

    def started(self, key: ResourceKey) -> int:
        """The cluster's jobs of this Job's record (its name, its uid in the comment)."""
        doc = self._record(key)
        out = self.slurm.cluster.run("squeue", "-h", "-t", "all", "--name", doc["name"],
                                     "-o", "%i|%k")
        return sum(f"uid={doc['uid']}" in line for line in out.splitlines())

    def identity(self, key: ResourceKey) -> str:
        return self._record(key)["uid"]

    def runs(self, key: ResourceKey) -> list[int]:
        return self.slurm.job_ids(key)

    def left_running(self, runs: list[Any]) -> list[Any]:
        deadline = time.monotonic() + GONE_DEADLINE
        alive = runs
        while alive and time.monotonic() < deadline:
            alive = [j for j in alive if SLURM_ACTIVE & set(self.slurm.slurm_states(j))]
            time.sleep(0.2)
        return alive


# -- nodus ---------------------------------------------------------------------------

COLLECTION = re.compile(r"^/apis/nodus\.dev/v1/namespaces/(?P<project>[^/]+)/"
                        r"(?P<plural>jobs|pipelines|sweeps)(?:/(?P<name>[^/]+))?$")
KIND_OF = {plural: kind for kind, plural in PLURALS.items()}
MERGE_PATCH = "application/merge-patch+json"
# The platform's next phase toward what spec.state asks (the seeds' Jobs page: Queued,
# Provisioning, Running; Suspending, Suspended; Cancelling, Cancelled).
TOWARD: dict[str, dict[str, str]] = {
    "Running": {"Queued": "Provisioning", "Provisioning": "Running", "Suspended": "Queued"},
    "Suspended": {"Queued": "Suspended", "Provisioning": "Suspending",
                  "Running": "Suspending", "Suspending": "Suspended"},
    "Cancelled": {**dict.fromkeys(("Queued", "Provisioning", "Running", "Suspending",
                                   "Suspended"), "Cancelling"), "Cancelling": "Cancelled"},
}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: `patch` merged into `target` (null removes)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    merged = dict(target) if isinstance(target, dict) else {}
    for name, value in patch.items():
        if value is None:
            merged.pop(name, None)
        else:
            merged[name] = merge_patch(merged.get(name), value)
    return merged


class NodusApi:
    """The hosted Nodus API of one project, for respx to serve: Jobs kept in memory in
    the shapes of tests/testdata/nodus/ (and no Pipelines or Sweeps), a create replayed
    for an Idempotency-Key it has answered, and the platform moving each Job one phase
    per read toward its spec.state. `lose_next_answer()` drops the answer to the next
    request after it was handled, as a connection that breaks on the way back."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, dict[str, Any]]] = {p: {} for p in KIND_OF}
        self.jobs = self.objects["jobs"]
        self.created: Counter[str] = Counter()  # Job name -> Jobs created under it
        self._answered: dict[str, dict[str, Any]] = {}  # Idempotency-Key -> first answer
        self._version = 1000
        self._lose_next = False

    def lose_next_answer(self) -> None:
        self._lose_next = True

    def serve(self, request: httpx.Request) -> httpx.Response:
        response = self._handle(request)
        if self._lose_next:
            self._lose_next = False
            raise httpx.ReadTimeout("the connection dropped before the answer came",
                                    request=request)
        return response

    def _handle(self, request: httpx.Request) -> httpx.Response:
        if request.headers.get("Authorization") != f"Bearer {API_KEY}":
            return httpx.Response(401, json=fixture("status-unauthorized.json"))
        found = COLLECTION.match(request.url.path)
        if found is None or unquote(found["project"]) != PROJECT:
            return httpx.Response(404, json=status("not-found", "Job", request.url.path))
        kind, objects = KIND_OF[found["plural"]], self.objects[found["plural"]]
        name = unquote(found["name"]) if found["name"] else None
        if name is None:
            if request.method == "POST" and kind == "Job":
                return self._create(request)
            if request.method == "GET":
                return self._list(kind, objects, request)
            return httpx.Response(405)
        if name not in objects:
            return httpx.Response(404, json=status("not-found", kind, name))
        if request.method == "GET":
            self._step(objects[name])
            return httpx.Response(200, json=objects[name])
        if request.method == "PATCH":
            return self._patch(objects[name], request)
        if request.method == "DELETE":
            del objects[name]
            return httpx.Response(200, json={"kind": "Status", "apiVersion": "v1",
                                             "metadata": {}, "status": "Success", "code": 200})
        return httpx.Response(405)

    def _next_version(self) -> str:
        self._version += 1
        return str(self._version)

    def _create(self, request: httpx.Request) -> httpx.Response:
        idempotency_key = request.headers.get("Idempotency-Key")
        if idempotency_key in self._answered:
            return httpx.Response(201, json=self._answered[idempotency_key])
        body = json.loads(request.content)
        name = body["metadata"]["name"]
        if name in self.jobs:
            return httpx.Response(409, json=status("already-exists", "Job", name))
        served = fixture("job-hello.json")  # what the platform adds to a created Job
        defaults = {k: served["spec"][k] for k in ("completions", "parallelism", "state",
                                                   "recovery")}
        job = {
            "apiVersion": API_VERSION, "kind": "Job",
            "metadata": {**body["metadata"], "namespace": PROJECT, "uid": str(uuid.uuid4()),
                         "resourceVersion": self._next_version(), "generation": 1,
                         "creationTimestamp": served["metadata"]["creationTimestamp"]},
            "spec": {**defaults, **body["spec"]},
            "status": {"phase": "Queued", "attempt": 0, "costUSD": "0",
                       "estimate": served["status"]["estimate"]},
        }
        self.jobs[name] = job
        self.created[name] += 1
        if idempotency_key:
            self._answered[idempotency_key] = copy.deepcopy(job)
        return httpx.Response(201, json=job)

    def _list(self, kind: str, objects: dict[str, dict[str, Any]],
              request: httpx.Request) -> httpx.Response:
        wanted = dict(term.split("=", 1) for term in
                      request.url.params.get("labelSelector", "").split(",") if term)
        items = [obj for obj in objects.values()
                 if all(obj["metadata"].get("labels", {}).get(k) == v
                        for k, v in wanted.items())]
        return httpx.Response(200, json={"apiVersion": API_VERSION, "kind": f"{kind}List",
                                         "metadata": {"resourceVersion": str(self._version)},
                                         "items": items})

    def _patch(self, job: dict[str, Any], request: httpx.Request) -> httpx.Response:
        if request.headers.get("Content-Type") != MERGE_PATCH:
            return httpx.Response(415)
        patch = json.loads(request.content)
        state_before = job["spec"].get("state")
        for section in ("metadata", "spec"):
            if section in patch:
                job[section] = merge_patch(job[section], patch[section])
        job["metadata"]["resourceVersion"] = self._next_version()
        if "spec" in patch:
            job["metadata"]["generation"] += 1
        if job["spec"].get("state") != state_before:
            self._step(job)  # the platform takes a new spec.state at once
        return httpx.Response(200, json=job)

    @staticmethod
    def _step(job: dict[str, Any]) -> None:
        toward = TOWARD.get(job["spec"].get("state") or "Running", {})
        phase = job["status"]["phase"]
        job["status"]["phase"] = toward.get(phase, phase)


class NodusBackend(Backend):
    name = "nodus"

    def __init__(self) -> None:
        self.api = NodusApi()
        super().__init__(NodusProvider.from_settings(
            "nodus", {"url": RECORDED_URL}, environ={"NODUS_API_KEY": API_KEY}))

    def wait(self, key: ResourceKey, until: Until = None) -> Observed:
        return _polled(self.provider, key, until, timeout=5.0, interval=0.0)

    def create_losing_answer(self, workload: Workload, idempotency_key: str) -> None:
        self.api.lose_next_answer()
        with pytest.raises(TransientError, match="timed out"):
            self.provider.create(workload, idempotency_key)
        assert workload.key.name in self.api.jobs  # it arrived: only the answer was lost

    def started(self, key: ResourceKey) -> int:
        return self.api.created[key.name]

    def identity(self, key: ResourceKey) -> str:
        return self.api.jobs[key.name]["metadata"]["uid"]

    def runs(self, key: ResourceKey) -> list[Any]:
        return [key.name] if key.name in self.api.jobs else []

    def left_running(self, runs: list[Any]) -> list[Any]:
        return [name for name in runs if name in self.api.jobs]


# -- the fixture ---------------------------------------------------------------------


def _fake(request: pytest.FixtureRequest) -> Iterator[Backend]:
    yield FakeBackend()


def _local(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if not HAS_BWRAP:
        pytest.skip("bubblewrap is not installed: the local backend runs Jobs under it")
    backend = LocalBackend(request.getfixturevalue("local_factory")())
    yield backend
    backend.provider.close()


def _slurm(request: pytest.FixtureRequest) -> Iterator[Backend]:
    yield SlurmBackend(request.getfixturevalue("slurm_factory")())


def _nodus(request: pytest.FixtureRequest) -> Iterator[Backend]:
    backend = NodusBackend()
    with respx.mock(assert_all_mocked=True, assert_all_called=False) as router:
        router.route(host=httpx.URL(RECORDED_URL).host).mock(side_effect=backend.api.serve)
        yield backend
    backend.provider.close()


BACKENDS: dict[str, Callable[[pytest.FixtureRequest], Iterator[Backend]]] = {
    "fake": _fake, "local": _local, "slurm": _slurm, "nodus": _nodus}


@pytest.fixture(params=[pytest.param(name, marks=pytest.mark.slurm) if name == "slurm"
                        else name for name in BACKENDS])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """Each backend in turn, ready; what the test created is gone afterwards (the local
    and slurm harnesses end their Jobs, the fake and the API live in memory)."""
    yield from BACKENDS[request.param](request)
