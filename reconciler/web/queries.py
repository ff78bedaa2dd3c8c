"""Read-only queries the dashboard needs beyond the store's methods: the resources table
filtered, sorted and paged in SQL (so 10,000 resources cost one indexed page), the
values its filters offer, and the per-binding and per-phase aggregates. Nothing here
writes; every query runs on the store's engine in a short read transaction."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from nodus_gitops.state.base import split_key
from nodus_gitops.state.models import InventoryItem
from nodus_gitops.state.records import InventoryRecord
from nodus_gitops.state.store import Store
from sqlalchemy import Float, Numeric, Table, cast, func, select

_R: Table = InventoryItem.__table__  # type: ignore[attr-defined]

PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
UNKNOWN = "Unknown"

# sort key -> (column expression, whether ascending on the key means descending in SQL)
_SORTS: dict[str, tuple[Any, bool]] = {
    "kind": (_R.c.kind, False),
    "project": (_R.c.project, False),
    "name": (_R.c.name, False),
    "repo": (_R.c.binding_id, False),
    "phase": (_R.c.phase, False),
    "reason": (_R.c.reason, False),
    "cost": (cast(_R.c.cost_usd, Float), False),
    "age": (_R.c.created_at, True),  # youngest first
    "commit": (_R.c.source_commit, False),
}
SORT_KEYS = tuple(_SORTS)


@dataclass(frozen=True)
class ResourceQuery:
    """Filters, order and page of the resources table and `/api/v1/resources`."""

    repo: str | None = None
    kind: str | None = None
    phase: tuple[str, ...] = ()
    project: str | None = None
    name: str | None = None  # a substring of the name
    sort: str = "kind"
    descending: bool = False
    page: int = 1
    page_size: int = PAGE_SIZE

    @classmethod
    def from_params(cls, params: Mapping[str, list[str]]) -> ResourceQuery:
        """From a parsed query string; ValueError names the bad parameter."""

        def one(name: str) -> str | None:
            values = params.get(name) or []
            return values[-1].strip() or None if values else None

        sort = one("sort") or "kind"
        descending = sort.startswith("-")
        sort = sort.lstrip("-")
        if sort not in _SORTS:
            raise ValueError(f"sort: {sort!r} is not one of {', '.join(SORT_KEYS)}")
        page = positive(one("page") or "1", "page")
        size = positive(one("pageSize") or str(PAGE_SIZE), "pageSize")
        if size > MAX_PAGE_SIZE:
            raise ValueError(f"pageSize: at most {MAX_PAGE_SIZE}")
        phases = tuple(p for v in params.get("phase") or [] for p in v.split(",") if p.strip())
        return cls(repo=one("repo"), kind=one("kind"), phase=tuple(p.strip() for p in phases),
                   project=one("project"), name=one("name"), sort=sort,
                   descending=descending, page=page, page_size=size)

    def params(self, **changes: Any) -> dict[str, Any]:
        """The query-string parameters of this query, with `changes` applied."""
        values: dict[str, Any] = {
            "repo": self.repo, "kind": self.kind, "phase": ",".join(self.phase) or None,
            "project": self.project, "name": self.name,
            "sort": None if self.sort == "kind" and not self.descending
            else ("-" if self.descending else "") + self.sort,
            "page": self.page if self.page > 1 else None,
            "pageSize": self.page_size if self.page_size != PAGE_SIZE else None,
        }
        values.update(changes)
        return values

    def _where(self) -> list[Any]:
        clauses = []
        for column, value in (("binding_id", self.repo), ("kind", self.kind),
                              ("project", self.project)):
            if value is not None:
                clauses.append(_R.c[column] == value)
        if self.name:
            clauses.append(_R.c.name.contains(self.name, autoescape=True))
        if self.phase:
            known = [p for p in self.phase if p != UNKNOWN]
            cond = _R.c.phase.in_(known)
            if UNKNOWN in self.phase:
                cond = cond | _R.c.phase.is_(None)
            clauses.append(cond)
        return clauses


MOST_PAGES = 1_000_000  # past any list's end; a bigger number would overflow SQL's integers


def positive(text: str, name: str) -> int:
    """A page number or size from a query parameter: 1 to MOST_PAGES, else ValueError."""
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name}: {text!r} is not a whole number") from None
    if not 1 <= value <= MOST_PAGES:
        raise ValueError(f"{name}: must be 1 to {MOST_PAGES:,}")
    return value


def _record(row: Any) -> InventoryRecord:
    key, values = split_key(row)
    values.pop("id", None)
    values.pop("total", None)
    values["deleted"] = bool(values["deleted"])
    return InventoryRecord(key=key, **values)


def resources_page(store: Store, q: ResourceQuery) -> tuple[list[InventoryRecord], int]:
    """One page of the resources matching `q`, and how many match in all."""
    where = q._where()
    column, inverted = _SORTS[q.sort]
    desc = q.descending != inverted
    if q.sort == "kind":  # the key itself, unique: its index gives the order
        order = [c.desc() if desc else c.asc() for c in (_R.c.kind, _R.c.project, _R.c.name)]
    else:
        # Ties in creation order (id), the same way round: an index on the column alone
        # then gives the whole order (every SQLite index holds the row id), where
        # (kind, project, name) after it would make SQLite read every row to sort.
        order = [c.desc() if desc else c.asc() for c in (column, _R.c.id)]
    # Sort and page the ids only, then read the page's rows: sorting whole rows would
    # drag every row's JSON (manifest, status) through the sorter. The count of all the
    # matches rides along on each id (a window over the matches, taken before the
    # limit), so one pass over them gives both.
    page = (select(_R.c.id, func.count().over().label("total")).where(*where)
            .order_by(*order).limit(q.page_size).offset((q.page - 1) * q.page_size)
            .subquery("page"))
    query = (select(_R, page.c.total).join(page, page.c.id == _R.c.id).order_by(*order))
    with store._engine.connect() as conn:
        rows = conn.execute(query).all()
        if rows:
            total = rows[0].total
        else:  # past the end, or nothing matches: the window had no row to ride on
            total = conn.execute(select(func.count()).select_from(_R).where(*where)
                                 ).scalar_one()
    return [_record(r) for r in rows], int(total)


def facets(store: Store) -> dict[str, list[str]]:
    """The values the resources filters offer: repos, kinds and phases present."""
    out: dict[str, list[str]] = {}
    with store._engine.connect() as conn:
        for name, column in (("repo", _R.c.binding_id), ("kind", _R.c.kind),
                             ("phase", _R.c.phase)):
            values = conn.execute(select(column).distinct()).scalars().all()
            out[name] = sorted(v or UNKNOWN for v in values)
    return out


@dataclass(frozen=True)
class Totals:
    """Counts and cost over the whole inventory, from one grouped scan."""

    # binding, kind, phase, deleted, count, cost
    rows: tuple[tuple[str, str, str, bool, int, Decimal], ...]

    def phases_by_binding(self) -> dict[str, dict[str, int]]:
        """binding -> phase -> how many resources, deleted ones too."""
        return self._phases(live_only=False)

    def live_phases_by_binding(self) -> dict[str, dict[str, int]]:
        """binding -> phase -> how many resources not deleted (what health rolls up)."""
        return self._phases(live_only=True)

    def _phases(self, live_only: bool) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for binding, _kind, phase, deleted, n, _cost in self.rows:
            if live_only and deleted:
                continue
            counts = out.setdefault(binding, {})
            counts[phase] = counts.get(phase, 0) + n
        return {b: dict(sorted(c.items())) for b, c in out.items()}

    def cost_by_binding(self) -> dict[str, Decimal]:
        out: dict[str, Decimal] = {}
        for binding, _kind, _phase, _deleted, _n, cost in self.rows:
            out[binding] = out.get(binding, Decimal(0)) + cost
        return out

    def by_kind_phase(self) -> list[tuple[str, str, int]]:
        out: dict[tuple[str, str], int] = {}
        for _binding, kind, phase, _deleted, n, _cost in self.rows:
            out[(kind, phase)] = out.get((kind, phase), 0) + n
        return [(k, p, n) for (k, p), n in sorted(out.items())]


def totals(store: Store) -> Totals:
    """Resources and cost per (binding, kind, phase, deleted), summed in SQL in one pass:
    the overview's counts, its health and /metrics all read this one scan."""
    cost = func.sum(cast(_R.c.cost_usd, Numeric(20, 6)))
    columns = (_R.c.binding_id, _R.c.kind, _R.c.phase, _R.c.deleted)
    query = select(*columns, func.count(), cost).group_by(*columns)
    with store._engine.connect() as conn:
        rows = conn.execute(query).all()
    return Totals(tuple((b, k, p or UNKNOWN, bool(d), int(n), _decimal(c))
                        for b, k, p, d, n, c in rows))


def _decimal(value: Any) -> Decimal:
    try:
        return Decimal(str(value or 0)).quantize(Decimal("0.000001"))
    except InvalidOperation:
        return Decimal(0)
