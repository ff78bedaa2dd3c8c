"""The dashboard's list pages: Overview (one card per repo binding) and Resources (the
filtered, sorted, paged table); History is in history.py. Each returns the whole HTML
document; app.js keeps it current by polling the JSON API."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodus_gitops.floor.redaction import url_without_userinfo
from nodus_gitops.output import age, money, progress
from nodus_gitops.web import api, queries, search
from nodus_gitops.web.format import (
    commit_link,
    now_text,
    one_line,
    pager_links,
    result_badge,
    when,
)
from nodus_gitops.web.html import (
    Safe,
    definition_list,
    esc,
    layout,
    path,
    phase_badge,
    table,
    tag,
    th,
    with_query,
)

if TYPE_CHECKING:
    from nodus_gitops.service import Service

BAD_PHASES = frozenset({"Failed"})
# Sync statuses a person should look at: the card says it stands out.
PROBLEM_SYNC = frozenset({"Failed", "Blocked"})


def _phase_counts(binding: str, counts: dict[str, int]) -> Safe:
    if not counts:
        return tag("p", "no resources yet", class_="muted", data_field="phases")
    items = [tag("li", tag("a", phase_badge(phase, None), " ", tag("span", n, class_="count"),
                           href=with_query("/resources", {"repo": binding, "phase": phase})),
                 class_="bad" if phase in BAD_PHASES else None)
             for phase, n in counts.items()]
    return tag("ul", *items, class_="counts", data_field="phases")


def _commit(b: dict[str, Any], key: str) -> Safe:
    """A head or applied commit: its SHA (linked to its host's page when known), then
    its message's first line, author and time as Git has them."""
    c = b[key]
    if c is None:
        return tag("span", "-", data_field=key)
    if c["message"] is None:
        about: list[Any] = [tag("span", "message not in the mirror yet", class_="muted")]
    else:
        about = [tag("span", c["message"], class_="message"), " · ",
                 tag("span", c["author"], class_="author"), " · ", when(c["time"])]
    return tag("span", commit_link(b["url"], c["sha"]), " ", *about, class_="commit",
               data_field=key)


def _budget(b: dict[str, Any]) -> Safe:
    budget = b["budget"]
    if budget is None:
        return tag("span", "no budget", class_="muted", data_field="budget")
    left, limit, period = budget["leftUSD"], budget["limitUSD"], budget["period"]
    over = left.startswith("-")
    head = (tag("strong", f"${left[1:]} over", class_="over") if over else f"${left} left")
    return tag("span", head, f" of ${limit} per {period} (project {budget['project']} spent "
                            f"${budget['spentUSD']} since {budget['periodStart'][:10]})",
               class_="bad" if over else None, data_field="budget")


def _label(word: str, hint: str) -> Safe:
    """A card's label, with what it answers under it."""
    return Safe(esc(word) + " " + tag("small", hint, class_="hint"))


def _status(b: dict[str, Any]) -> list[tuple[Safe, Safe]]:
    """The sync status and the health, each labelled with what it answers (as Argo CD
    puts "Sync" and "Health" beside each: Synced and Degraded at once is no
    contradiction), each a word, and beside it why."""
    sync, health = b["syncStatus"], b["health"]
    rows = [
        (_label("Sync", "Git's head commit applied?"),
         tag("span", tag("strong", sync, class_=f"sync-status sync-{sync.lower()}",
                         data_field="syncStatus"),
             " — ", tag("span", b["syncReason"], data_field="syncReason"))),
        (_label("Health", "how its resources ran"),
         tag("span", tag("strong", health, class_=f"health health-{health.lower()}",
                         data_field="health"),
             " — ", tag("span", b["healthReason"], data_field="healthReason"))),
    ]
    if b["failures"] is not None:
        rows.append((_label("Why", "its failed resources"), _failures(b["failures"])))
    return rows


MESSAGE_CHARS = 200  # a failure's message on a card: one line; its page has the rest
FIX_CHARS = 300
# What the card says of a reason that is not the resource's own doing (Cause).
_CAUSE_WORDS = {
    "host": "A problem of the host that runs the {backend}, not of the manifests.",
    "backend": "Reported by the {backend}: its set-up (images, storage, capacity, quota) "
               "may be the cause as much as the manifest.",
}


def _failures(f: dict[str, Any]) -> Safe:
    """Why the binding's resources failed: the commonest reason with how many have it,
    one's message on one line and a link to it; whose problem it is when it is not the
    resource's own; the fix its backend recorded; the other reasons with their counts.
    Each text as the store holds it (masked by the API, escaped here), never a default."""
    reason = f["reason"] or "no reason recorded"
    head = (f"{f['failed']} Failed: {reason}" if f["count"] == f["failed"]
            else f"{f['failed']} Failed, {f['count']} of them {reason}")
    r = f["resource"]
    line: list[Any] = [tag("strong", head, class_="failure-reason")]
    if f["message"]:
        shown = one_line(f["message"], MESSAGE_CHARS)
        line += [" — ", tag("span", shown, class_="failure-message",
                            title=f["message"][:1000] if shown.endswith("…") else None)]
    line += ["; see ", tag("a", f"{r['kind'].lower()}/{r['name']}", href=r["url"])]
    parts = [tag("p", *line)]
    if (cause := _CAUSE_WORDS.get(f["cause"])) is not None:
        backend = f"{f['provider']} backend" if f["provider"] else "backend"
        parts.append(tag("p", cause.format(backend=backend),
                         class_=f"failure-cause cause-{f['cause']}"))
    if f["fix"]:
        parts.append(tag("p", tag("strong", "Fix:"), " ", one_line(f["fix"], FIX_CHARS),
                         class_="failure-fix"))
    if f["otherReasons"]:
        others = ", ".join(f"{o['count']} {o['reason'] or 'with no reason recorded'}"
                           for o in f["otherReasons"])
        parts.append(tag("p", f"also {others}", class_="muted"))
    return tag("div", *parts, class_="failures", data_field="failures")


def overview_card(b: dict[str, Any]) -> Safe:
    binding = b["id"]
    last = b["lastSync"] or {}
    problem = bool(b["lastError"]) or b["syncStatus"] in PROBLEM_SYNC or \
        b["health"] == "Degraded"
    facts = [
        *_status(b),
        ("Head commit", _commit(b, "headCommit")),
        ("Applied commit", _commit(b, "appliedCommit")),
        ("Last sync", tag("span", result_badge(last.get("result")), " ",
                          when(last.get("finishedAt")), " ",
                          tag("span", last.get("message") or "", class_="muted"),
                          data_field="lastSync")),
        ("Last poll", tag("span", when(b["lastPollAt"]), data_field="lastPollAt")),
        ("Spend", tag("span", f"${b['spendUSD']}", data_field="spendUSD")),
        ("Budget", _budget(b)),
        ("Repository", tag("span", b["url"], class_="url")),
        ("Branch", tag("code", b["branch"] or "-")),
        ("Path", tag("code", b["path"] or "/")),
        ("Project", b["project"] or "-"),
    ]
    if b["lastError"]:
        facts.append(("Error", tag("span", b["lastError"], class_="error")))
    links = tag("p",
                tag("a", "resource tree", href=path("repos", binding)), " · ",
                tag("a", "resources", href=with_query("/resources", {"repo": binding})), " · ",
                tag("a", "history", href=with_query("/history", {"repo": binding})),
                class_="links")
    return tag("section", tag("h2", tag("a", binding, href=path("repos", binding))),
               definition_list(facts), tag("h3", "Resources by phase"),
               _phase_counts(binding, b["phases"]), links,
               class_="card" + (" problem" if problem else ""), data_binding=binding)


def overview(service: Service) -> bytes:
    cards = [overview_card(b) for b in api.repos(service)]
    if not cards:
        cards.append(tag("p", "No repository bindings are configured.", class_="muted"))
    return layout("Overview", tag("div", *cards, class_="cards", data_live="overview-cards"),
                  active="overview", poll="/api/v1/repos", generated=now_text())


def _sort_header(q: queries.ResourceQuery, key: str, label: str) -> Safe:
    active = q.sort == key
    descending = not q.descending if active else False
    href = with_query("/resources", q.params(sort=("-" if descending else "") + key, page=None))
    arrow = (" ▼" if q.descending else " ▲") if active else ""
    sort = ("descending" if q.descending else "ascending") if active else None
    return th(tag("a", label + arrow, href=href, class_="sort"), aria_sort=sort)


_COLUMNS = (("kind", "Kind"), ("name", "Name"), ("project", "Project"), ("phase", "Phase"),
            (None, "Progress"), ("reason", "Reason"), ("cost", "Cost"), ("age", "Age"),
            ("commit", "Commit"), ("repo", "Repo"))


def resource_row(r: Any, repo_urls: dict[str, str | None]) -> Safe:
    key = str(r.key)
    link = path("resources", r.key.kind, r.key.project, r.key.name)
    return tag(
        "tr",
        tag("td", r.key.kind),
        tag("td", tag("a", r.key.name, href=link),
            tag("span", " (gone)", class_="muted") if r.deleted else ""),
        tag("td", r.key.project),
        tag("td", phase_badge(r.phase)),
        tag("td", progress(r), data_field="progress"),
        tag("td", r.reason or "", data_field="reason"),
        tag("td", money(r.cost_usd), data_field="cost", class_="num"),
        tag("td", age(r.created_at)),
        tag("td", commit_link(repo_urls.get(r.binding_id), r.source_commit)),
        tag("td", r.binding_id),
        data_key=key, class_="bad" if r.phase in BAD_PHASES else None)


def _select(name: str, values: list[str], current: str | None) -> Safe:
    options = [tag("option", "any", value="")]
    options += [tag("option", v, value=v, selected=v == current) for v in values]
    return tag("label", name.capitalize(), " ", tag("select", *options, name=name))


def search_box(q: search.ResourceSearch) -> Safe:
    """The search box: every filter as words (`hello phase:Failed team=ml`), first on the
    page for the keyboard; its own form, so what it holds replaces the filters."""
    return tag(
        "form",
        tag("label", "Search resources", for_="search-q"), " ",
        tag("input", type="search", name="q", id="search-q", value=q.words(),
            placeholder="name, team=ml, phase:Failed, commit:0123abc", accesskey="s",
            aria_describedby="search-help", autocomplete="off"),
        tag("button", "Search", type="submit"),
        tag("p", "A word matches part of a name; key=value, key!=value and !key match "
                 "labels; kind:, phase:, repo:, project: and commit: (a SHA's start) filter.",
            id="search-help", class_="muted help"),
        method="get", action="/resources", role="search", class_="search")


def resources(service: Service, params: dict[str, list[str]]) -> tuple[int, bytes]:
    try:
        q = search.ResourceSearch.from_params(params)
    except ValueError as exc:
        return 400, layout("Resources", tag("p", str(exc), class_="error"), active="resources")
    records, total = queries.resources_page(service.store, q)
    facets = queries.facets(service.store)
    urls = {b.id: url_without_userinfo(b.url) for b in service.store.list_bindings()}
    form = tag(
        "form",
        _select("repo", facets["repo"], q.repo), _select("kind", facets["kind"], q.kind),
        _select("phase", facets["phase"], ",".join(q.phase) or None),
        tag("label", "Name", " ", tag("input", type="search", name="name", value=q.name or "")),
        tag("label", "Label", " ", tag("input", type="search", name="label",
                                       value=q.params()["label"] or "",
                                       placeholder="team=ml")),
        tag("label", "Commit", " ", tag("input", type="search", name="commit",
                                        value=q.commit or "", placeholder="0123abc")),
        tag("input", type="hidden", name="sort", value=q.params()["sort"]),
        tag("button", "Filter", type="submit"),
        tag("a", "clear", href="/resources"),
        method="get", action="/resources", class_="filters", data_autosubmit=True)
    headers = [_sort_header(q, k, label) if k else label for k, label in _COLUMNS]
    nav = pager_links("/resources", q.params, q.page, q.page_size, total, "resources")
    rows = [resource_row(r, urls) for r in records]
    body = [search_box(q), form, table(headers, rows, live="resources-rows", class_="resources"),
            tag("nav", *nav, class_="pager", data_live="resources-pager")]
    body.insert(2, tag("p", "" if records else "No resources match.", class_="muted",
                       data_live="resources-empty"))
    poll = with_query("/api/v1/resources", q.params())
    return 200, layout("Resources", body, active="resources", poll=poll, generated=now_text())
