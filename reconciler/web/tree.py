"""The page of one repo binding, /repos/<binding>: its resources as a tree. Under the
binding its Pipelines, each with its stage Jobs, its Sweeps, each with its cell Jobs, and
its plain Jobs; every node links to its page and shows its phase, how long it has taken
and what it cost.

Git declares the Pipelines, Sweeps and Jobs, so they are the inventory's rows; the stage
and cell Jobs are read from their parent's recorded status (workloads/children.py). Each
kind is read a page at a time in SQL, so a binding of 100,000 resources costs a page of
rows, never the whole inventory."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nodus_gitops.floor.redaction import url_without_userinfo
from nodus_gitops.output import money
from nodus_gitops.state.base import split_key
from nodus_gitops.state.models import InventoryItem
from nodus_gitops.state.records import InventoryRecord
from nodus_gitops.state.store import Store
from nodus_gitops.web.detail import entry_timing, record_timing, stage_timings
from nodus_gitops.web.format import commit_link, now_text
from nodus_gitops.web.html import Safe, layout, path, phase_badge, tag, with_query
from nodus_gitops.workloads.children import PARENTS, children_of
from sqlalchemy import Table, func, select, tuple_

if TYPE_CHECKING:
    from nodus_gitops.service import Service

_R: Table = InventoryItem.__table__  # type: ignore[attr-defined]
PAGE_SIZE = 50
COUNT_MOST = 1000
KINDS = (("Pipeline", "Pipelines"), ("Sweep", "Sweeps"), ("Job", "Jobs"))


@dataclass(frozen=True)
class KindPage:
    """One page of one kind's resources in a binding: those after `after` (a
    `(project, name)`, None for the first page), and whether more follow."""

    kind: str
    records: list[InventoryRecord]
    after: tuple[str, str] | None
    more: bool


def kind_page(store: Store, binding: str, kind: str, after: tuple[str, str] | None = None,
              size: int = PAGE_SIZE) -> KindPage:
    """`binding`'s resources of `kind` after `after`, by project and name: the ids are
    read from the inventory's (kind, project, name) index from that key on (no offset to
    count through), then only their rows."""
    ids = select(_R.c.id).where(_R.c.kind == kind, _R.c.binding_id == binding)
    if after is not None:
        ids = ids.where(tuple_(_R.c.project, _R.c.name) > tuple_(*after))
    ids = ids.order_by(_R.c.project, _R.c.name).limit(size + 1)
    query = select(_R).where(_R.c.id.in_(ids.scalar_subquery())).order_by(
        _R.c.project, _R.c.name)
    with store._engine.connect() as conn:
        rows = conn.execute(query).all()
    return KindPage(kind, [_record(r) for r in rows[:size]], after, len(rows) > size)


def _record(row: Any) -> InventoryRecord:
    key, values = split_key(row)
    values.pop("id", None)
    values["deleted"] = bool(values["deleted"])
    return InventoryRecord(key=key, **values)


def kind_count(store: Store, binding: str, kind: str, most: int = COUNT_MOST) -> int:
    """How many resources of `kind` `binding` has, counted up to `most + 1`: the inventory
    has no index by binding and kind, so an exact count would read every row."""
    capped = select(_R.c.id).where(_R.c.kind == kind, _R.c.binding_id == binding).limit(
        most + 1).subquery()
    with store._engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(capped)).scalar_one())


def _count_text(n: int, most: int = COUNT_MOST) -> str:
    return f"more than {most}" if n > most else str(n)


def _resource_href(kind: str, project: str, name: str) -> str:
    return path("resources", kind, project, name)


def _node(label: str, link: Safe, phase: str | None, took: Safe, cost: Any,
          key: str, children: list[Safe] | None = None, **attrs: Any) -> Safe:
    """One node: what it is, its link, phase, duration and cost; its children below."""
    line = tag("span", tag("span", label, class_="node-kind"), " ", link, " ",
               phase_badge(phase), " ", tag("span", took, class_="took", data_field="took"),
               " ", tag("span", money(cost), class_="num", data_field="cost"),
               class_="node-line")
    below = tag("ul", *children, role="group") if children else Safe("")
    return tag("li", line, below, data_key=key, role="treeitem",
               aria_expanded="true" if children else None, **attrs)


def _child_nodes(r: InventoryRecord) -> list[Safe]:
    """A Pipeline's stage Jobs or a Sweep's cell Jobs, each linked once created."""
    if r.key.kind not in PARENTS:
        return []
    stages = stage_timings(r) if r.key.kind == "Pipeline" else {}
    ready = record_timing(r).created
    out = []
    for child in children_of(r):
        entry = dict(child.entry)
        timing = stages.get(child.id) or entry_timing(entry, ready)
        name = child.key.name
        link = tag("a", name, href=_resource_href("Job", child.key.project, name)) \
            if child.created else tag("span", name, " ",
                                      tag("span", "(not created)", class_="muted"))
        out.append(_node(f"{child.role} {child.id}", link, entry.get("phase"),
                         timing.running(), entry.get("costUSD"), str(child.key),
                         class_="child"))
    return out


def _resource_node(r: InventoryRecord) -> Safe:
    link = tag("a", r.key.name, href=_resource_href(r.key.kind, r.key.project, r.key.name))
    if r.deleted:
        link = Safe(link + tag("span", " (gone)", class_="muted"))
    return _node(r.key.kind, link, r.phase, record_timing(r).total(), r.cost_usd,
                 str(r.key), _child_nodes(r))


def _section(binding: str, title: str, found: KindPage, total: int) -> Safe:
    here = path("repos", binding)
    shown = f"{title} ({_count_text(total)})"
    nav = []
    if found.after is not None:
        nav.append(tag("a", f"‹ first {title.lower()}", rel="first",
                       href=with_query(here, {"kind": found.kind})))
    if found.more:
        last = found.records[-1].key
        nav.append(tag("a", f"next {title.lower()} ›", rel="next", href=with_query(here, {
            "kind": found.kind, "after": f"{last.project}/{last.name}"})))
    nodes = [_resource_node(r) for r in found.records]
    body = tag("ul", *nodes, class_="tree", role="tree", aria_label=title) if nodes else tag(
        "p", "none" if found.after is None else "no more", class_="muted")
    return tag("section", tag("h2", shown), body,
               tag("nav", *nav, class_="pager") if nav else Safe(""),
               data_kind=found.kind, class_="tree-kind")


def binding_page(service: Service, binding: str,
                 params: dict[str, list[str]]) -> tuple[int, bytes]:
    record = service.store.get_binding(binding)
    if record is None:
        return 404, layout("Not found", tag("p", f"No repo binding {binding}."))
    only = (params.get("kind") or [None])[-1]
    after_text = (params.get("after") or [None])[-1]
    if only is not None and only not in dict(KINDS):
        return 400, layout(binding, tag("p", f"kind: {only!r} is not one of Pipeline, Sweep, "
                                             "Job", class_="error"))
    if after_text is not None and (only is None or "/" not in after_text):
        return 400, layout(binding, tag("p", "after: <project>/<name>, with a kind",
                                        class_="error"))
    after = tuple(after_text.split("/", 1)) if after_text else None
    url = url_without_userinfo(record.url)
    facts = tag("p", tag("span", url, class_="url"), " · last applied ",
                commit_link(url, record.last_applied_commit), " · ",
                tag("a", "resources table", href=with_query("/resources", {"repo": binding})),
                " · ", tag("a", "history", href=with_query("/history", {"repo": binding})),
                class_="muted")
    sections = []
    for kind, title in KINDS:
        if only not in (None, kind):
            continue
        found = kind_page(service.store, binding, kind, after)  # type: ignore[arg-type]
        # A first page that is the last tells its own count; a longer kind is counted.
        total = len(found.records) if after is None and not found.more else (
            kind_count(service.store, binding, kind))
        sections.append(_section(binding, title, found, total))
    tree = tag("div", *sections, class_="resource-tree", data_live="tree")
    return 200, layout(binding, [facts, tree], active="overview", page="tree",
                       poll=with_query("/api/v1/resources", {"repo": binding}),
                       generated=now_text())
