"""The plan comment on GitHub, GitLab and Gitea against their documented shapes (respx):
created once, found again by its marker (through every page), edited on each push, never
a second comment; the open pull request found from a branch; bodies within the limit."""

from __future__ import annotations

import logging

import httpx
import respx
from nodus_gitops.checks.comments import (
    GITHUB_LIMIT,
    GiteaComments,
    GitHubComments,
    GitLabNotes,
    PlanCommenter,
    marker,
)
from nodus_gitops.checks.gitea import gitea_auth
from nodus_gitops.checks.gitlab import gitlab_auth
from nodus_gitops.checks.plan_markdown import size
from nodus_gitops.checks.review import PlanReview
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.hosts.github import github_auth, github_headers
from nodus_gitops.plan import Action, ActionType, Change, Plan

from tests.checks.support import TOKEN, FakeTime, body, client, recorded

GH = "https://api.github.com"
GH_REPO = "/repos/octo-org/gpu-jobs"
MARK = marker("ci", "team-a")
HEAD = "6dcb09b5b57875f334f61aebed695e2e4193db5e"


def _github() -> GitHubComments:
    api = client(GH, github_auth, FakeTime(), headers=github_headers())
    return GitHubComments(api, "octo-org/gpu-jobs", "https://github.com")


def _review(n: int = 1, commit: str = HEAD, value: str = "2.00") -> PlanReview:
    actions = tuple(Action(ActionType.PATCH, ResourceKey("Job", "training", f"job-{i:04d}"),
                           f"jobs/job-{i:04d}.yaml",
                           changes=(Change("spec.maxCostUSD", "1.00", value),
                                    Change("metadata.annotations.note", "a" * 200, "b" * 200)))
                    for i in range(n))
    return PlanReview("team-a", "https://github.com/octo-org/gpu-jobs.git", "ci", "training",
                      "main", commit, Plan(actions))


def _comment(comment_id: int, text: str) -> dict:
    """A comment written as the token's user (`GET /user`)."""
    return recorded("github", "issue_comment", fields={
        "id": comment_id, "body": text, "user": {"login": "nodus-bot", "id": 583231,
                                                  "type": "User"}}).json()


def test_github_creates_once_then_edits_on_every_push():
    writer = _github()
    with respx.mock(assert_all_called=True) as router:
        listed = router.get(f"{GH}{GH_REPO}/issues/7/comments").mock(
            return_value=httpx.Response(200, json=[
                recorded("github", "issue_comment_by_user").json()]))
        created = router.post(f"{GH}{GH_REPO}/issues/7/comments").mock(
            return_value=recorded("github", "issue_comment", fields={"id": 11}))
        edited = router.patch(f"{GH}{GH_REPO}/issues/comments/11").mock(
            return_value=recorded("github", "issue_comment_updated", fields={"id": 11}))
        writer.upsert(7, MARK, f"{MARK}\nfirst push")
        writer.upsert(7, MARK, f"{MARK}\nsecond push")
        writer.upsert(7, MARK, f"{MARK}\nsecond push")  # the same plan: nothing sent
        writer.upsert(7, MARK, f"{MARK}\nthird push")
    assert listed.call_count == 1 and created.call_count == 1 and edited.call_count == 2
    assert listed.calls[0].request.url.params["per_page"] == "100"
    assert body(created.calls[0].request) == {"body": f"{MARK}\nfirst push"}
    assert [body(c.request) for c in edited.calls] == [
        {"body": f"{MARK}\nsecond push"}, {"body": f"{MARK}\nthird push"}]
    for call in [*listed.calls, *created.calls, *edited.calls]:
        assert call.request.headers["Authorization"] == f"Bearer {TOKEN}"
        assert call.request.headers["Accept"] == "application/vnd.github+json"
        assert call.request.headers["X-GitHub-Api-Version"] == "2022-11-28"


def test_after_a_restart_the_comment_is_found_on_a_later_page():
    writer = _github()  # remembers nothing
    next_page = f"{GH}/repositories/9/issues/7/comments?per_page=100&page=2"
    first = httpx.Response(200, json=[
        recorded("github", "issue_comment_by_user").json(),
        _comment(5, f"Quoting the bot:\n{MARK}")],  # not at the start: someone else's
        headers={"link": f'<{next_page}>; rel="next", <{next_page}>; rel="last"'})
    second = httpx.Response(200, json=[_comment(42, f"{MARK}\nold plan")])
    with respx.mock(assert_all_called=False) as router:
        router.get(f"{GH}{GH_REPO}/issues/7/comments").mock(return_value=first)
        router.get(f"{GH}/repositories/9/issues/7/comments", params={"page": "2"}).mock(
            return_value=second)
        router.get(f"{GH}/user").mock(return_value=recorded("github", "authenticated_user"))
        edited = router.patch(f"{GH}{GH_REPO}/issues/comments/42").mock(
            return_value=recorded("github", "issue_comment_updated", fields={"id": 42}))
        created = router.post(f"{GH}{GH_REPO}/issues/7/comments")
        writer.upsert(7, MARK, f"{MARK}\nnew plan")
    assert body(edited.calls[0].request) == {"body": f"{MARK}\nnew plan"}
    assert created.call_count == 0


def test_a_comment_deleted_meanwhile_is_written_anew():
    writer = _github()
    with respx.mock() as router:
        router.get(f"{GH}{GH_REPO}/issues/7/comments").mock(
            side_effect=[httpx.Response(200, json=[]), httpx.Response(200, json=[])])
        created = router.post(f"{GH}{GH_REPO}/issues/7/comments").mock(side_effect=[
            recorded("github", "issue_comment", fields={"id": 11}),
            recorded("github", "issue_comment", fields={"id": 12})])
        router.patch(f"{GH}{GH_REPO}/issues/comments/11").mock(
            return_value=httpx.Response(404, json={"message": "Not Found"}))
        writer.upsert(7, MARK, f"{MARK}\none")
        writer.upsert(7, MARK, f"{MARK}\ntwo")
    assert created.call_count == 2


def test_the_open_pull_request_of_a_branch_gets_the_comment():
    commenter = PlanCommenter({"github": _github()})
    with respx.mock(assert_all_called=True) as router:
        pulls = router.get(f"{GH}{GH_REPO}/pulls").mock(return_value=httpx.Response(
            200, json=[recorded("github", "pull_open").json()]))
        router.get(f"{GH}{GH_REPO}/issues/7/comments").mock(
            return_value=httpx.Response(200, json=[]))
        created = router.post(f"{GH}{GH_REPO}/issues/7/comments").mock(
            return_value=recorded("github", "issue_comment"))
        commenter.post(_review(), "preview/tune", None)
    params = pulls.calls[0].request.url.params
    assert (params["state"], params["head"]) == ("open", "octo-org:preview/tune")
    text = body(created.calls[0].request)["body"]
    assert text.startswith(MARK + "\n")
    assert (f"[jobs/job-0000.yaml](https://github.com/octo-org/gpu-jobs/blob/{HEAD}/"
            "jobs/job-0000.yaml#L1)") in text


def test_a_branch_without_a_pull_request_gets_no_comment(caplog):
    commenter = PlanCommenter({"github": _github()})
    with respx.mock(assert_all_called=True) as router:
        router.get(f"{GH}{GH_REPO}/pulls").mock(return_value=httpx.Response(200, json=[]))
        with caplog.at_level(logging.INFO, logger="nodus_gitops.checks"):
            commenter.post(_review(), "preview/tune", None)
    assert "no open pull request" in caplog.text


def test_a_pull_ref_names_the_number_without_a_lookup():
    commenter = PlanCommenter({"github": _github()})
    with respx.mock(assert_all_called=True) as router:
        router.get(f"{GH}{GH_REPO}/issues/12/comments").mock(
            return_value=httpx.Response(200, json=[]))
        router.post(f"{GH}{GH_REPO}/issues/12/comments").mock(
            return_value=recorded("github", "issue_comment"))
        commenter.post(_review(), "refs/pull/12/head", None)


def test_a_plan_over_githubs_limit_is_cut_and_says_so():
    commenter = PlanCommenter({"github": _github()})
    with respx.mock() as router:
        router.get(f"{GH}{GH_REPO}/issues/7/comments").mock(
            return_value=httpx.Response(200, json=[]))
        created = router.post(f"{GH}{GH_REPO}/issues/7/comments").mock(
            return_value=recorded("github", "issue_comment"))
        commenter.post(_review(n=3000), "feature", 7)
    text = body(created.calls[0].request)["body"]
    assert size(text) <= GITHUB_LIMIT and len(text) > GITHUB_LIMIT - 1000
    assert "Left out to stay within GitHub's 65,536-character limit" in text


def test_a_missing_permission_is_logged_with_the_permission_and_never_raised(caplog):
    commenter = PlanCommenter({"github": _github()})
    forbidden = recorded("github", "forbidden")
    with respx.mock() as router:
        router.get(f"{GH}{GH_REPO}/issues/7/comments").mock(return_value=forbidden)
        with caplog.at_level(logging.ERROR, logger="nodus_gitops.checks"):
            commenter.post(_review(), "feature", 7)
    assert "plan comment not written" in caplog.text
    assert "Resource not accessible by integration" in caplog.text
    assert "(pull requests: write)" in caplog.text and TOKEN not in caplog.text


GL = "https://gitlab.example.com/api/v4"
GL_MR = "/projects/platform%2Fml%2Fgpu-jobs/merge_requests"


def test_gitlab_notes_are_created_then_edited_and_system_notes_skipped():
    api = client(GL, gitlab_auth, FakeTime())
    writer = GitLabNotes(api, "platform/ml/gpu-jobs", "https://gitlab.example.com")
    commenter = PlanCommenter({"gitlab": writer})
    system = recorded("gitlab", "system_note").json()
    system["body"] = f"{MARK} quoted by a system note"
    with respx.mock(assert_all_called=True) as router:
        mrs = router.get(f"{GL}{GL_MR}").mock(return_value=httpx.Response(
            200, json=[recorded("gitlab", "merge_request_opened").json()]))
        notes = router.get(f"{GL}{GL_MR}/7/notes").mock(
            return_value=httpx.Response(200, json=[system]))
        created = router.post(f"{GL}{GL_MR}/7/notes").mock(
            return_value=recorded("gitlab", "note"))
        edited = router.put(f"{GL}{GL_MR}/7/notes/302").mock(
            return_value=recorded("gitlab", "note"))
        commenter.post(_review(), "feature", None)
        commenter.post(_review(value="3.00"), "feature", None)
    params = mrs.calls[0].request.url.params
    assert (params["state"], params["source_branch"]) == ("opened", "feature")
    note_params = notes.calls[0].request.url.params
    assert (note_params["sort"], note_params["order_by"], note_params["per_page"]) == (
        "asc", "created_at", "100")
    assert created.call_count == 1 and edited.call_count == 1 and notes.call_count == 1
    text = body(created.calls[0].request)["body"]
    assert text.startswith(MARK)
    assert (f"(https://gitlab.example.com/platform/ml/gpu-jobs/-/blob/{HEAD}/"
            "jobs/job-0000.yaml#L1)") in text
    assert "'3.00'" in body(edited.calls[0].request)["body"]
    assert created.calls[0].request.headers["PRIVATE-TOKEN"] == TOKEN


def test_gitlab_finds_its_note_again_after_a_restart():
    api = client(GL, gitlab_auth, FakeTime())
    writer = GitLabNotes(api, "platform/ml/gpu-jobs", "https://gitlab.example.com")
    ours = recorded("gitlab", "note", fields={"id": 303, "body": f"{MARK}\nold"}).json()
    with respx.mock(assert_all_called=True) as router:
        router.get(f"{GL}{GL_MR}/7/notes").mock(return_value=httpx.Response(
            200, json=[ours], headers={"x-next-page": "", "x-page": "1", "x-total": "1"}))
        router.get(f"{GL}/user").mock(return_value=recorded("gitlab", "current_user"))
        edited = router.put(f"{GL}{GL_MR}/7/notes/303").mock(
            return_value=recorded("gitlab", "note"))
        writer.upsert(7, MARK, f"{MARK}\nnew")
    assert body(edited.calls[0].request) == {"body": f"{MARK}\nnew"}


GT = "https://git.example/api/v1"
GT_REPO = "/repos/team/gpu-jobs"


def test_gitea_comments_are_created_then_edited():
    api = client(GT, gitea_auth, FakeTime())
    writer = GiteaComments(api, "team/gpu-jobs", "https://git.example")
    commenter = PlanCommenter({"gitea": writer})
    other = recorded("gitea", "pull_open").json()
    other = {**other, "number": 3, "head": {**other["head"], "ref": "other"}}
    with respx.mock(assert_all_called=True) as router:
        pulls = router.get(f"{GT}{GT_REPO}/pulls").mock(return_value=httpx.Response(
            200, json=[other, recorded("gitea", "pull_open").json()]))
        listed = router.get(f"{GT}{GT_REPO}/issues/7/comments").mock(
            return_value=httpx.Response(200, json=[]))
        created = router.post(f"{GT}{GT_REPO}/issues/7/comments").mock(
            return_value=recorded("gitea", "comment"))
        edited = router.patch(f"{GT}{GT_REPO}/issues/comments/41").mock(
            return_value=recorded("gitea", "comment"))
        commenter.post(_review(), "feature", None)
        commenter.post(_review(value="3.00"), "feature", None)
    assert pulls.calls[0].request.url.params["state"] == "open"
    assert listed.call_count == 1 and created.call_count == 1 and edited.call_count == 1
    assert created.calls[0].request.headers["Authorization"] == f"token {TOKEN}"
    assert (f"(https://git.example/team/gpu-jobs/src/commit/{HEAD}/jobs/job-0000.yaml#L1)"
            in body(created.calls[0].request)["body"])


def test_a_comment_by_someone_else_that_starts_with_the_marker_is_never_edited():
    """Anyone can copy the hidden marker: only a comment written as this token's own user
    is the plan comment, so another's is neither overwritten nor trusted."""
    writer = _github()
    forged = recorded("github", "issue_comment_by_user", fields={
        "id": 3, "body": f"{MARK}\n**Nothing to apply**"}).json()
    ours = _comment(42, f"{MARK}\nold plan")
    ours["user"] = {"login": "Nodus-Bot", "id": 583231, "type": "User"}  # case differs
    with respx.mock(assert_all_called=False) as router:
        listed = router.get(f"{GH}{GH_REPO}/issues/7/comments").mock(side_effect=[
            httpx.Response(200, json=[forged]), httpx.Response(200, json=[forged, ours])])
        router.get(f"{GH}/user").mock(return_value=recorded("github", "authenticated_user"))
        created = router.post(f"{GH}{GH_REPO}/issues/7/comments").mock(
            return_value=recorded("github", "issue_comment", fields={"id": 11}))
        edited = router.patch(f"{GH}{GH_REPO}/issues/comments/42").mock(
            return_value=recorded("github", "issue_comment_updated", fields={"id": 42}))
        forged_edit = router.patch(f"{GH}{GH_REPO}/issues/comments/3")
        writer.upsert(7, MARK, f"{MARK}\nthe plan")  # only the forged one: a comment of ours
        _github().upsert(7, MARK, f"{MARK}\nnew plan")  # after a restart: ours, not the forged
    assert listed.call_count == 2 and forged_edit.call_count == 0
    assert body(created.calls[0].request) == {"body": f"{MARK}\nthe plan"}
    assert body(edited.calls[0].request) == {"body": f"{MARK}\nnew plan"}


def test_a_create_whose_answer_is_lost_is_not_sent_twice():
    """GitHub wrote the comment, then answered 502 (or the connection broke): the writer
    looks before sending again, so the pull request still has one plan comment."""
    writer = _github()
    thread: list[dict] = []

    def create(request: httpx.Request) -> httpx.Response:
        thread.append(_comment(len(thread) + 11, body(request)["body"]))
        thread[-1]["user"] = recorded("github", "authenticated_user").json()
        return httpx.Response(502, json={"message": "Server Error"}) if len(thread) == 1 \
            else httpx.Response(201, json=thread[-1])

    with respx.mock() as router:
        router.get(f"{GH}{GH_REPO}/issues/7/comments").mock(
            side_effect=lambda request: httpx.Response(200, json=list(thread)))
        router.get(f"{GH}/user").mock(return_value=recorded("github", "authenticated_user"))
        router.post(f"{GH}{GH_REPO}/issues/7/comments").mock(side_effect=create)
        edited = router.patch(f"{GH}{GH_REPO}/issues/comments/11").mock(
            return_value=recorded("github", "issue_comment_updated", fields={"id": 11}))
        writer.upsert(7, MARK, f"{MARK}\nfirst push")
        writer.upsert(7, MARK, f"{MARK}\nsecond push")
    assert [c["id"] for c in thread] == [11]
    assert body(edited.calls[0].request) == {"body": f"{MARK}\nsecond push"}


def test_a_create_refused_by_a_server_error_is_sent_again():
    writer = _github()
    with respx.mock() as router:
        router.get(f"{GH}{GH_REPO}/issues/7/comments").mock(
            return_value=httpx.Response(200, json=[]))
        created = router.post(f"{GH}{GH_REPO}/issues/7/comments").mock(side_effect=[
            recorded("github", "server_error"),
            recorded("github", "issue_comment", fields={"id": 11})])
        writer.upsert(7, MARK, f"{MARK}\nfirst push")
    assert created.call_count == 2


def test_gitlab_skips_a_merge_request_from_a_fork_with_the_same_branch_name():
    api = client(GL, gitlab_auth, FakeTime())
    writer = GitLabNotes(api, "platform/ml/gpu-jobs", "https://gitlab.example.com")
    ours = recorded("gitlab", "merge_request_opened").json()
    fork = {**ours, "id": 380, "iid": 9, "source_project_id": 66,
            "sha": "0000000000000000000000000000000000000009"}
    with respx.mock(assert_all_called=True) as router:
        router.get(f"{GL}{GL_MR}").mock(return_value=httpx.Response(200, json=[fork, ours]))
        # the branch moved on: neither request's head is the commit planned
        assert writer.find_request("feature", "1" * 40) == 7


def test_gitea_finds_its_own_comment_again_and_names_read_user_when_refused(caplog):
    api = client(GT, gitea_auth, FakeTime())
    forged = {**recorded("gitea", "comment").json(), "id": 40, "body": f"{MARK}\nforged",
              "user": {"id": 9, "login": "mallory"}}
    ours = {**recorded("gitea", "comment").json(), "body": f"{MARK}\nold"}
    with respx.mock(assert_all_called=True) as router:
        router.get(f"{GT}{GT_REPO}/issues/7/comments").mock(
            return_value=httpx.Response(200, json=[forged, ours]))
        router.get(f"{GT}/user").mock(side_effect=[
            recorded("gitea", "forbidden"), recorded("gitea", "current_user")])
        edited = router.patch(f"{GT}{GT_REPO}/issues/comments/41").mock(
            return_value=recorded("gitea", "comment"))
        commenter = PlanCommenter({"gitea": GiteaComments(api, "team/gpu-jobs",
                                                          "https://git.example")})
        with caplog.at_level(logging.ERROR, logger="nodus_gitops.checks"):
            commenter.post(_review(), "feature", 7)  # GET /user refused: nothing edited
        assert "(a token with read:user)" in caplog.text and edited.call_count == 0
        commenter.post(_review(), "feature", 7)
    assert edited.call_count == 1 and edited.calls[0].request.url.path.endswith("/41")
