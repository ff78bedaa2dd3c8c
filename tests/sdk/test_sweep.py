"""Every documented method and error of `Sweep`, against a real served reconciler and a
real bare repository: what each call commits to Git, and what the API then reports."""

from __future__ import annotations

import re

import pytest
from nodus_gitops import sdk as nodus
from nodus_gitops.sdk import gitrepo

from tests.sdk.conftest import AUTHOR, World, poll

QUICK = {"image": "python:3.12-slim", "command": ["python3", "-c", "pass"], "timeout": "5m"}
SLEEP = {"image": "python:3.12-slim", "command": ["python3", "-c", "import time; time.sleep(120)"]}


def test_targets_that_are_not_job_specs_are_unsupported(configured: World) -> None:
    def train(batch_size: int) -> None:
        pass

    class Recipe:
        kind = "recipe"

    before = len(configured.commits())
    for target in (train, "llama-3-finetune", Recipe(), {"kind": "Function", "name": "f"}):
        with pytest.raises(nodus.errors.Unsupported, match="not available yet"):
            nodus.Sweep(target, grid={"gpu": ["L4"]})
    assert issubclass(nodus.errors.Unsupported, nodus.errors.NodusError)
    with pytest.raises(nodus.errors.InvalidSweep) as bad:
        nodus.Sweep({"image": "x", "command": ["true"], "timeout": "10x"},
                    grid={"batch size": [1]}, max_cost=-1).run()
    assert any('"10x" is not a duration' in p for p in bad.value.problems)
    assert any("not a parameter name" in p for p in bad.value.problems)
    assert len(configured.commits()) == before


def test_idempotency_key_and_generated_names(configured: World) -> None:
    before = len(configured.commits())
    first = nodus.Sweep(QUICK, grid={"N": "1"}).run(idempotency_key="nightly-2025-01-02")
    assert re.fullmatch(r"sweep-[0-9a-f]{8}", first.name)
    head = configured.commits()[0]
    assert head.message.splitlines()[0] == (f"sweep {first.name}: create (idempotency key "
                                            "nightly-2025-01-02)")
    manifest = configured.file(f"sweeps/{first.name}.yaml")
    assert manifest["metadata"]["annotations"] == {
        "nodus.dev/idempotency-key": "nightly-2025-01-02"}
    assert manifest["spec"]["matrix"] == {"params": {"N": ["1"]}}

    # The same key again, even with another description: the same Sweep, no commit.
    again = nodus.Sweep(QUICK, grid={"N": [1, 2]}, name="other").run(
        idempotency_key="nightly-2025-01-02")
    assert again.name == first.name and again.commit is None
    assert len(configured.commits()) == before + 1

    # No key: a fresh random name each time; running the same object twice is one commit.
    plain = nodus.Sweep(QUICK, grid={"N": [1]})
    plain.run()
    plain.run()
    other = nodus.Sweep(QUICK, grid={"N": [1]}).run()
    assert re.fullmatch(r"sweep-[0-9a-f]{8}", plain.name) and other.name != plain.name
    assert len(configured.commits()) == before + 3

    # An explicit name already taken by a different Sweep is refused.
    with pytest.raises(nodus.errors.InvalidSweep, match="already in sweeps/"):
        nodus.Sweep(QUICK, grid={"N": [3]}, name=plain.name).run()


def test_from_name_estimate_and_jobs(configured: World) -> None:
    sweep = nodus.Sweep(QUICK, grid={"gpu": "L4", "MODE": ["a", "b"]}, name="read-back",
                        labels={"team": "ml"}).run()
    report = nodus.Sweep.from_name("read-back").wait(timeout=40)
    assert report.phase == "Succeeded" and report.name == "read-back"
    assert [c.params.MODE for c in report.cells] == ["a", "b"]
    assert report.file == "sweeps/read-back.yaml" and report.source_commit == sweep.commit

    estimate = sweep.estimate()
    assert float(estimate.cost_usd) >= 0.1  # two L4 cells ($0.80/h) with a 5m timeout each
    assert estimate == report.estimate

    jobs = sweep.jobs()
    assert [j.name for j in jobs] == ["read-back-0", "read-back-1"]
    assert [j.cell for j in jobs] == [0, 1]
    assert all(j.kind == "Job" and j.phase == "Succeeded" for j in jobs)
    assert repr(report).startswith("View(name='read-back', project='ml', phase='Succeeded'")
    with pytest.raises(AttributeError, match="read-only"):
        report.phase = "Failed"


def test_failed_cells_still_give_the_report(configured: World) -> None:
    code = "import os, sys; sys.exit(int(os.environ['NODUS_PARAM_EXIT']))"
    sweep = nodus.Sweep({"image": "python:3.12-slim", "command": ["python3", "-c", code],
                         "backoffLimit": 0}, grid={"EXIT": [0, 3]}, name="half-fails").run()
    report = sweep.wait(timeout=40)
    assert (report.phase, report.reason) == ("Failed", "CellsFailed")
    assert [c.phase for c in report.cells] == ["Succeeded", "Failed"]
    assert report.best.by_cost == 0 and report.best.by_throughput is None
    assert "half-fails-1" in report.message


def test_suspend_resume_cancel_are_commits_the_reconciler_follows(configured: World) -> None:
    sweep = nodus.Sweep(SLEEP, grid={"N": [1]}, name="long-one").run()
    poll(lambda: _phase(sweep) == "Running")
    with pytest.raises(nodus.errors.Timeout, match="still Running"):
        sweep.wait(timeout=0.3)

    made = []
    for action, state, phase in (("suspend", "Suspended", "Suspended"),
                                 ("resume", "Running", "Running"),
                                 ("cancel", "Cancelled", "Cancelled")):
        getattr(sweep, action)()
        commit = configured.commits()[0]
        assert str(commit.id) == sweep.commit and commit.message.startswith(
            f"sweep long-one: {action}\n")
        assert (commit.author.name, commit.author.email) == AUTHOR
        assert configured.file("sweeps/long-one.yaml")["spec"]["state"] == state
        made.append(sweep.commit)
        if phase != "Cancelled":
            poll(lambda phase=phase: _phase(sweep) == phase)
    assert len(set(made)) == 3
    report = sweep.wait(timeout=40)
    assert report.phase == "Cancelled" and report.cells[0].phase == "Cancelled"

    sweep.cancel()  # already cancelled: nothing to commit
    assert str(configured.commits()[0].id) == made[-1]


def test_missing_sweep_and_refused_token(configured: World) -> None:
    missing = nodus.Sweep.from_name("no-such-sweep")
    with pytest.raises(nodus.errors.NotFound):
        missing.status()
    quick = configured.client(not_found_grace=0.5)
    with pytest.raises(nodus.errors.NotFound, match="not known to the API"):
        nodus.Sweep.from_name("no-such-sweep", client=quick).wait(timeout=10, poll=0.1)
    with pytest.raises(nodus.errors.NotFound, match="no Sweep named 'no-such-sweep'"):
        missing.cancel()

    for token in (None, "wrong-token"):
        client = configured.client(token=token, environ={})
        with pytest.raises(nodus.errors.AuthError, match="401"):
            nodus.Sweep.from_name("read-back", client=client).status()


def test_a_push_racing_another_writer_is_retried(configured: World, monkeypatch) -> None:
    """Another commit lands between the SDK's fetch and its push: the push is rejected,
    the SDK fetches again and re-applies its change on the new tip."""
    real = gitrepo.Repository._make_commit
    raced: list[str | None] = []
    tips: list[str | None] = []

    def racing(self, tip, edit, author):
        tips.append(tip)
        if not raced:
            raced.append(tip)
            configured.push_other("sweeps/NOTES.md", "someone else was here\n",
                                  "a concurrent commit")
        return real(self, tip, edit, author)

    monkeypatch.setattr(gitrepo.Repository, "_make_commit", racing)
    sweep = nodus.Sweep(QUICK, grid={"N": [1]}, name="raced").run()
    commits = configured.commits()
    assert len(tips) == 2 and tips[1] == str(commits[1].id)  # built again on the new tip
    assert str(commits[0].id) == sweep.commit
    assert commits[1].message.strip() == "a concurrent commit"
    assert configured.file("sweeps/raced.yaml")["metadata"]["name"] == "raced"


def test_a_push_the_remote_refuses_is_not_retried(configured: World) -> None:
    hook = configured.repo.bare / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\nwhile read old new ref; do\n"
                    "  git log -1 --format=%s \"$new\" | grep -q '^sweep blocked:' && "
                    "{ echo 'sweeps named blocked are not allowed' >&2; exit 1; }\n"
                    "done\nexit 0\n")
    hook.chmod(0o755)
    try:
        before = len(configured.commits())
        with pytest.raises(nodus.errors.GitError, match="refused the push") as refused:
            nodus.Sweep(QUICK, grid={"N": [1]}, name="blocked").run()
        assert "sweeps named blocked are not allowed" in str(refused.value)
        assert len(configured.commits()) == before
    finally:
        hook.unlink()


def _phase(sweep: nodus.Sweep) -> str | None:
    try:
        return sweep.status().phase
    except nodus.errors.NotFound:
        return None
