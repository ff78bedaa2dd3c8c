"""Immutable JSON values: `freeze` turns lists into tuples and dicts into FrozenMaps,
all the way down, so plan values can be hashed and compared; `thaw` turns them back
into plain JSON data for output."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any


class FrozenMap(Mapping[Any, Any]):
    """A read-only mapping that hashes by its items (the keys of JSON data are strings,
    so sorting them gives one order for equal mappings)."""

    __slots__ = ("_data", "_hash")

    def __init__(self, data: Mapping[Any, Any]) -> None:
        self._data = dict(data)
        self._hash: int | None = None

    def __getitem__(self, key: Any) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._data.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenMap):
            return self._data == other._data
        return isinstance(other, Mapping) and self._data == dict(other)

    def __repr__(self) -> str:
        return f"FrozenMap({self._data!r})"


def freeze(value: Any) -> Any:
    """`value` with every list a tuple and every dict a FrozenMap."""
    if isinstance(value, FrozenMap):
        return value
    if isinstance(value, Mapping):
        return FrozenMap({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """Plain JSON data (dicts and lists) from a frozen value."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value
