"""The attack as a reviewer wrote it: a pull request adds a file named
``jobs/x` **bold** `.yaml`` whose `timeout` holds a Markdown link and a team mention. The
problem message quotes the value, so it reaches the sync check's summary (a GitHub check
run, signed by the App, with `mode: checks`), the plan check and the plan comment; each
must show the name and the value as the text they are, with no link, no bold text and no
mention a host would act on."""

from __future__ import annotations

from collections import Counter

import respx
from nodus_gitops.checks import compose
from nodus_gitops.checks.comments import GITHUB_LIMIT, marker
from nodus_gitops.checks.github import GitHubChecksWriter
from nodus_gitops.checks.plan_markdown import Target, render
from nodus_gitops.checks.review import PlanReview
from nodus_gitops.floor.problems import Problem
from nodus_gitops.hosts.github import github_auth, github_headers
from nodus_gitops.validation import validate_file

from tests.checks.support import FakeTime, body, client, recorded
from tests.checks.test_markdown_host import View, host_view, words

SHA = "ce587453ced02b1526dfb4cb910479d431683101"
REPO = "https://github.com/acme/gpu-jobs.git"
GH = "https://api.github.com"

FILE = "jobs/x` **bold** `.yaml"
VALUE = "[Re-auth nodus](https://evil.io/x) @acme/admins"
MANIFEST = f"""apiVersion: nodus.dev/v1
kind: Job
metadata:
  name: x
spec:
  command: [python3, -c, pass]
  timeout: "{VALUE}"
""".encode()


def _problems(file: str = FILE, value: str = VALUE) -> list[Problem]:
    _, problems = validate_file(file, MANIFEST.replace(VALUE.encode(), value.encode()))
    assert [(p.file, p.path) for p in problems] == [(file, "spec.timeout")]
    assert value in problems[0].message  # the message quotes the value
    return problems


def _assert_text(view: View, benign: View | None = None) -> None:
    """No link, emphasis or mention (none but those of `benign`, the same document of a
    file `jobs/x.yaml` whose timeout is `soon`), and the name and value as written."""
    tags, acted = (benign.tags, benign.acted) if benign else (Counter(), Counter())
    for tag in ("a", "strong", "em", "img"):
        assert view.tags[tag] == tags[tag], view.tags
    assert view.acted == acted, view.acted  # no autolink, no mention of @acme/admins
    assert FILE in words(view.text) and VALUE in words(view.text)


def test_the_sync_check_shows_the_file_name_and_the_value_as_text() -> None:
    run = compose.sync_check("team-a", REPO, SHA, "ci", "invalid", "", _problems(), None, {})
    _assert_text(host_view(run.summary))
    assert run.annotations[0].path == FILE  # the annotation still points at the file


def test_the_check_run_github_shows_under_the_apps_name_is_text() -> None:
    run = compose.sync_check("team-a", REPO, SHA, "ci", "invalid", "", _problems(), None, {})
    writer = GitHubChecksWriter(client(GH, github_auth, FakeTime(), headers=github_headers()),
                                "acme/gpu-jobs")
    with respx.mock(assert_all_called=True) as router:
        router.get(url__regex=rf"{GH}/repos/acme/gpu-jobs/commits/\w+/check-runs").mock(
            return_value=recorded("github", "check_runs_for_ref_empty"))
        created = router.post(f"{GH}/repos/acme/gpu-jobs/check-runs").mock(
            return_value=recorded("github", "check_run_created"))
        writer.post(run)
    _assert_text(host_view(body(created.calls[0].request)["output"]["summary"]))


def test_the_plan_check_and_comment_show_it_as_text_too() -> None:
    def review(problems: list[Problem]) -> PlanReview:
        return PlanReview("team-a", REPO, "ci", "training", "main", SHA, None, tuple(problems))

    hostile, benign = review(_problems()), review(_problems("jobs/x.yaml", "soon"))
    _assert_text(host_view(compose.plan_check(hostile).summary),
                 host_view(compose.plan_check(benign).summary))
    linked = Target("GitHub", GITHUB_LIMIT,
                    lambda path, line: f"https://github.com/acme/gpu-jobs/blob/{SHA}/f#L{line}")
    comment = host_view(render(hostile, linked, marker=marker("ci", "team-a")))
    _assert_text(comment, host_view(render(benign, linked, marker=marker("ci", "team-a"))))
    assert comment.tags["a"] == 1  # the reconciler's own: the file's line at the commit


def test_a_sync_that_failed_quoting_the_value_says_it_as_text() -> None:
    message = f"backend refused jobs/x: timeout {VALUE!r}"
    run = compose.sync_check("team-a", REPO, SHA, "ci", "error", message, [], None, {})
    view = host_view(run.summary)
    assert not view.tags["a"] and not view.acted and message in words(view.text)
