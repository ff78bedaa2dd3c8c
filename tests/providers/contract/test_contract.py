"""The provider contract: the same cases against every backend (`backend`, conftest.py),
through the methods of providers.base.Provider. A case for an optional capability runs
where the backend declares it (Suspends, HasLogs, HasOutputs) and is skipped, saying
so, where it does not."""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path
from typing import Any

import pytest
from nodus_gitops.floor.errors import NotFoundError
from nodus_gitops.floor.identity import (
    ANNOTATION_SPEC_HASH,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    MANAGED_BY_VALUE,
    ResourceKey,
)
from nodus_gitops.floor.phases import Phase
from nodus_gitops.providers.base import HasLogs, HasOutputs, Observed, Suspends, Workload

from tests.providers.contract.conftest import INSTANCE, PROJECT, Backend

SLEEPER = "echo hi; sleep 300"  # outlives every case: what stops it is the backend
STARTING = (Phase.QUEUED, Phase.PROVISIONING, Phase.RUNNING)
OWNERSHIP = {LABEL_MANAGED_BY: MANAGED_BY_VALUE, LABEL_INSTANCE: INSTANCE}
NEVER_CREATED = ResourceKey("Job", PROJECT, "never-created")


def needs(backend: Backend, capability: type) -> None:
    if not isinstance(backend.provider, capability):
        pytest.skip(f"the {backend.name} backend does not declare {capability.__name__}")


def changed(workload: Workload, spec_hash: str, **spec: Any) -> tuple[Workload, dict]:
    """The next commit of `workload` with `spec` changed, and the merge patch of it."""
    manifest = copy.deepcopy(workload.manifest)
    manifest["spec"].update(spec)
    manifest["metadata"]["annotations"][ANNOTATION_SPEC_HASH] = spec_hash
    return Workload(workload.key, manifest, spec_hash), {"spec": spec}


def started(backend: Backend, workload: Workload) -> Observed:
    created = backend.provider.create(workload, f"{workload.key.name}-1")
    running = backend.wait(workload.key, Phase.RUNNING)
    assert running.provider_id == created.provider_id
    return running


def test_create_starts_the_job_owned_by_this_instance(backend: Backend) -> None:
    workload = backend.job("create-me", SLEEPER)
    created = backend.provider.create(workload, "create-me-1")
    assert created.key == workload.key
    assert created.provider_id
    assert created.phase in STARTING, created
    assert OWNERSHIP.items() <= created.labels.items()
    assert created.annotations[ANNOTATION_SPEC_HASH] == "h1"
    assert backend.wait(workload.key, Phase.RUNNING).provider_id == created.provider_id
    (owned,) = backend.provider.list_owned(PROJECT, INSTANCE)
    assert owned.key == workload.key and owned.provider_id == created.provider_id
    assert owned.manifest["spec"]["command"] == ["sh", "-c", SLEEPER]
    assert OWNERSHIP.items() <= owned.manifest["metadata"]["labels"].items()
    assert backend.provider.list_owned(PROJECT, "another-instance") == []
    assert backend.started(workload.key) == 1


def test_get_reports_the_job_and_none_for_one_never_created(backend: Backend) -> None:
    workload = backend.job("get-me", SLEEPER)
    created = backend.provider.create(workload, "get-me-1")
    got = backend.provider.get(workload.key)
    assert got is not None, "get() lost a Job create() just made"
    assert (got.key, got.provider_id) == (workload.key, created.provider_id)
    assert got.phase in STARTING, got
    assert got.manifest["metadata"]["name"] == "get-me"
    assert backend.provider.get(NEVER_CREATED) is None


def test_patch_raises_the_cap_in_place(backend: Backend) -> None:
    workload = backend.job("patch-me", SLEEPER)
    before = started(backend, workload)
    new, changes = changed(workload, "h2", maxCostUSD="2")
    patched = backend.provider.patch(new, changes)
    got = backend.provider.get(workload.key)
    for seen in (patched, got):
        assert seen.provider_id == before.provider_id, "a patch must not replace the Job"
        assert seen.manifest["spec"]["maxCostUSD"] == "2", seen
        assert seen.annotations[ANNOTATION_SPEC_HASH] == "h2", seen
    assert got.phase == Phase.RUNNING, got
    missing, changes = changed(backend.job("never-created", SLEEPER), "h2", maxCostUSD="2")
    with pytest.raises(NotFoundError):
        backend.provider.patch(missing, changes)


def test_suspend_and_resume(backend: Backend) -> None:
    needs(backend, Suspends)
    if not backend.provider.can_suspend():
        pytest.skip(f"the {backend.name} backend declares Suspends but cannot suspend here")
    workload = backend.job("pause-me", SLEEPER)
    before = started(backend, workload)
    paused, changes = changed(workload, "h2", state="Suspended")
    suspending = backend.provider.patch(paused, changes)
    assert suspending.phase in (Phase.SUSPENDING, Phase.SUSPENDED), suspending
    assert backend.wait(workload.key, Phase.SUSPENDED).provider_id == before.provider_id
    resumed, changes = changed(paused, "h3", state="Running")
    backend.provider.patch(resumed, changes)
    again = backend.wait(workload.key, Phase.RUNNING)
    assert again.provider_id == before.provider_id
    assert backend.started(workload.key) == 1


def test_cancel_stops_the_job_for_good(backend: Backend) -> None:
    workload = backend.job("cancel-me", SLEEPER)
    before = started(backend, workload)
    cancelled, changes = changed(workload, "h2", state="Cancelled")
    cancelling = backend.provider.patch(cancelled, changes)
    assert cancelling.phase in (Phase.CANCELLING, Phase.CANCELLED), cancelling
    done = backend.wait(workload.key)
    assert done.phase == Phase.CANCELLED, done
    assert done.provider_id == before.provider_id
    kept = backend.provider.get(workload.key)  # a finished Job stays until deleted
    assert kept is not None and kept.phase == Phase.CANCELLED, kept


def test_delete_stops_and_removes_the_job(backend: Backend) -> None:
    workload = backend.job("delete-me", SLEEPER)
    started(backend, workload)
    runs = backend.runs(workload.key)
    assert runs, "a running Job runs something"
    backend.provider.delete(workload.key)
    assert backend.provider.get(workload.key) is None
    assert backend.provider.list_owned(PROJECT, INSTANCE) == []
    assert backend.left_running(runs) == []
    backend.provider.delete(workload.key)  # already gone is success
    backend.provider.delete(NEVER_CREATED)


def test_create_again_after_a_lost_answer_makes_one_job(backend: Backend) -> None:
    workload = backend.job("lost-answer", SLEEPER)
    backend.create_losing_answer(workload, "lost-answer-1")
    made = backend.identity(workload.key)
    again = backend.provider.create(workload, "lost-answer-1")
    assert again.key == workload.key
    got = backend.wait(workload.key, Phase.RUNNING)
    assert got.provider_id == again.provider_id
    assert backend.identity(workload.key) == made, "the retried create replaced the Job"
    assert [o.key for o in backend.provider.list_owned(PROJECT, INSTANCE)] == [workload.key]
    assert backend.started(workload.key) == 1


def test_logs_are_the_lines_the_command_wrote(backend: Backend) -> None:
    needs(backend, HasLogs)
    workload = backend.job("log-me", "echo hi; echo there")
    backend.provider.create(workload, "log-me-1")
    done = backend.wait(workload.key)
    assert done.phase == Phase.SUCCEEDED, done
    assert list(backend.provider.logs(workload.key)) == ["hi", "there"]
    assert list(backend.provider.logs(workload.key, 0, follow=True)) == ["hi", "there"]
    info = backend.provider.log_info(workload.key)
    assert info.indexes == 1 and len(info.attempts) == 1, info
    assert info.phase in (None, Phase.SUCCEEDED), info
    with pytest.raises(NotFoundError):
        list(backend.provider.logs(NEVER_CREATED))


def test_outputs_are_copied_checked_against_their_sha256(backend: Backend,
                                                          tmp_path: Path) -> None:
    needs(backend, HasOutputs)
    workload = backend.job(
        "report", 'echo "report of $NODUS_JOB" > "$NODUS_OUTPUTS_DIR/report.txt"',
        outputs=[{"name": "report", "path": "/nodus/outputs/report.txt"}])
    backend.provider.create(workload, "report-1")
    done = backend.wait(workload.key)
    assert done.phase == Phase.SUCCEEDED, done
    expected = b"report of report\n"
    dest = tmp_path / "copied.txt"
    path, size, sha256 = backend.provider.copy_output(workload.key, "report", dest)
    assert (path, size, sha256) == (dest, len(expected), hashlib.sha256(expected).hexdigest())
    assert dest.read_bytes() == expected
    assert backend.provider.output_location(workload.key, "report").name == "report.txt"
    with pytest.raises(NotFoundError):
        backend.provider.copy_output(workload.key, "missing", tmp_path / "missing")
    with pytest.raises(NotFoundError):
        backend.provider.output_location(NEVER_CREATED, "report")
