"""Git-notes checks against a real bare repository served over smart HTTP."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pygit2
import pytest
from nodus_gitops.checks.gitnotes import NOTES_REF, GitNotesWriter
from nodus_gitops.checks.model import Annotation
from nodus_gitops.source import GitSource

from tests.checks.support import run
from tests.fixtures_git import GitHttpServer, ManifestRepo, git


class Clock:
    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def pushed(manifest_repo: ManifestRepo) -> str:
    manifest_repo.write("jobs/train.yaml", "kind: Job\n")
    sha = manifest_repo.commit("add a job")
    manifest_repo.push()
    return sha


def _mirror(server: GitHttpServer, root: Path) -> GitSource:
    source = GitSource(server.url_for("manifests"), "main", root)
    source.fetch()
    return source


def _remote_notes(server: GitHttpServer, tmp_path: Path, name: str = "reader") -> str:
    clone = tmp_path / name
    git("clone", "--quiet", server.url_for("manifests"), clone)
    git("fetch", "--quiet", "origin", f"{NOTES_REF}:{NOTES_REF}", cwd=clone)
    return git("log", "--notes=nodus", "-1", cwd=clone)


def _note_json(log: str) -> dict:
    text = log.split("Notes (nodus):", 1)[1]
    return json.loads("\n".join(line.strip() for line in text.splitlines()))


def test_two_contexts_share_one_note_and_git_log_shows_it(git_http_server, pushed, tmp_path):
    source = _mirror(git_http_server, tmp_path / "mirrors")
    writer = GitNotesWriter(source.path, push=True, clock=Clock(T0))
    writer.post(run("success", context="nodus/prod/sync", commit=pushed))
    writer.post(run("failure", context="nodus/prod/plan", commit=pushed, title="1 invalid",
                    summary="jobs/train.yaml:1: spec is required",
                    annotations=(Annotation("jobs/train.yaml", 1, "spec is required"),)))

    log = _remote_notes(git_http_server, tmp_path)
    assert "Notes (nodus):" in log
    notes = _note_json(log)
    assert set(notes) == {"nodus/prod/sync", "nodus/prod/plan"}
    assert notes["nodus/prod/sync"]["state"] == "success"
    plan_at = notes["nodus/prod/plan"].pop("updatedAt")
    assert plan_at > notes["nodus/prod/sync"]["updatedAt"]
    assert plan_at.startswith("2025-03-01T12:00:0") and plan_at.endswith("Z")
    assert notes["nodus/prod/plan"] == {
        "state": "failure", "title": "1 invalid",
        "summary": "jobs/train.yaml:1: spec is required",
        "annotations": [{"path": "jobs/train.yaml", "line": 1,
                         "message": "spec is required", "level": "failure"}],
        "detailsUrl": "https://nodus.example/repos/team-a"}


def test_a_later_post_of_one_context_replaces_only_that_context(git_http_server, pushed,
                                                                 tmp_path):
    source = _mirror(git_http_server, tmp_path / "mirrors")
    writer = GitNotesWriter(source.path, push=True, clock=Clock(T0))
    writer.post(run("pending", context="nodus/prod/sync", commit=pushed, title="Syncing"))
    writer.post(run("success", context="nodus/prod/plan", commit=pushed))
    writer.post(run("success", context="nodus/prod/sync", commit=pushed))
    notes = _note_json(_remote_notes(git_http_server, tmp_path))
    assert {k: v["state"] for k, v in notes.items()} == {
        "nodus/prod/sync": "success", "nodus/prod/plan": "success"}


def test_without_push_the_note_stays_in_the_mirror(git_http_server, pushed, tmp_path):
    source = _mirror(git_http_server, tmp_path / "mirrors")
    writer = GitNotesWriter(source.path, clock=Clock(T0))
    writer.post(run("success", commit=pushed))
    assert writer.read(pushed)["nodus/prod/sync"]["state"] == "success"
    assert NOTES_REF not in git("ls-remote", git_http_server.url_for("manifests"))


def test_a_racing_writer_that_pushes_first_loses_nothing(git_http_server, pushed, tmp_path):
    ours_source = _mirror(git_http_server, tmp_path / "mirror-a")
    theirs_source = _mirror(git_http_server, tmp_path / "mirror-b")
    ours = GitNotesWriter(ours_source.path, push=True, clock=Clock(T0))
    theirs = GitNotesWriter(theirs_source.path, push=True, clock=Clock(T0))
    ours.post(run("success", context="nodus/a/sync", commit=pushed))  # the ref exists

    fetches = []
    real_fetch = ours._fetch

    def fetch_then_lose_the_race(remote: pygit2.Remote):
        tip = real_fetch(remote)
        fetches.append(tip)
        if len(fetches) == 1:  # between our fetch and our push, the other one pushes
            theirs.post(run("failure", context="nodus/b/sync", commit=pushed))
        return tip

    ours._fetch = fetch_then_lose_the_race  # type: ignore[method-assign]
    ours.post(run("failure", context="nodus/a/plan", commit=pushed))

    assert len(fetches) == 2  # refused once, fetched again, merged, pushed
    notes = _note_json(_remote_notes(git_http_server, tmp_path))
    assert {k: v["state"] for k, v in notes.items()} == {
        "nodus/a/sync": "success", "nodus/a/plan": "failure", "nodus/b/sync": "failure"}
    # The remote ref is a fast-forward of what the other writer pushed: no history lost.
    assert theirs.read(pushed).keys() <= notes.keys()


def test_the_newer_entry_of_one_context_wins_the_merge(git_http_server, pushed, tmp_path):
    early = GitNotesWriter(_mirror(git_http_server, tmp_path / "m1").path, push=True,
                           clock=Clock(T0))
    late = GitNotesWriter(_mirror(git_http_server, tmp_path / "m2").path, push=True,
                          clock=Clock(T0 + timedelta(hours=1)))
    early.post(run("pending", context="nodus/x/sync", commit=pushed))  # mirror m1 has it
    late.post(run("success", context="nodus/x/sync", commit=pushed))
    early.post(run("success", context="nodus/x/plan", commit=pushed))  # merges with `late`
    notes = _note_json(_remote_notes(git_http_server, tmp_path))
    assert notes["nodus/x/sync"]["state"] == "success"  # late's entry is newer
    assert notes["nodus/x/plan"]["state"] == "success"


def test_a_writer_opened_on_a_repository_object_pushes_with_its_origin(git_http_server, pushed,
                                                                      tmp_path):
    source = _mirror(git_http_server, tmp_path / "mirrors")
    writer = GitNotesWriter(source._repo, push=True, clock=Clock(T0))
    writer.post(run("error", commit=pushed, title="provider unreachable"))
    assert _note_json(_remote_notes(git_http_server, tmp_path))["nodus/prod/sync"][
        "state"] == "error"


def test_notes_reach_a_remote_given_by_path_whose_objects_the_mirror_shares(
        git_http_server, pushed, tmp_path):
    bare = git_http_server.root / "manifests.git"
    source = GitSource(str(bare), "main", tmp_path / "mirrors")
    source.fetch()
    assert (source.path / "objects" / "info" / "alternates").is_file()
    writer = GitNotesWriter(source.path, str(bare), push=True, clock=Clock(T0))
    writer.post(run("success", context="nodus/prod/sync", commit=pushed))
    log = git("--git-dir", bare, "log", "--notes=nodus", "-1")
    assert _note_json(log)["nodus/prod/sync"]["state"] == "success"
