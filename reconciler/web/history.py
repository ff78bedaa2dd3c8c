"""The History page: every sync with its plan and the checks posted for its commit."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from nodus_gitops.floor.redaction import url_without_userinfo
from nodus_gitops.web.format import BAD_RESULTS, commit_link, now_text, result_badge, when
from nodus_gitops.web.html import Safe, definition_list, layout, table, tag, with_query

if TYPE_CHECKING:
    from nodus_gitops.service import Service


def _change(c: dict[str, Any]) -> Safe:
    return tag("li", tag("code", c.get("path")), ": ",
               tag("code", json.dumps(c.get("old"), default=str)), " → ",
               tag("code", json.dumps(c.get("new"), default=str)))


def _plan(plan: dict[str, Any]) -> Safe:
    actions = [a for a in plan.get("actions") or []
               if a.get("action") != "noop" or a.get("reason")]
    rows = []
    for a in actions:
        changes = [_change(c) for c in a.get("changes") or []]
        rows.append(tag(
            "tr",
            tag("td", tag("span", a.get("action"), class_=f"action action-{a.get('action')}")),
            tag("td", f"{a.get('kind')}/{a.get('name')}"),
            tag("td", tag("code", a.get("file"))),
            tag("td", a.get("reason") or "", tag("ul", *changes) if changes else "")))
    problems = [tag("li", f"{p.get('file')}:{p.get('line')}: {p.get('message')}",
                    class_="error") for p in plan.get("problems") or []]
    table_or_none = (table(["Action", "Resource", "File", "Detail"], rows, class_="plan")
                     if rows else tag("p", "no changes", class_="muted"))
    return Safe((tag("ul", *problems, class_="problems") if problems else "") + table_or_none)


def history(service: Service, params: dict[str, list[str]]) -> bytes:
    repo = (params.get("repo") or [None])[-1] or None
    syncs = service.store.list_syncs(repo, limit=100)
    urls = {b.id: url_without_userinfo(b.url) for b in service.store.list_bindings()}
    items = []
    for s in syncs:
        checks = service.store.list_checks(commit=s.commit, binding_id=s.binding_id)
        summary = ", ".join(f"{n} {k}" for k, n in (s.summary or {}).items() if n) or "-"
        check_rows = [tag("tr", tag("td", c.context), tag("td", result_badge(c.state, None)),
                          tag("td", c.target), tag("td", c.summary), tag("td", when(c.posted_at)))
                      for c in checks]
        items.append(tag(
            "section",
            tag("h2", f"#{s.id} ", s.binding_id, " @ ", commit_link(urls.get(s.binding_id),
                                                                    s.commit), " ",
                result_badge(s.result)),
            definition_list([("Started", when(s.started_at)), ("Finished", when(s.finished_at)),
                             ("Message", s.message or "-"), ("Summary", summary)]),
            tag("details", tag("summary", "Plan"), _plan(s.plan or {}),
                open=s.result in BAD_RESULTS),
            tag("h3", "Checks posted for this commit"),
            table(["Context", "State", "Target", "Summary", "Posted"], check_rows,
                  class_="checks") if check_rows else tag("p", "none", class_="muted"),
            class_="sync card" + (" problem" if s.result in BAD_RESULTS else ""),
            data_sync=s.id))
    if not items:
        items.append(tag("p", "No syncs yet.", class_="muted"))
    poll = with_query("/api/v1/syncs", {"repo": repo, "limit": 100})
    return layout("History", items, active="history", poll=poll, generated=now_text())
