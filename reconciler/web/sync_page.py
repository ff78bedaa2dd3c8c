"""The page of one sync (`/syncs/<id>`): which binding and commit, when and how long, its
result; the plan as a diff field by field (plan_diff.py); what was applied, as the
journal recorded each provider call; the checks posted for the commit; and the problems,
each linked to its file's line at the commit. Also the problem and check lists the
History page shows of each sync."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodus_gitops.floor.redaction import url_without_userinfo
from nodus_gitops.floor.results import counts_text
from nodus_gitops.web import markdown, plan_diff, sync_queries
from nodus_gitops.web.format import BAD_RESULTS, commit_link, duration, now_text, result_badge, when
from nodus_gitops.web.html import Safe, definition_list, layout, path, table, tag, with_query
from nodus_gitops.web.redact import configured_secrets, mask, mask_sync

if TYPE_CHECKING:
    from nodus_gitops.service import Service
    from nodus_gitops.state.records import CheckRecordValue, IntentRecord

SHORT_LINES = 12  # of a check summary on the History page; the sync's page has them all


def source_link(binding: str, commit: str, file: str, line: int | None = None) -> str:
    """The file view of `file` at `commit` (`/repos/<binding>/files/<commit>/<path>`), at
    `line` when given; each segment of the path percent-encoded, its slashes kept."""
    segments = path(*file.split("/")).removeprefix("/")
    anchor = f"#L{line}" if line else ""
    return f"{path('repos', binding, 'files', commit)}/{segments}{anchor}"


def problem_list(binding: str, commit: str, problems: list[dict[str, Any]]) -> Safe:
    """Each problem as `file:line` (a link to the line), the resource, the field and what
    is wrong."""
    items = []
    for p in problems:
        file, line = str(p.get("file") or ""), p.get("line")
        where = f"{file}:{line}" if line else file
        parts: list[Any] = [tag("a", where, href=source_link(binding, commit, file,
                                                             line if isinstance(line, int)
                                                             else None)) if file else "?"]
        if p.get("kind") or p.get("name"):
            parts += [" ", tag("code", f"{p.get('kind') or '?'}/{p.get('name') or '?'}")]
        if p.get("path"):
            parts += [" ", tag("code", p.get("path"))]
        parts += [": ", p.get("message") or ""]
        items.append(tag("li", *parts, class_="problem"))
    return tag("ul", *items, class_="problems")


def check_list(checks: list[CheckRecordValue], *, more_at: str | None = None) -> Safe:
    """The checks posted for a commit, each with its summary rendered from Markdown.
    `more_at`: a page with the whole summaries; here only their first `SHORT_LINES`."""
    items = []
    for c in checks:
        head = tag("p", tag("strong", c.context), " ", result_badge(c.state, None), " to ",
                   tag("span", c.target, class_="target"), " · ", when(c.posted_at))
        lines = c.summary.splitlines()
        shown = lines[:SHORT_LINES] if more_at else lines
        summary = markdown.render("\n".join(shown)) if c.summary else tag(
            "p", "no summary", class_="muted")
        rest = len(lines) - len(shown)
        more = tag("p", tag("a", f"{rest} more lines of this summary", href=more_at),
                   class_="more") if rest and more_at else ""
        items.append(tag("li", head, summary, more, class_="check"))
    return tag("ul", *items, class_="checks")


def _action(a: dict[str, Any], binding: str, project: str | None, commit: str,
            sent: dict[tuple[str, str], dict[str, Any]]) -> Safe:
    kind, name, action = str(a.get("kind")), str(a.get("name")), str(a.get("action"))
    resource: Any = f"{kind}/{name}"
    if project and action != "delete":
        resource = tag("a", resource, href=path("resources", kind, project, name))
    file = a.get("file")
    head = tag("h3", tag("span", action, class_=f"action action-{action}"), " ", resource,
               " ", tag("a", tag("code", file), href=source_link(binding, commit, file))
               if file else "")
    manifest = sent.get((kind, name)) if action == "create" else None
    return tag("section", head, plan_diff.render_action(a, manifest),
               class_=f"plan-action action-{action}", data_resource=f"{kind}/{name}")


def _intent_row(i: IntentRecord) -> Safe:
    outcome = i.outcome or {}
    said = outcome.get("error") or (f"provider id {outcome['provider_id']}"
                                    if outcome.get("provider_id") else "")
    state = {"done": "done", "failed": "failed"}.get(i.state, i.state)
    return tag("tr", tag("td", i.action), tag("td", f"{i.key.kind}/{i.key.name}"),
               tag("td", tag("span", state, class_=f"phase phase-{state}"
                             + (" bad" if state == "failed" else ""))),
               tag("td", said, class_="error" if outcome.get("error") else None),
               tag("td", when(i.created_at)), tag("td", when(i.done_at)),
               class_="bad" if state == "failed" else None)


def sync_page(service: Service, sync_id: str) -> tuple[int, bytes]:
    s = service.store.get_sync(int(sync_id)) if sync_id.isdigit() else None
    if s is None:
        return 404, layout("Sync not found", tag("p", f"No sync {sync_id}.", class_="error"),
                           active="history")
    secrets = configured_secrets(service.settings)
    s = mask_sync(s, secrets)
    binding = service.store.get_binding(s.binding_id)
    repo_url = url_without_userinfo(binding.url) if binding else None
    plan = s.plan or {}
    counts = {k: n for k, n in (s.summary or {}).items() if isinstance(n, int)}
    facts: list[tuple[str, Any]] = [
        ("Binding", tag("a", s.binding_id, href=with_query("/history", {"repo": s.binding_id}))),
        ("Commit", commit_link(repo_url, s.commit)),
        ("Result", result_badge(s.result)), ("Message", s.message or "-"),
        ("Started", when(s.started_at)), ("Finished", when(s.finished_at)),
        ("Duration", duration(s.started_at, s.finished_at)),
    ]
    if counts:
        facts.append(("Changes", counts_text(counts)))
    intents = sync_queries.intents_of(service.store, s.binding_id, s.id)
    sent = {(i.key.kind, i.key.name): mask(i.payload["manifest"], secrets) for i in intents
            if i.action == "create" and isinstance(i.payload.get("manifest"), dict)}
    body: list[Any] = [definition_list(facts)]
    problems = plan.get("problems") or []
    if problems:
        body += [tag("h2", f"Problems ({len(problems)})"),
                 problem_list(s.binding_id, s.commit, problems)]
    actions = plan.get("actions") or []
    body.append(tag("h2", "Plan"))
    if actions:
        project = binding.project if binding else None
        body += [_action(a, s.binding_id, project, s.commit, sent) for a in actions]
    else:
        body.append(tag("p", "The commit has problems: nothing was planned." if problems
                        else "Nothing to change.", class_="muted"))
    body.append(tag("h2", "Applied"))
    if intents:
        body.append(table(["Call", "Resource", "State", "Outcome", "Journaled", "Done"],
                          [_intent_row(i) for i in intents], class_="applied"))
    else:
        body.append(tag("p", "No provider call was journaled with this sync.",
                        class_="muted"))
    checks = service.store.list_checks(commit=s.commit, binding_id=s.binding_id)
    body.append(tag("h2", "Checks posted for this commit"))
    body.append(check_list(checks) if checks
                else tag("p", "none", class_="muted"))
    title = f"Sync #{s.id}"
    page = tag("div", *body, class_="sync-page" + (" problem" if s.result in BAD_RESULTS
                                                    else ""), data_sync=s.id)
    return 200, layout(title, page, active="history", page="sync",
                       poll=f"/api/v1/syncs/{s.id}", generated=now_text())
