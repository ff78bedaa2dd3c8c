"""What a hostile pull request can put in the plan comment and the plan check: manifest
names, file names, keys and values written to break out of their place (backticks, HTML,
`-->`, `</details>`, blank lines, a new line in a diff), to ping people (`@user`,
`@org/team`, GitLab's `@_name` and `@.name`), to plant links or cross-references (`#1`,
`owner/repo#12`, GitLab's `!3`, `~bug`, `%v1`, `&epic`, `$snippet`), to disguise a file
name (bidi and zero-width characters), and file names that are not UTF-8. Each goes
through the real validation and the real plan, then through the GitHub writers (respx,
GitHub's documented shapes)."""

from __future__ import annotations

import html
import re

import httpx
import respx
from hypothesis import given, settings
from hypothesis import strategies as st
from nodus_gitops.checks import compose
from nodus_gitops.checks.comments import GITHUB_LIMIT, GitHubComments, PlanCommenter, marker
from nodus_gitops.checks.github import GitHubChecksWriter
from nodus_gitops.checks.plan_markdown import Target, render
from nodus_gitops.checks.review import PlanReview
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.floor.problems import Problem
from nodus_gitops.hosts.github import github_auth, github_headers
from nodus_gitops.plan import Action, ActionType, Change, Desired, Plan, Recorded, plan, spec_hash
from nodus_gitops.validation import validate_file

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


# What GitHub, GitLab and Gitea turn into a link or a cross-reference in text: an issue or
# pull request (#1, owner/repo#1, GH-1, Gitea's !1), and GitLab's merge requests (!3),
# labels (~bug, ~"a b"), milestones (%v1), epics (&1), snippets ($1), iterations
# (*iteration:1) and vulnerabilities ([vulnerability:1]).
_REFERENCE = re.compile(r"""[#!~%$&](?=[\w."])|\bGH-\d|\*iteration:|\[vulnerability:""", re.I)
# Characters that change how the text around them reads without showing themselves, and
# line separators.
_INVISIBLE = re.compile("[\u061c\u200b-\u200f\u202a-\u202e\u2028-\u202e\u2060-\u2069"
                        "\ufeff]")


def _assert_inert(text: str) -> None:
    prose = _prose(text)
    assert "<img" not in prose and "</details><!--" not in prose
    assert [line for line in prose.splitlines() if "<!--" in line] == (
        [MARK] if text.startswith(MARK) else [])
    assert not re.search(r"^#", prose.split("\n", 2)[-1], re.M), "a heading was planted"
    # As the host reads it: entities decoded, the product's own link targets aside.
    words = html.unescape(re.sub(r"\]\([^)\s]*\)", "]", prose))
    assert not re.search(r"@[\w.-]", words), "a mention would ping someone"
    assert not _REFERENCE.search(words), "a reference would link elsewhere"
    assert not re.search(r"https?://evil|www\.evil", prose), "a link was planted"
    assert not _INVISIBLE.search(text), "an invisible character was shown as is"
    assert not [line for line in re.split(r"\r\n|\r|\n", text) if line.startswith("/")], \
        "a line of the text starts a quick action"
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


REFERENCES = ("@_ops-oncall @.admins octo-org/secret-repo#12 #1 !3 ~bug ~\"a b\" %v1 &epic "
              "&12 $snippet $7 GH-5 *iteration:4 [vulnerability:9] @octocat")


def _gitlab_target() -> Target:
    return Target("GitLab", 1_000_000, lambda path, line: f"https://gitlab.example.com/"
                  f"platform/gpu-jobs/-/blob/{SHA}/x#L{line}")


def test_mentions_and_references_of_every_host_are_broken_but_read_the_same():
    _, problems = validate_file(f"jobs/{REFERENCES}.yaml", (
        'apiVersion: nodus.dev/v1\nkind: Job\nmetadata:\n  name: "'
        + REFERENCES.replace("\\", "\\\\").replace('"', '\\"') + '"\nspec:\n  command: [a]\n'
    ).encode())
    assert REFERENCES in {p.name for p in problems}
    key = ResourceKey("Job", "training", "train")
    action = Action(ActionType.BLOCKED, key, f"jobs/{REFERENCES}.yaml", reason=REFERENCES,
                    changes=(Change(f"metadata.annotations.{REFERENCES}", "a", "b"),))
    for review in (_review(problems), _review(actions_plan=Plan((action,)))):
        for target in (_gitlab_target(), _github_target(), Target("the check summary", 65_535)):
            text = render(review, target, marker=MARK)
            _assert_inert(text)
            # The breaks are invisible: a reader sees the text as it was written.
            assert REFERENCES in html.unescape(text).replace("\u200b", "").replace("\\", "")
        _assert_inert(compose.plan_check(review).summary)


def test_a_new_line_in_an_annotation_key_stays_on_a_prefixed_diff_line():
    manifest = {"apiVersion": "nodus.dev/v1", "kind": "Job",
                "metadata": {"name": "train", "annotations": {}},
                "spec": {"command": ["python3", "-c", "pass"]}}
    key = ResourceKey("Job", "training", "train")
    hostile = ["x\n/approve\n/merge\n@_oncall", "y\r/approve", "z\r\n/merge",
               "w\u2028/approve\u2029/merge"]
    before = {**manifest, "metadata": {"name": "train", "annotations": {
        k: "v1" for k in hostile} | {"long": "a\nb\n" * 20}}}
    after = {**manifest, "metadata": {"name": "train", "annotations": {
        k: "v2" for k in hostile} | {"long": "a\nb\n" * 21, "x\n/approve\nlong": "c\nd\n"}}}
    result = plan([Desired.of(key, after, "jobs/train.yaml")],
                  [Recorded(key, before, spec_hash(before), "jobs/train.yaml")])
    for target in (_gitlab_target(), Target("the check summary", 65_535)):
        text = render(_review(actions_plan=result), target, marker=MARK)
        _assert_inert(text)
        fenced = re.search(r"^```diff\n(.*?)\n```$", text, re.M | re.S)
        assert fenced, text
        lines = re.split(r"\r\n|\r|\n", fenced.group(1))  # Markdown's line endings
        assert all(line[:1] in "-+ @" and line[:1] for line in lines), lines
        assert "- metadata.annotations.x\\n/approve\\n/merge\\n@_oncall: v1" in lines
        assert "+ metadata.annotations.y\\r/approve: v2" in lines


def test_bidi_and_zero_width_characters_in_file_names_are_shown_escaped():
    # "jobs/\u202elmay.live" reads "jobs/evil.yaml" (a right-to-left override), and a
    # zero-width space makes two different files look the same.
    names = ["jobs/\u202elmay.live", "jobs/a\u200b.yaml", "jobs/b\u2066\u200d\ufeff.yaml"]
    problems = [validate_file(name, b"apiVersion: nodus.dev/v1\nkind: Job\nmetadata: {}\n")[1][0]
                for name in names]
    key = ResourceKey("Job", "training", "train")
    action = Action(ActionType.BLOCKED, key, names[0], reason=f"moved from {names[1]}")
    api = client(GH, github_auth, FakeTime(), headers=github_headers())
    linked = Target("GitHub", GITHUB_LIMIT, GitHubComments(
        api, "octo-org/gpu-jobs", "https://github.com").link(SHA))
    for review in (_review(problems), _review(actions_plan=Plan((action,)))):
        for target in (linked, Target("the check summary", 65_535)):
            text = render(review, target, marker=MARK)
            _assert_inert(text)
            assert "jobs/\\u202elmay.live" in _unescaped(text)
        assert compose.plan_check(review).summary.count("\\u202e") >= 1
    text = _unescaped(render(_review(problems), linked, marker=MARK))
    assert "jobs/a\\u200b.yaml" in text and "jobs/b\\u2066\\u200d\\ufeff.yaml" in text
    assert "/jobs/%E2%80%AElmay.live#L" in text  # the link still leads to the file itself
    assert compose.plan_check(_review(problems)).annotations[0].path == names[0]


def _unescaped(text: str) -> str:
    """Markdown's backslash escapes as they render (`\\\\` shows `\\`)."""
    return re.sub(r"\\([\\`|\[\]])", r"\1", text)


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


_hostile = st.lists(st.sampled_from(list("`\\<>/!-@|[]():#.\n\r wwhtps_~%&$*\"1") + [
    "<!--", "-->", "</details>", "<img src=x>", "```", "@octocat", "https://e.x",
    "www.e.x", "\udcff", "@_x", "@.x", "#1", "o/r#1", "!3", "~bug", "%v1", "&amp;1",
    "&#64;x", "$7", "GH-1", "*iteration:", "[vulnerability:", "\u202e", "\u200b", "\u2028",
    "\n/approve"]), max_size=40).map("".join)


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
