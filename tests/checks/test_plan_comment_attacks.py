"""What a hostile pull request can put in the plan comment and the plan check: manifest
names, file names, keys and values written to break out of their place (backticks, HTML,
`-->`, `</details>`, blank lines), to ping people (`@user`, `@org/team`), to plant links,
and file names that are not UTF-8. Each goes through the real validation and the real
plan, then through the GitHub writers (respx, GitHub's documented shapes)."""

from __future__ import annotations

import re

import httpx
import respx
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.checks import compose
from reconciler.checks.comments import GITHUB_LIMIT, GitHubComments, PlanCommenter, marker
from reconciler.checks.github import GitHubChecksWriter, github_auth, github_headers
from reconciler.checks.plan_markdown import Target, render
from reconciler.checks.review import PlanReview
from reconciler.identity import ResourceKey
from reconciler.plan import Action, ActionType, Change, Desired, Plan, Recorded, plan, spec_hash
from reconciler.validation import Problem, validate_file
from tests.checks.support import FakeTime, body, client, recorded

SHA = "ce587453ced02b1526dfb4cb910479d431683101"
MARK = marker("ci", "team-a")
GH = "https://api.github.com"
GH_REPO = "/repos/octo-org/gpu-jobs"

HOSTILE = b'''apiVersion: nodus.dev/v1
kind: "Job` <img src=x onerror=alert(1)> -->  @octo-org/admins [x](https://evil.example) `"
metadata:
  name: "a`</details><!-- nodus-gitops:plan:ci:team-a --> @octocat `b\\n\\n# Approved"
spec: {}
---
apiVersion: nodus.dev/v1
kind: Job
metadata:
  name: "n` @octocat see https://evil.example/approve and www.evil.example"
spec:
  command: [python3, -c, pass]
'''


def _review(problems=(), actions_plan=None) -> PlanReview:
    return PlanReview("team-a", "https://github.com/octo-org/gpu-jobs.git", "ci", "training",
                      "main", SHA, actions_plan, tuple(problems))


def _github_target() -> Target:
    return Target("GitHub", GITHUB_LIMIT,
                  lambda path, line: f"https://github.com/octo-org/gpu-jobs/blob/{SHA}/x#L1")


def _prose(text: str) -> str:
    """The text a host renders as Markdown and HTML: without code fences and code spans,
    where nothing is a tag, a mention or a link."""
    text = re.sub(r"^(`{3,})[^\n]*\n.*?^\1$", "", text, flags=re.M | re.S)
    text = re.sub(r"<code>.*?</code>", " ", text)
    return re.sub(r"\\[\\`]|(`+)(?:(?!\1).)+?\1", " ", text)  # left to right, as Markdown


def _assert_inert(text: str) -> None:
    prose = _prose(text)
    assert "<img" not in prose and "</details><!--" not in prose
    assert [line for line in prose.splitlines() if "<!--" in line] == (
        [MARK] if text.startswith(MARK) else [])
    assert not re.search(r"^#", prose.split("\n", 2)[-1], re.M), "a heading was planted"
    assert not re.search(r"@[A-Za-z0-9]", prose), "a mention would ping someone"
    assert not re.search(r"https?://evil|www\.evil", prose), "a link was planted"
    opened = prose.count("<details>")
    assert prose.count("</details>") == opened


def test_hostile_names_in_an_invalid_manifest_stay_text():
    # A lone backtick in the file name must not pair with the code span that follows it.
    _, problems = validate_file("jobs/x`@octocat<b>.yaml", HOSTILE)
    assert {p.name for p in problems} >= {"n` @octocat see https://evil.example/approve and "
                                          "www.evil.example"}
    review = _review(problems)
    _assert_inert(render(review, _github_target(), marker=MARK))
    _assert_inert(compose.plan_check(review).summary)


def test_a_hostile_annotation_key_and_value_stay_in_their_diff():
    manifest = {"apiVersion": "nodus.dev/v1", "kind": "Job",
                "metadata": {"name": "train", "annotations": {
                    "x\n\n# Approved by @octocat\n\n<b>": "see https://evil.example @octocat"}},
                "spec": {"command": ["python3", "-c", "pass"]}}
    text = (b"apiVersion: nodus.dev/v1\nkind: Job\nmetadata:\n  name: train\n  annotations:\n"
            b'    "x\\n\\n# Approved by @octocat\\n\\n<b>": "see https://evil.example @octocat"\n'
            b"spec:\n  command: [python3, -c, pass]\n")
    manifests, problems = validate_file("jobs/train.yaml", text)
    assert not problems and manifests[0].body == manifest  # the schema lets it through
    key = ResourceKey("Job", "training", "train")
    before = {**manifest, "metadata": {"name": "train", "annotations": {
        "x\n\n# Approved by @octocat\n\n<b>": "old"}}}
    result = plan([Desired.of(key, manifest, "jobs/train.yaml")],
                  [Recorded(key, before, spec_hash(before), "jobs/train.yaml")])
    assert "# Approved" in result.actions[0].changes[0].path  # the key is in the path
    review = _review(actions_plan=result)
    comment = render(review, _github_target(), marker=MARK)
    _assert_inert(comment)
    summary = next(line for line in comment.splitlines() if line.startswith("<details><summary>"))
    assert summary.endswith("</summary>")  # one line: no blank line ends the HTML block
    _assert_inert(compose.plan_check(review).summary)


def test_a_file_name_that_is_not_utf8_is_shown_and_posted():
    name = "jobs/bad\udcff.yaml"  # how pygit2 hands over the byte 0xff of a tree entry
    _, problems = validate_file(name, b"apiVersion: nodus.dev/v1\nkind: Job\nmetadata: {}\n")
    review = _review(problems)
    run = compose.plan_check(review)
    assert "jobs/bad\ufffd.yaml" in run.summary
    api = client(GH, github_auth, FakeTime(), headers=github_headers())
    checks = GitHubChecksWriter(api, "octo-org/gpu-jobs")
    commenter = PlanCommenter({"github": GitHubComments(api, "octo-org/gpu-jobs",
                                                        "https://github.com")})
    with respx.mock(assert_all_called=True) as router:
        router.get(url__regex=rf"{GH}{GH_REPO}/commits/\w+/check-runs").mock(
            return_value=recorded("github", "check_runs_for_ref_empty"))
        created = router.post(f"{GH}{GH_REPO}/check-runs").mock(
            return_value=recorded("github", "check_run_created"))
        router.get(f"{GH}{GH_REPO}/issues/7/comments").mock(
            return_value=httpx.Response(200, json=[]))
        comment = router.post(f"{GH}{GH_REPO}/issues/7/comments").mock(
            return_value=recorded("github", "issue_comment"))
        checks.post(run)
        commenter.post(review, "feature", 7)
    sent = body(created.calls[0].request)
    assert sent["output"]["annotations"][0]["path"] == "jobs/bad\ufffd.yaml"
    text = body(comment.calls[0].request)["body"]
    assert "bad\ufffd.yaml" in text and "/jobs/bad%FF.yaml#L" in text


_hostile = st.lists(st.sampled_from(list("`\\<>/!-@|[]():#.\n wwhtps") + [
    "<!--", "-->", "</details>", "<img src=x>", "```", "@octocat", "https://e.x",
    "www.e.x", "\udcff"]), max_size=40).map("".join)


@settings(max_examples=300, deadline=None)
@given(file=_hostile, kind=_hostile, name=_hostile, path=_hostile, message=_hostile,
       reason=_hostile, field=_hostile, value=_hostile)
def test_no_manifest_text_becomes_markup(file, kind, name, path, message, reason, field,
                                         value):
    problem = Problem(file, 3, kind, name, path, message)
    _assert_inert(render(_review([problem]), _github_target(), marker=MARK))
    _assert_inert(render(_review([problem]), Target("the check summary", 65_535)))
    key = ResourceKey("Job", "training", "train")
    action = Action(ActionType.BLOCKED, key, file, reason=reason,
                    changes=(Change(f"metadata.annotations.{field}", value, reason),))
    _assert_inert(render(_review(actions_plan=Plan((action,))), _github_target(),
                         marker=MARK))
