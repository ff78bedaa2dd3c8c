"""`View`: a read-only window on a JSON object from the API, with snake_case attributes.

`View({"costUSD": "0.12", "best": {"byCost": 2}})` reads as `v.cost_usd` and
`v.best.by_cost`; nested mappings become Views and lists become tuples, all the way
down. Item access takes the original keys (`cell.params["BATCH_SIZE"]`) or the snake_case
ones, `to_dict()` gives the original JSON back, and nothing can be set."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping
from typing import Any

_LOWER_UPPER = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_ACRONYM_WORD = re.compile(r"(?<=[A-Z])(?=[A-Z][a-z])")
_MAX_REPR_ITEMS = 4


def snake(name: str) -> str:
    """`costUSD` -> `cost_usd`, `unitsPerSecond` -> `units_per_second`, `HTTPCode` ->
    `http_code`; names that are not identifiers once converted stay as they are."""
    converted = _ACRONYM_WORD.sub("_", _LOWER_UPPER.sub("_", name)).lower()
    return converted if converted.isidentifier() else name


def wrap(value: Any) -> Any:
    """Mappings as Views, lists and tuples as tuples of wrapped values, the rest as is."""
    if isinstance(value, View):
        return value
    if isinstance(value, Mapping):
        return View(value)
    if isinstance(value, list | tuple):
        return tuple(wrap(v) for v in value)
    return value


def unwrap(value: Any) -> Any:
    if isinstance(value, View):
        return value.to_dict()
    if isinstance(value, tuple):
        return [unwrap(v) for v in value]
    return copy.deepcopy(value)


class View(Mapping[str, Any]):
    """Read-only attribute and item access to one JSON object (see the module doc)."""

    __slots__ = ("_data", "_names")

    def __init__(self, data: Mapping[str, Any] | None = None) -> None:
        items = {str(k): wrap(v) for k, v in (data or {}).items()}
        names: dict[str, str] = {}
        for key in items:
            names.setdefault(snake(key), key)
        object.__setattr__(self, "_data", items)
        object.__setattr__(self, "_names", names)

    def _key(self, name: str) -> str | None:
        if name in self._data:
            return name
        return self._names.get(name)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in View.__slots__:
            raise AttributeError(name)
        key = self._key(name)
        if key is None:
            known = ", ".join(sorted(self._names)) or "none"
            raise AttributeError(f"this View has no {name!r} (it has: {known})")
        return self._data[key]

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a View is read-only: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a View is read-only: cannot delete {name!r}")

    def __getitem__(self, key: str) -> Any:
        found = self._key(key)
        if found is None:
            raise KeyError(key)
        return self._data[found]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, View):
            return self._data == other._data
        if isinstance(other, Mapping):
            return self.to_dict() == dict(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # compared by value, like a dict

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self._names))

    def to_dict(self) -> dict[str, Any]:
        """A deep copy of the object as the API gave it (original keys, plain lists)."""
        return {k: unwrap(v) for k, v in self._data.items()}

    def __repr__(self) -> str:
        shown = ", ".join(f"{snake(k)}={_short(v)}" for k, v in self._data.items())
        return f"View({shown})"

    def __reduce__(self) -> tuple[Any, ...]:  # copy and pickle through the plain data
        return (View, (self.to_dict(),))


def _short(value: Any) -> str:
    if isinstance(value, tuple):
        if len(value) > _MAX_REPR_ITEMS:
            head = ", ".join(_short(v) for v in value[:2])
            return f"[{head}, ... ({len(value)} items)]"
        return "[" + ", ".join(_short(v) for v in value) + "]"
    return repr(value)
