"""A sync never lies (issue 15): one regression example for each case of the issue that
the sync machine (test_sync_machine.py) can reach, asserted as a user sees it: the sync
row's result and message, the binding's last error, and the commit's sync check.

The repository is served over smart HTTP, the store is SQLite, the provider fake."""

from __future__ import annotations

from pathlib import Path

import yaml
from nodus_gitops import metrics
from nodus_gitops.config import Settings
from nodus_gitops.floor.identity import ANNOTATION_SPEC_HASH, ResourceKey
from nodus_gitops.plan import spec_hash
from nodus_gitops.providers.base import FakeProvider, Observed
from nodus_gitops.wiring import build_sync

from tests.fixtures_git import ManifestRepo
from tests.reconciler.test_reconcile import job
from tests.reconciler.test_sync_machine import BINDING, ROOT, SyncRig, crash_text

A = ResourceKey("Job", "team-a", "a")
REPLACE = "    nodus.dev/on-change: Replace\n"


def push(repo: ManifestRepo, files: dict[str, str | None], message: str = "change") -> str:
    """Write (or with None, remove) files under the binding's folder; commit and push."""
    for path, text in files.items():
        if text is None:
            repo.remove(f"{ROOT}/{path}")
        else:
            repo.write(f"{ROOT}/{path}", text)
    sha = repo.commit(message)
    repo.push()
    return sha


def applied_first(repo: ManifestRepo, tmp: Path, files: dict[str, str],
                  provider: FakeProvider | None = None) -> SyncRig:
    rig = SyncRig(repo.push_url, tmp, provider)
    push(repo, files, "first")
    _, crash = rig.reconcile()
    assert crash is None and rig.last_sync().result == "applied"
    return rig


def assert_incremental_is_full(rig: SyncRig) -> None:
    assert rig.plans, "no plan was made"
    for seen in rig.plans:
        assert seen.incremental.to_dict(seen.commit) == seen.full.to_dict(seen.commit)


# Case 1: a list- or mapping-valued change crashed apply (a Change holding a list was a
# dict key) and every crashed poll was recorded as a green noop.
def test_a_list_valued_change_is_reported_blocked_not_noop(manifest_repo: ManifestRepo,
                                                           tmp_path: Path) -> None:
    rig = applied_first(manifest_repo, tmp_path, {"a.yaml": job("a")})
    sha = push(manifest_repo, {"a.yaml": job("a").replace("pass]", "pass, --verbose]")})
    _, crash = rig.reconcile()
    row = rig.last_sync()
    check = rig.sync_checks(sha)[-1]
    assert (row.commit, row.result) == (sha, "blocked"), (row.result, row.message, crash)
    assert "1 blocked" in row.message
    assert check.state.value == "failure" and "spec.command" in check.summary
    assert rig.provider.manifests[A]["spec"]["command"] == ["python3", "-c", "pass"]
    assert_incremental_is_full(rig)
    assert crash is None


def test_a_mapping_valued_change_is_reported_blocked_not_noop(manifest_repo: ManifestRepo,
                                                              tmp_path: Path) -> None:
    rig = applied_first(manifest_repo, tmp_path, {"a.yaml": job("a")})
    sha = push(manifest_repo, {"a.yaml": job("a", "  env: {LOG_LEVEL: debug}\n")})
    _, crash = rig.reconcile()
    row = rig.last_sync()
    assert (row.commit, row.result) == (sha, "blocked"), (row.result, row.message, crash)
    assert rig.sync_checks(sha)[-1].state.value == "failure"
    assert "spec.env" in rig.sync_checks(sha)[-1].summary
    assert crash is None


def test_a_list_valued_change_with_replace_says_replaced(manifest_repo: ManifestRepo,
                                                         tmp_path: Path) -> None:
    rig = applied_first(manifest_repo, tmp_path, {"a.yaml": job("a", annotations=REPLACE)})
    new = job("a", annotations=REPLACE).replace("pass]", "pass, --verbose]")
    sha = push(manifest_repo, {"a.yaml": new})
    _, crash = rig.reconcile()
    row = rig.last_sync()
    check = rig.sync_checks(sha)[-1]
    assert (row.result, row.message) == ("applied", "1 replaced"), (row.message, crash)
    assert check.state.value == "success" and "replaced" in check.title
    assert rig.provider.manifests[A]["spec"]["command"][-1] == "--verbose"
    assert crash is None


# Case 2: any exception that is not a ProviderError was recorded and posted as a noop.
def test_a_crash_is_recorded_as_an_error_with_its_message(manifest_repo: ManifestRepo,
                                                          tmp_path: Path) -> None:
    def handler(op: str, _key: ResourceKey, _arg: object) -> Observed | None:
        if op == "create":
            raise RuntimeError("backend exploded\nsecond line of the trace")
        return None

    rig = SyncRig(manifest_repo.push_url, tmp_path, FakeProvider(handler))
    sha = push(manifest_repo, {"a.yaml": job("a")})
    errors = metrics.REGISTRY.get_sample_value(
        "nodus_gitops_syncs_total", {"binding": BINDING, "result": "error"}) or 0.0
    rig.reconcile()
    row = rig.last_sync()
    assert metrics.REGISTRY.get_sample_value(
        "nodus_gitops_syncs_total", {"binding": BINDING, "result": "error"}) == errors + 1
    binding = rig.store.get_binding(BINDING)
    check = rig.sync_checks(sha)[-1]
    assert (row.commit, row.result) == (sha, "error"), (row.result, row.message)
    assert "RuntimeError: backend exploded" in row.message
    assert "second line" not in row.message  # one line
    assert binding.last_error and "backend exploded" in binding.last_error
    assert binding.last_applied_commit != sha
    assert check.state.value in ("failure", "error") and "backend exploded" in check.summary
    # Retried later (after its backoff), and never reported as success.
    _, crash = rig.reconcile()
    assert crash is None, f"the next poll crashed:\n{crash_text(crash)}"
    again = rig.last_sync()
    assert again.id != row.id and again.result == "error"
    assert all(c.state.value != "success" for c in rig.sync_checks(sha))


# Case 3: after a commit touching no manifest, deleting b was refused as "would delete
# every resource of the binding" though a remained (the incremental plan judged the
# touched subset as the whole tree).
def test_delete_after_a_commit_touching_no_manifest(manifest_repo: ManifestRepo,
                                                    tmp_path: Path) -> None:
    rig = applied_first(manifest_repo, tmp_path, {"a.yaml": job("a"), "b.yaml": job("b")})
    manifest_repo.write("README.md", "no manifest here\n")
    manifest_repo.commit("docs")
    manifest_repo.push()
    rig.reconcile()
    assert rig.last_sync().result == "noop"
    rig.plans.clear()
    sha = push(manifest_repo, {"b.yaml": None}, "remove b")
    rig.reconcile()
    row = rig.last_sync()
    check = rig.sync_checks(sha)[-1]
    assert (row.commit, row.result) == (sha, "applied"), (row.result, row.message)
    assert "1 deleted" in row.message and "blocked" not in row.message
    assert check.state.value == "success"
    assert {k.name for k in rig.provider.resources} == {"a"}
    assert_incremental_is_full(rig)


# Case 4: an invalid tip was re-validated, re-recorded and re-posted at every poll.
def test_an_unchanged_invalid_tip_is_recorded_once(manifest_repo: ManifestRepo,
                                                   tmp_path: Path) -> None:
    rig = applied_first(manifest_repo, tmp_path, {"a.yaml": job("a")})
    sha = push(manifest_repo, {"bad.yaml": job("bad", "  timeout: 10x\n")})
    polls = []
    for _ in range(3):
        _, crash = rig.reconcile()
        assert crash is None
        polls.append(rig.store.get_binding(BINDING).last_poll_at)
    rows = [s for s in rig.store.list_syncs(BINDING) if s.commit == sha]
    assert [s.result for s in rows] == ["invalid"]
    assert "problem" in rows[0].message
    assert len(rig.sync_checks(sha)) == 1 and rig.sync_checks(sha)[0].state.value == "failure"
    assert polls[0] < polls[1] < polls[2]  # the polls are recorded, as polls


# Case 7: with on-change Replace, apply wrote the new record, then deleted it under the
# same key: the Job vanished from the inventory while it ran on the backend.
def test_replace_keeps_the_job_in_the_inventory(manifest_repo: ManifestRepo,
                                                tmp_path: Path) -> None:
    rig = applied_first(manifest_repo, tmp_path, {"a.yaml": job("a", annotations=REPLACE)})
    new = job("a", annotations=REPLACE).replace("python:3.12-slim", "python:3.13-slim")
    sha = push(manifest_repo, {"a.yaml": new})
    rig.reconcile()
    row = rig.last_sync()
    assert (row.result, row.message) == ("applied", "1 replaced")
    assert rig.sync_checks(sha)[-1].state.value == "success"
    record = rig.store.get_resource(A)
    assert record is not None, "the replaced Job is missing from the inventory"
    wanted = spec_hash(yaml.safe_load(new))
    assert record.spec_hash == wanted
    assert rig.provider.manifests[A]["metadata"]["annotations"][ANNOTATION_SPEC_HASH] == wanted
    assert [op for op, k in rig.provider.calls if k == A and op != "get"] == [
        "create", "delete", "create"]


# A run removed from the backend outside the reconciler was shown Running, with a green
# check, forever.
def test_a_run_gone_from_the_backend_turns_the_check_red(manifest_repo: ManifestRepo,
                                                         tmp_path: Path) -> None:
    rig = applied_first(manifest_repo, tmp_path, {"a.yaml": job("a")})
    rig.provider.resources.pop(A)  # deleted by hand on the backend
    rig.sync.refresh()
    record = rig.store.get_resource(A)
    assert record.deleted and record.reason == "Missing"
    rig.reconcile()  # the same tip, judged again
    row = rig.last_sync()
    assert row.result == "blocked" and "missing from the backend" in str(row.plan)
    assert rig.sync_checks(row.commit)[-1].state.value == "failure"
    assert A not in rig.provider.resources  # nothing re-run without selfHeal


def test_self_heal_creates_a_run_gone_from_the_backend(manifest_repo: ManifestRepo,
                                                      tmp_path: Path) -> None:
    rig = SyncRig(manifest_repo.push_url, tmp_path, self_heal=True)
    push(manifest_repo, {"a.yaml": job("a")}, "first")
    rig.reconcile()
    rig.provider.resources.pop(A)
    rig.sync.refresh()
    rig.reconcile()
    row = rig.last_sync()
    assert row.result == "applied", row.message
    assert A in rig.provider.resources and not rig.store.get_resource(A).deleted


# A process killed in the middle of a sync left it pending in the history forever.
def test_a_sync_left_pending_by_a_stopped_process_reads_as_an_error(
        manifest_repo: ManifestRepo, tmp_path: Path) -> None:
    rig = applied_first(manifest_repo, tmp_path, {"a.yaml": job("a")})
    sha = push(manifest_repo, {"b.yaml": job("b")})
    stuck = rig.store.start_sync(BINDING, sha)  # then the process died
    again = build_sync(Settings(state_dir=tmp_path, instance="test"), rig.store, rig.binding,
                       rig.provider)
    again.reconcile_once()
    left = rig.store.get_sync(stuck)
    assert (left.result, left.message) == ("error", "the reconciler stopped before this "
                                           "sync finished") and left.finished_at
    assert rig.store.last_sync(BINDING).result == "applied"  # and its commit judged anew
