"""Read-only queries of the History page and a sync's page: syncs filtered (binding,
result, commit prefix) and paged in SQL, the checks posted for a page's commits in one
query, and the journal entries a sync recorded. A page of syncs reads each row's counts
and problems, never its whole plan (a plan may hold thousands of actions)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nodus_gitops.floor.results import SyncResult
from nodus_gitops.state.base import split_key
from nodus_gitops.state.models import CheckRecord, Intent, Sync
from nodus_gitops.state.records import CheckRecordValue, IntentRecord
from nodus_gitops.state.store import Store
from nodus_gitops.web.queries import positive
from sqlalchemy import Table, func, select

_S: Table = Sync.__table__  # type: ignore[attr-defined]
_C: Table = CheckRecord.__table__  # type: ignore[attr-defined]
_I: Table = Intent.__table__  # type: ignore[attr-defined]

PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
# What a recorded sync can be: the polls that record none (unchanged, backoff) never are.
RESULTS = tuple(r.value for r in SyncResult if r not in (SyncResult.UNCHANGED,
                                                         SyncResult.BACKOFF))
_SHA_PREFIX = re.compile(r"^[0-9a-f]{1,64}$")


@dataclass(frozen=True)
class SyncQuery:
    """The History page's filters and page, as its URL carries them."""

    repo: str | None = None
    result: tuple[str, ...] = ()
    commit: str | None = None  # a prefix of the commit's sha
    page: int = 1
    page_size: int = PAGE_SIZE

    @classmethod
    def from_params(cls, params: Mapping[str, list[str]]) -> SyncQuery:
        """From a parsed query string; ValueError names the bad parameter."""

        def one(name: str) -> str | None:
            values = params.get(name) or []
            return values[-1].strip() or None if values else None

        results = tuple(r.strip() for v in params.get("result") or [] for r in v.split(",")
                        if r.strip())
        unknown = [r for r in results if r not in RESULTS]
        if unknown:
            raise ValueError(f"result: {unknown[0]!r} is not one of {', '.join(RESULTS)}")
        commit = (one("commit") or "").lower() or None
        if commit is not None and not _SHA_PREFIX.match(commit):
            raise ValueError(f"commit: {commit!r} is not the start of a commit's sha "
                             "(hexadecimal digits)")
        size = positive(one("pageSize") or str(PAGE_SIZE), "pageSize")
        if size > MAX_PAGE_SIZE:
            raise ValueError(f"pageSize: at most {MAX_PAGE_SIZE}")
        return cls(repo=one("repo"), result=results, commit=commit,
                   page=positive(one("page") or "1", "page"), page_size=size)

    def params(self, **changes: Any) -> dict[str, Any]:
        """The query-string parameters of this query, with `changes` applied."""
        values: dict[str, Any] = {
            "repo": self.repo, "result": ",".join(self.result) or None, "commit": self.commit,
            "page": self.page if self.page > 1 else None,
            "pageSize": self.page_size if self.page_size != PAGE_SIZE else None}
        values.update(changes)
        return values

    def where(self) -> list[Any]:
        clauses = []
        if self.repo is not None:
            clauses.append(_S.c.binding_id == self.repo)
        if self.result:
            clauses.append(_S.c.result.in_(self.result))
        if self.commit is not None:
            clauses.append(_S.c.commit.startswith(self.commit, autoescape=True))
        return clauses


@dataclass(frozen=True)
class SyncRow:
    """One sync as the History page lists it: its plan's problems, not its actions."""

    id: int
    binding_id: str
    commit: str
    started_at: datetime
    finished_at: datetime | None
    result: str
    message: str
    summary: dict[str, Any]
    problems: list[dict[str, Any]]


def syncs_page(store: Store, q: SyncQuery) -> tuple[list[SyncRow], int]:
    """One page of the syncs matching `q`, newest first, and how many match in all.

    Newest is the highest id: the store numbers syncs as it starts them, so the page is
    read along the primary key, with no sort of every matching row."""
    where = q.where()
    columns = [_S.c[n] for n in ("id", "binding_id", "commit", "started_at", "finished_at",
                                 "result", "message", "summary")]
    query = (select(*columns, _S.c.plan["problems"].label("problems")).where(*where)
             .order_by(_S.c.id.desc()).limit(q.page_size).offset((q.page - 1) * q.page_size))
    with store._engine.connect() as conn:
        total = conn.execute(select(func.count()).select_from(_S).where(*where)).scalar_one()
        rows = conn.execute(query).all()
    return [SyncRow(**{**row._asdict(), "problems": row.problems or []}) for row in rows], \
        int(total)


def checks_of(store: Store, syncs: list[SyncRow]) -> dict[tuple[str, str], list[CheckRecordValue]]:
    """The checks posted for each (binding, commit) of `syncs`, newest first, in one query."""
    if not syncs:
        return {}
    commits = sorted({s.commit for s in syncs})
    query = (select(_C).where(_C.c.commit.in_(commits))
             .order_by(_C.c.posted_at.desc(), _C.c.id.desc()))
    wanted = {(s.binding_id, s.commit) for s in syncs}
    out: dict[tuple[str, str], list[CheckRecordValue]] = {}
    with store._engine.connect() as conn:
        for row in conn.execute(query):
            check = CheckRecordValue(**row._asdict())
            if (check.binding_id, check.commit) in wanted:
                out.setdefault((check.binding_id, check.commit), []).append(check)
    return out


def intents_of(store: Store, binding_id: str, sync_id: int) -> list[IntentRecord]:
    """The provider calls a sync journaled, in the order it made them."""
    query = (select(_I).where(_I.c.binding_id == binding_id, _I.c.sync_id == sync_id)
             .order_by(_I.c.id))
    with store._engine.connect() as conn:
        return [IntentRecord(key=key, **values)
                for key, values in (split_key(row) for row in conn.execute(query))]
