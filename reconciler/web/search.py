"""Search across resources: the resources table's filters (`queries.ResourceQuery`) and
two more, each a SQL condition so that the query still pages in SQL:

- `label`: a label selector as Kubernetes writes one, `team=ml,env!=prod,gpu,!legacy`,
  over the labels of each resource's manifest (`metadata.labels`), as the store keeps
  them in its labels table;
- `commit`: a prefix of the commit a resource was last applied from (4 to 40 hex digits).

`q` is the search box's text: the same filters written as words, `hello phase:Failed
team=ml commit:0123abc` (a bare word is a substring of the name). It is parsed into the
filters; the page's links carry the filters themselves, and the box shows them as words.

Every search parameter is bounded before it reaches SQL (`check_bounds`): its length
(MAX_QUERY_LENGTH), the number of its terms (MAX_TERMS: words, labels, phases) and the
length of each (MAX_TERM_LENGTH). Past them the answer is a 400 naming the parameter and
the limit, where SQLite would fail with "LIKE or GLOB pattern too complex" (a name over
50,000 bytes) or "Expression tree is too large" (a thousand label terms).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from nodus_gitops.state.models import InventoryItem, InventoryLabel
from nodus_gitops.web.queries import ResourceQuery
from sqlalchemy import Table, select

_R: Table = InventoryItem.__table__  # type: ignore[attr-defined]
_L: Table = InventoryLabel.__table__  # type: ignore[attr-defined]

# Kubernetes' label syntax (an optional DNS prefix, a name; a value of the same letters):
# nothing else is looked up.
_KEY = re.compile(r"^([a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([A-Za-z0-9._-]{0,61}"
                  r"[A-Za-z0-9])?$")
_VALUE = re.compile(r"^([A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?$")
_COMMIT = re.compile(r"^[0-9a-f]{4,40}$")
_TERM = re.compile(r"^(!?)([^=!]+)(?:(==|=|!=)(.*))?$")
# Words of `q` that name a filter, `phase:Failed`; the others are labels or the name.
_FILTER_WORDS = ("kind", "phase", "repo", "project", "commit", "label", "name")

# The bounds of a search: one parameter's whole text, its terms (a word of `q`, a label
# term, a phase), and one term (a label's key, `/` prefix and value, 317 + 2 + 63).
MAX_QUERY_LENGTH = 1_000
MAX_TERMS = 20
MAX_TERM_LENGTH = 400
_BOUNDED = ("q", "name", "label", "phase", "commit", "repo", "kind", "project")
_TERM_BREAK = re.compile(r"[\s,]+")


class SearchLimitError(ValueError):
    """A search past one of its bounds: which parameter, which limit, what was given."""

    def __init__(self, parameter: str, limit: str, given: str) -> None:
        super().__init__(f"{parameter}: at most {limit} ({given}); narrow the search")
        self.parameter, self.limit = parameter, limit


def check_bounds(params: Mapping[str, list[str]]) -> None:
    """SearchLimitError for the first search parameter past a bound."""
    for name in _BOUNDED:
        values = params.get(name) or []
        length = sum(len(v) for v in values)
        if length > MAX_QUERY_LENGTH:
            raise SearchLimitError(name, f"{MAX_QUERY_LENGTH:,} characters", f"{length:,} given")
        terms = [t for v in values for t in _TERM_BREAK.split(v) if t]
        if len(terms) > MAX_TERMS:
            raise SearchLimitError(name, f"{MAX_TERMS} terms", f"{len(terms):,} given")
        longest = max(terms, key=len, default="")
        if len(longest) > MAX_TERM_LENGTH:
            raise SearchLimitError(name, f"{MAX_TERM_LENGTH} characters a term",
                                   f"one has {len(longest):,}")


@dataclass(frozen=True)
class LabelTerm:
    """One term of a selector: `key=value`, `key!=value`, `key` (has it), `!key`."""

    key: str
    op: str  # "=", "!=", "exists", "absent"
    value: str = ""

    def text(self) -> str:
        if self.op == "exists":
            return self.key
        if self.op == "absent":
            return f"!{self.key}"
        return f"{self.key}{self.op}{self.value}"

    def condition(self) -> Any:
        """The resources matching this term, looked up in the labels table (indexed by
        key and value) instead of read from every manifest."""
        having = select(_L.c.inventory_id).where(_L.c.key == self.key)
        if self.op in ("=", "!="):
            having = having.where(_L.c.value == self.value)
        # `!=` as Kubernetes has it: a resource without the label matches too.
        if self.op in ("=", "exists"):
            return _R.c.id.in_(having)
        return _R.c.id.not_in(having)


def parse_selector(text: str) -> tuple[LabelTerm, ...]:
    """`team=ml,env!=prod`; ValueError says which term is wrong."""
    terms = []
    for raw in text.split(","):
        term = raw.strip()
        if not term:
            continue
        match = _TERM.match(term)
        if match is None:
            raise ValueError(f"label: {term!r} is not key=value, key!=value, key or !key")
        bang, key, op, value = match.groups()
        key, value = key.strip(), (value or "").strip()
        if not _KEY.match(key):
            raise ValueError(f"label: {key!r} is not a label key")
        if op is not None and (bang or not _VALUE.match(value)):
            raise ValueError(f"label: {term!r} is not key=value, key!=value, key or !key")
        if op is None:
            terms.append(LabelTerm(key, "absent" if bang else "exists"))
        else:
            terms.append(LabelTerm(key, "!=" if op == "!=" else "=", value))
    return tuple(terms)


@dataclass(frozen=True)
class ResourceSearch(ResourceQuery):
    """The resources table's query with labels and a commit prefix."""

    labels: tuple[LabelTerm, ...] = ()
    commit: str | None = None

    @classmethod
    def from_params(cls, params: Mapping[str, list[str]]) -> ResourceSearch:
        """From a parsed query string; ValueError names the bad parameter (and
        SearchLimitError the bound a parameter went past)."""
        check_bounds(params)
        merged = {k: list(v) for k, v in params.items()}
        for name, value in parse_words(_last(params, "q") or "").items():
            if name == "label":
                merged.setdefault("label", []).append(value)
            else:
                merged[name] = [value]
        base = super().from_params(merged)
        labels = tuple(t for v in merged.get("label") or [] for t in parse_selector(v))
        if len(labels) > MAX_TERMS:  # `q`'s and `label`'s together
            raise SearchLimitError("label", f"{MAX_TERMS} terms", f"{len(labels):,} given")
        commit = (_last(merged, "commit") or "").lower() or None
        if commit is not None and not _COMMIT.match(commit):
            raise ValueError(f"commit: {commit!r} is not 4 to 40 hex digits of a commit")
        return replace(base, labels=labels, commit=commit)  # type: ignore[return-value]

    def params(self, **changes: Any) -> dict[str, Any]:
        base = super().params()
        order = {k: base.pop(k) for k in ("sort", "page", "pageSize")}  # filters first
        values = {**base, "label": ",".join(t.text() for t in self.labels) or None,
                  "commit": self.commit, **order}
        values.update(changes)
        return values

    def words(self) -> str:
        """The filters as the search box writes them."""
        out = [self.name] if self.name else []
        out += [f"{k}:{v}" for k, v in (("kind", self.kind), ("phase", ",".join(self.phase)),
                                        ("repo", self.repo), ("project", self.project),
                                        ("commit", self.commit)) if v]
        out += [t.text() for t in self.labels]
        return " ".join(out)

    def _where(self) -> list[Any]:
        clauses = super()._where()
        clauses += [t.condition() for t in self.labels]
        if self.commit:
            # A range, not LIKE 'abc%' (which SQLite matches without an index): the SHAs
            # starting with a lowercase hex prefix are those from it up to it + "g".
            clauses.append(_R.c.source_commit.between(self.commit, self.commit + "g"))
        return clauses


def parse_words(text: str) -> dict[str, str]:
    """The search box's words as filter parameters: `phase:Failed` -> phase, `k=v`,
    `k!=v` and `!k` -> label, one bare word -> name. ValueError for more than one."""
    found: dict[str, str] = {}
    labels = []
    for word in text.split():
        name, colon, value = word.partition(":")
        if colon and name in _FILTER_WORDS and value:
            if name == "label":
                labels.append(value)
            else:
                found[name] = value
        elif "=" in word or word.startswith("!"):
            labels.append(word)
        elif "name" in found:
            raise ValueError(f"search: one part of a name at most ({found['name']!r}, "
                             f"{word!r}); write labels as key=value, filters as phase:Failed")
        else:
            found["name"] = word
    if labels:
        found["label"] = ",".join(labels)
    return found


def _last(params: Mapping[str, list[str]], name: str) -> str | None:
    values = params.get(name) or []
    return values[-1].strip() or None if values else None
