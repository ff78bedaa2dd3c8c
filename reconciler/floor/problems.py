"""A problem found in a manifest: the file and line it is on, the resource and field it
names, and one sentence saying what is wrong. Validation, the backends' dry runs and the
checks all speak it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from nodus_gitops.floor.markdown_text import visible


@dataclass(frozen=True, order=True)
class Problem:
    file: str
    line: int
    kind: str
    name: str
    path: str
    message: str

    def __str__(self) -> str:
        who = f"{self.kind or '?'}/{self.name or '?'}: " if (self.kind or self.name) else ""
        where = f"{self.path}: " if self.path else ""
        # as a person reads it: a control in a file name or a value must not drive a
        # terminal (as_dict keeps the text as written)
        return visible(f"{self.file}:{self.line}: {who}{where}{self.message}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def json_path(path: Iterable[str | int]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
