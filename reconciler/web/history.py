"""The History page: every sync, newest first, fifty a page, filtered by binding, result
and commit (the filters in the URL). Each sync says what happened, its problems and the
checks posted for its commit, and links to its own page (sync_page.py) with the plan."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from nodus_gitops.floor.redaction import url_without_userinfo
from nodus_gitops.floor.results import counts_text
from nodus_gitops.web import sync_queries
from nodus_gitops.web.format import (
    BAD_RESULTS,
    commit_link,
    duration,
    now_text,
    pager_links,
    result_badge,
    when,
)
from nodus_gitops.web.html import Safe, layout, path, tag, with_query
from nodus_gitops.web.redact import Masker, configured_secrets
from nodus_gitops.web.sync_page import check_list, problem_list
from nodus_gitops.web.sync_queries import SyncQuery, SyncRow

if TYPE_CHECKING:
    from nodus_gitops.service import Service
    from nodus_gitops.state.records import CheckRecordValue

PROBLEMS_SHOWN = 10  # per sync on this page; its own page lists them all


def _select(name: str, label: str, values: list[str], chosen: list[str]) -> Safe:
    options = [tag("option", "any", value="")]
    options += [tag("option", v, value=v, selected=v in chosen) for v in values]
    return tag("label", label, " ", tag("select", *options, name=name))


def _filters(q: SyncQuery, bindings: list[str]) -> Safe:
    return tag(
        "form",
        _select("repo", "Repo", bindings, [q.repo] if q.repo else []),
        _select("result", "Result", list(sync_queries.RESULTS), list(q.result)),
        tag("label", "Commit", " ", tag("input", type="search", name="commit",
                                        value=q.commit or "", placeholder="sha prefix",
                                        pattern="[0-9a-fA-F]+", autocomplete="off")),
        tag("button", "Filter", type="submit"),
        tag("a", "clear", href="/history"),
        method="get", action="/history", class_="filters", data_autosubmit=True)


def _pager(q: SyncQuery, total: int, live: str) -> Safe:
    noun = "sync" if total == 1 else "syncs"
    return tag("nav", *pager_links("/history", q.params, q.page, q.page_size, total, noun),
               class_="pager", data_live=live)


def _sync_card(s: SyncRow, repo_url: str | None, checks: list[CheckRecordValue]) -> Safe:
    bad = s.result in BAD_RESULTS
    own_page = path("syncs", str(s.id))
    counts = {k: n for k, n in (s.summary or {}).items() if isinstance(n, int)}
    # One line of facts, so that a page of fifty syncs reads as a list, not fifty forms.
    facts: list[Any] = [when(s.started_at), " · ", duration(s.started_at, s.finished_at),
                        " · ", tag("span", s.message or "-", class_="message")]
    if counts and counts_text(counts) != s.message:
        facts += [" · ", counts_text(counts)]
    more = len(s.problems) - PROBLEMS_SHOWN
    parts = [
        tag("h2", tag("a", f"#{s.id}", href=own_page), " ", s.binding_id,
            " @ ", commit_link(repo_url, s.commit), " ", result_badge(s.result)),
        tag("p", *facts, class_="meta"),
    ]
    if s.problems:
        parts.append(problem_list(s.binding_id, s.commit, s.problems[:PROBLEMS_SHOWN]))
        if more > 0:
            parts.append(tag("p", tag("a", f"and {more} more problems",
                                      href=own_page)))
    if checks:
        parts += [tag("h3", "Checks posted for this commit"),
                  check_list(checks, more_at=own_page)]
    return tag("section", *parts, class_="sync card" + (" problem" if bad else ""),
               data_sync=s.id)


def history(service: Service, params: dict[str, list[str]]) -> bytes | tuple[int, bytes]:
    try:
        q = SyncQuery.from_params(params)
    except ValueError as exc:
        return 400, layout("History", tag("p", str(exc), class_="error"), active="history")
    store = service.store
    bindings = store.list_bindings()
    urls = {b.id: url_without_userinfo(b.url) for b in bindings}
    syncs, total = sync_queries.syncs_page(store, q)
    checks = sync_queries.checks_of(store, syncs)
    masker = Masker(configured_secrets(service.settings))
    syncs = [replace(s, message=masker.value(s.message), problems=masker.value(s.problems))
             for s in syncs]
    cards = [_sync_card(s, urls.get(s.binding_id), checks.get((s.binding_id, s.commit), []))
             for s in syncs]
    if not cards:
        filtered = q.repo or q.result or q.commit
        cards.append(tag("p", "No syncs match these filters." if filtered else "No syncs yet.",
                         class_="muted"))
    body = [_filters(q, sorted(set(urls) | set(service.syncs))),
            _pager(q, total, "history-pager-top"),
            tag("div", *cards, class_="syncs", data_live="history-rows"),
            _pager(q, total, "history-pager-bottom")]
    poll = with_query("/api/v1/syncs", {"repo": q.repo, "limit": q.page_size})
    return layout("History", body, active="history", poll=poll, generated=now_text())
