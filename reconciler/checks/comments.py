"""The plan as ONE comment per pull or merge request, edited in place on every push.

The comment opens with a hidden marker, `<!-- nodus-gitops:plan:<instance>:<binding> -->`,
by which it is found again: the writer remembers its id, and after a restart lists the
request's comments (all pages) for a body that starts with the marker, written by the
token's own user (`GET /user`; a GitHub App's `<slug>[bot]`): anyone can copy a marker,
and a comment of theirs is never edited nor taken for the plan. A push edits that
comment; a body equal to the one shown is not sent again. A create whose answer is lost
(a 5xx, a broken connection) is looked for before it is sent again. Hosts:

- GitHub: issue comments (`/repos/{owner}/{repo}/issues/{number}/comments`, edits at
  `/issues/comments/{id}`); 65,536 characters at most.
- GitLab: merge request notes (`/projects/{id}/merge_requests/{iid}/notes`, edits by PUT);
  1,000,000 characters at most.
- Gitea and Forgejo: GitHub's issue comment paths under `/api/v1`. Gitea checks no length
  (the API binds only `Required`; the column is LONGTEXT), so GitHub's limit is kept.

`PlanCommenter` posts through every configured host and, like the check poster, never
fails a sync or a preview: errors are logged with the setting to fix.
"""

from __future__ import annotations

import logging
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol
from urllib.parse import quote

from nodus_gitops.checks.plan_markdown import Target, render
from nodus_gitops.checks.review import PlanReview
from nodus_gitops.floor.errors import (
    NodusGitopsError,
    NotFoundError,
    PermanentError,
    TransientError,
)
from nodus_gitops.hosts.client import ApiClient

log = logging.getLogger("nodus_gitops.checks")

GITHUB_LIMIT = 65_536
GITLAB_LIMIT = 1_000_000
GITEA_LIMIT = GITHUB_LIMIT
_PULL_REF = re.compile(r"^refs/(?:pull|merge-requests)/(\d+)/head$")


def marker(instance: str, binding_id: str) -> str:
    return f"<!-- nodus-gitops:plan:{instance}:{binding_id} -->"


class CommentWriter(Protocol):
    name: str
    host: str  # as a reader names it: GitHub, GitLab, Gitea
    limit: int  # characters in one comment

    def link(self, commit: str) -> Callable[[str, int], str]: ...

    def find_request(self, branch: str, commit: str) -> int | None: ...

    def upsert(self, number: int, marker: str, body: str) -> None: ...


class _Thread(ABC):
    """Find-or-create-then-edit, shared by the hosts; they supply the requests, the shape
    of a link to a file at a commit (`blob`) and where a comment names its author."""

    blob: str  # {web}, {repo}, {commit}, {path}, {line}
    author_field, login_field = "user", "login"  # comment[author][login]; GET /user[login]
    user_needs: str  # what GET /user takes

    def __init__(self, api: ApiClient, repository: str, web_base: str, *,
                 login: Callable[[], str] | None = None) -> None:
        """`login`: who the writer comments as, when the token cannot ask `GET /user`."""
        self._api = api
        self._repo = repository  # owner/name, or a GitLab project's path
        self._web = web_base.rstrip("/")
        self._login = login or self._token_user
        self._me: str | None = None
        self._shown: dict[tuple[int, str], tuple[int, str]] = {}  # -> (comment id, body)

    def link(self, commit: str) -> Callable[[str, int], str]:
        # A name that is not UTF-8 holds its bytes as lone surrogates: linked as those bytes.
        return lambda path, line: self.blob.format(
            web=self._web, repo=self._repo, commit=commit,
            path=quote(path, errors="surrogateescape"), line=line)

    def upsert(self, number: int, marker: str, body: str) -> None:
        key = (number, marker)
        known = self._shown.get(key)
        if known is not None and _same(known[1], body):
            return
        if known is not None:
            try:
                self._edit(number, known[0], body)
                self._shown[key] = (known[0], body)
                return
            except NotFoundError:  # deleted by someone: find it again, or write anew
                del self._shown[key]
        found = self._find(number, marker)
        if found is None:
            created = self._api.request(
                "POST", self._create_path(number), json={"body": body}, needs=self.needs,
                written=lambda: self._find(number, marker))
            self._shown[key] = (int(created["id"]), body)
            return
        if not _same(found.get("body") or "", body):
            self._edit(number, int(found["id"]), body)
        self._shown[key] = (int(found["id"]), body)

    def _find(self, number: int, marker: str) -> dict[str, Any] | None:
        """The oldest comment of the request that opens with `marker` and is ours."""
        for comment in self._comments(number):
            if not str(comment.get("body") or "").lstrip().startswith(marker):
                continue
            author = (comment.get(self.author_field) or {}).get(self.login_field)
            if str(author or "").casefold() == self._whoami().casefold():
                return comment
        return None

    def _whoami(self) -> str:
        if self._me is None:
            self._me = self._login()
        return self._me

    def _token_user(self) -> str:
        found = self._api.request("GET", "/user", needs=self.user_needs)
        login = (found or {}).get(self.login_field)
        if not isinstance(login, str) or not login:
            raise PermanentError(f"GET {self._api.host}/user answered without a "
                                 f"{self.login_field}: cannot tell which comments are ours")
        return login

    @abstractmethod
    def _comments(self, number: int) -> Iterator[dict[str, Any]]:
        """Every comment of the request, oldest first."""

    @abstractmethod
    def _create_path(self, number: int) -> str:
        """Where a new comment is POSTed ({"body": ...})."""

    @abstractmethod
    def _edit(self, number: int, comment_id: int, body: str) -> None: ...


class GitHubComments(_Thread):
    name, host, limit = "github", "GitHub", GITHUB_LIMIT
    needs = "pull requests: write"
    user_needs = "a token of a user or a GitHub App"
    blob = "{web}/{repo}/blob/{commit}/{path}#L{line}"

    def find_request(self, branch: str, commit: str) -> int | None:
        owner = self._repo.split("/", 1)[0]
        pulls = self._api.request("GET", f"/repos/{self._repo}/pulls", params={
            "state": "open", "head": f"{owner}:{branch}", "per_page": "100"},
            needs="pull requests: read")
        return _pick(pulls or [], commit)

    def _comments(self, number: int) -> Iterator[dict[str, Any]]:
        for page in self._api.pages(f"/repos/{self._repo}/issues/{number}/comments",
                                    params={"per_page": "100"}, needs=self.needs):
            yield from page or []

    def _create_path(self, number: int) -> str:
        return f"/repos/{self._repo}/issues/{number}/comments"

    def _edit(self, number: int, comment_id: int, body: str) -> None:
        self._api.request("PATCH", f"/repos/{self._repo}/issues/comments/{comment_id}",
                          json={"body": body}, needs=self.needs)


class GiteaComments(GitHubComments):
    """GitHub's paths and bodies; the list of a pull request's comments is one page, and
    open pull requests are found by their head branch among all open ones."""

    name, host, limit = "gitea", "Gitea", GITEA_LIMIT
    needs = "a token with write:issue"
    user_needs = "a token with read:user"
    blob = "{web}/{repo}/src/commit/{commit}/{path}#L{line}"

    def find_request(self, branch: str, commit: str) -> int | None:
        found = []
        for page in self._api.pages(f"/repos/{self._repo}/pulls",
                                    params={"state": "open", "limit": "50"},
                                    needs="a token with read:repository"):
            found += [p for p in page or []
                      if (p.get("head") or {}).get("ref") == branch
                      and ((p.get("head") or {}).get("repo") or {}).get("full_name",
                                                                       self._repo) == self._repo]
        return _pick(found, commit)

    def _comments(self, number: int) -> Iterator[dict[str, Any]]:
        for page in self._api.pages(f"/repos/{self._repo}/issues/{number}/comments",
                                    needs=self.needs):
            yield from page or []


class GitLabNotes(_Thread):
    name, host, limit = "gitlab", "GitLab", GITLAB_LIMIT
    needs = "a token with the api scope (Developer role or more)"
    author_field, login_field = "author", "username"
    user_needs = needs
    blob = "{web}/{repo}/-/blob/{commit}/{path}#L{line}"

    def __init__(self, api: ApiClient, project: str, web_base: str) -> None:
        super().__init__(api, project, web_base)
        self._id = quote(project, safe="")

    def find_request(self, branch: str, commit: str) -> int | None:
        found = self._api.request("GET", f"/projects/{self._id}/merge_requests", params={
            "state": "opened", "source_branch": branch, "per_page": "100"}, needs=self.needs)
        # A fork's merge request into this project may have a branch of the same name.
        requests = [{**m, "number": m.get("iid"), "head": {"sha": m.get("sha")}}
                    for m in found or []
                    if m.get("source_project_id") == m.get("target_project_id")]
        return _pick(requests, commit)

    def _comments(self, number: int) -> Iterator[dict[str, Any]]:
        for page in self._api.pages(
                f"/projects/{self._id}/merge_requests/{number}/notes",
                params={"per_page": "100", "sort": "asc", "order_by": "created_at"},
                needs=self.needs):
            yield from (n for n in page or [] if not n.get("system"))

    def _create_path(self, number: int) -> str:
        return f"/projects/{self._id}/merge_requests/{number}/notes"

    def _edit(self, number: int, comment_id: int, body: str) -> None:
        self._api.request("PUT",
                          f"/projects/{self._id}/merge_requests/{number}/notes/{comment_id}",
                          json={"body": body}, needs=self.needs)


class PlanCommenter:
    """Shows a review as the plan comment of its pull request on every host; never raises."""

    def __init__(self, writers: Mapping[str, CommentWriter]) -> None:
        self._writers = dict(writers)

    def post(self, review: PlanReview, ref: str, number: int | None) -> None:
        if number is None and (match := _PULL_REF.match(ref)):
            number = int(match.group(1))
        branch = ref.removeprefix("refs/heads/")
        tag = marker(review.instance, review.binding_id)
        for writer in self._writers.values():
            fields = {"writer": writer.name, "binding": review.binding_id, "ref": ref,
                      "commit": review.commit}
            try:
                target = number if number is not None else writer.find_request(
                    branch, review.commit)
                if target is None:
                    log.info("no open pull request for this branch: no plan comment",
                             extra=fields)
                    continue
                body = render(review, Target(writer.host, writer.limit,
                                             writer.link(review.commit)), marker=tag)
                writer.upsert(target, tag, body)
            except TransientError as exc:
                log.warning("plan comment not written, the next push tries again: %s", exc,
                            extra=fields)
            except NodusGitopsError as exc:
                log.error("plan comment not written: %s", exc, extra=fields)
            except Exception:  # a bug here must not stop the preview or the other hosts
                log.exception("plan comment writer crashed", extra=fields)


def _same(shown: str, body: str) -> bool:
    """Hosts may hand a body back with CRLF line ends."""
    return shown.replace("\r\n", "\n").strip() == body.replace("\r\n", "\n").strip()


def _pick(requests: list[dict[str, Any]], commit: str) -> int | None:
    """The request whose head is `commit`, else the first; None when there is none."""
    for request in requests:
        if (request.get("head") or {}).get("sha") == commit:
            return int(request["number"])
    return int(requests[0]["number"]) if requests else None
