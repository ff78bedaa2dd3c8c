"""CheckPoster: each check shown once per writer, failures logged and retried, never raised."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from nodus_gitops.checks.model import CheckRun
from nodus_gitops.checks.poster import CheckPoster
from nodus_gitops.floor.errors import PermanentError, TransientError
from nodus_gitops.state import Store

from tests.checks.support import run


class FakeWriter:
    def __init__(self, name: str, failures: list[Exception] | None = None) -> None:
        self.name = name
        self.posted: list[CheckRun] = []
        self.failures = list(failures or [])

    def post(self, check: CheckRun) -> None:
        if self.failures:
            raise self.failures.pop(0)
        self.posted.append(check)


@pytest.fixture
def store(tmp_path: Path):
    s = Store.open(f"sqlite:///{tmp_path / 'state.db'}")
    s.upsert_binding("team-a", "https://github.com/octo-org/gpu-jobs.git", "main", "", "ml")
    yield s
    s.close()


def test_an_identical_check_is_posted_once(store):
    writer = FakeWriter("github")
    poster = CheckPoster(store, {"github": writer})
    poster.post(run("success"))
    poster.post(run("success"))
    assert len(writer.posted) == 1
    [record] = store.list_checks(binding_id="team-a")
    assert (record.state, record.target, record.context) == ("success", "github",
                                                             "nodus/prod/sync")


def test_a_changed_state_or_summary_is_posted_again(store):
    writer = FakeWriter("github")
    poster = CheckPoster(store, {"github": writer})
    poster.post(run("pending", summary="applying"))
    poster.post(run("success", summary="applying"))
    poster.post(run("success", summary="3 created"))
    assert [(c.state, c.summary) for c in writer.posted] == [
        ("pending", "applying"), ("success", "applying"), ("success", "3 created")]


def test_a_new_poster_reads_what_was_posted_before_a_restart(store):
    CheckPoster(store, {"github": FakeWriter("github")}).post(run("success"))
    after_restart = FakeWriter("github")
    CheckPoster(store, {"github": after_restart}).post(run("success"))
    assert after_restart.posted == []


@pytest.mark.parametrize("failure", [
    TransientError("github answered 502", delay=1.0),
    PermanentError("github answered 401: Bad credentials"),
    RuntimeError("a bug in a writer"),
])
def test_a_failing_writer_never_raises_and_the_same_post_is_retried_later(store, failure,
                                                                          caplog):
    broken = FakeWriter("github", failures=[failure])
    healthy = FakeWriter("gitnotes")
    poster = CheckPoster(store, {"github": broken, "gitnotes": healthy},
                         logging.getLogger("test.poster"))
    caplog.set_level(logging.WARNING, logger="test.poster")
    poster.post(run("failure", summary="2 invalid"))  # must not raise

    assert len(healthy.posted) == 1  # the other writer still got it
    assert broken.posted == []
    assert [r.target for r in store.list_checks()] == ["gitnotes"]  # the failure: unrecorded
    assert str(failure) in caplog.text

    poster.post(run("failure", summary="2 invalid"))  # identical: retried where it failed
    assert len(broken.posted) == 1 and len(healthy.posted) == 1
    assert sorted(r.target for r in store.list_checks()) == ["github", "gitnotes"]


def test_targets_are_deduplicated_separately(store):
    first, second = FakeWriter("github"), FakeWriter("gitlab")
    CheckPoster(store, {"github": first}).post(run("success"))
    CheckPoster(store, {"github": first, "gitlab": second}).post(run("success"))
    assert len(first.posted) == 1 and len(second.posted) == 1


def test_an_unreadable_store_means_posting_rather_than_skipping(caplog):
    class DownStore:
        def list_checks(self, **_):
            raise OSError("database is locked")

        def record_check(self, *args, **kwargs):
            raise OSError("database is locked")

    writer = FakeWriter("github")
    CheckPoster(DownStore(), {"github": writer}).post(run("success"))
    assert len(writer.posted) == 1
