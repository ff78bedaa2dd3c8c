"""The Sweep manifest the SDK writes: built from a Job spec and a grid, checked by the
reconciler's own validation, found again in a tree by name or idempotency key, and
edited in place for `spec.state` (comments and layout of the file kept).

Grid keys `gpu` and `region`/`regions` are dimensions (`matrix.gpu`, `matrix.regions`);
every other key is a parameter (`matrix.params`), its values as strings."""

from __future__ import annotations

import copy
import hashlib
import json
import re
import uuid
from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

import yaml
from nodus_gitops.floor.errors import ManifestError
from nodus_gitops.floor.identity import API_VERSION
from nodus_gitops.manifests import load_documents
from nodus_gitops.sdk import errors
from nodus_gitops.validation import validate_files

ANNOTATION_IDEMPOTENCY_KEY = "nodus.dev/idempotency-key"
HEADER = b"# Written by the nodus-gitops Python SDK (reconciler.sdk).\n"
_UNSUPPORTED_KINDS = {"function", "recipe"}
_DIMENSIONS = {"gpu": "gpu", "gpus": "gpu", "region": "regions", "regions": "regions"}


def check_target(target: Any) -> dict[str, Any]:
    """The Job spec every cell runs. A Function (a callable or an object of kind
    Function) or a recipe (a recipe's name, or an object of kind recipe) raises
    Unsupported; `{"kind": "Job", "spec": {...}}` and a whole Job manifest are unwrapped."""
    unsupported = ("a {} as the Sweep's target is not available yet: the API serves Job "
                   "templates; pass the Job spec, such as {{'image': ..., 'command': [...]}}")
    if target is None:
        raise errors.InvalidSweep("a Sweep needs a target: the Job spec every cell runs")
    kind = target.get("kind") if isinstance(target, Mapping) else getattr(target, "kind", None)
    if isinstance(kind, str) and kind.lower() in _UNSUPPORTED_KINDS:
        raise errors.Unsupported(unsupported.format(kind))
    if isinstance(target, str):
        raise errors.Unsupported(unsupported.format(f"recipe ({target!r})"))
    if not isinstance(target, Mapping):
        if callable(target):
            name = getattr(target, "__qualname__", None) or type(target).__name__
            raise errors.Unsupported(unsupported.format(f"Function ({name})"))
        raise errors.InvalidSweep(f"the target must be a Job spec mapping, not a "
                                  f"{type(target).__name__}")
    if kind is not None:
        if kind != "Job":
            raise errors.Unsupported(unsupported.format(str(kind)))
        spec = target.get("spec")
        if not isinstance(spec, Mapping):
            raise errors.InvalidSweep("a target with kind: Job needs its spec under 'spec'")
        return copy.deepcopy(dict(spec))
    return copy.deepcopy(dict(target))


def _values(key: str, value: Any) -> list[Any]:
    if isinstance(value, str | Mapping) or not isinstance(value, Iterable):
        return [value]
    return list(value)


def _param(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def matrix(grid: Mapping[str, Any] | None) -> dict[str, Any]:
    """`matrix` from a grid: dimensions as given, parameters as lists of strings."""
    if grid is None:
        return {}
    if not isinstance(grid, Mapping):
        raise errors.InvalidSweep(f"grid must be a mapping of names to values, not a "
                                  f"{type(grid).__name__}")
    out: dict[str, Any] = {}
    params: dict[str, list[str]] = {}
    for key, value in grid.items():
        field = _DIMENSIONS.get(str(key).lower())
        if field is not None:
            if field in out:
                raise errors.InvalidSweep(f"grid: {key!r} repeats the {field} dimension")
            out[field] = _values(key, value)
        else:
            params[str(key)] = [_param(v) for v in _values(key, value)]
    if params:
        out["params"] = params
    return out


def usd(value: Any) -> str:
    """A cost cap as the decimal string the platform takes (25 -> "25.00")."""
    try:
        amount = Decimal(str(value).strip().lstrip("$"))
    except (InvalidOperation, ValueError):
        raise errors.InvalidSweep(f"max_cost: {value!r} is not an amount in US dollars") from None
    if not amount.is_finite():
        raise errors.InvalidSweep(f"max_cost: {value!r} is not an amount in US dollars")
    exponent = amount.as_tuple().exponent
    if isinstance(exponent, int) and exponent > -2:
        amount = amount.quantize(Decimal("0.01"))
    return format(amount, "f")


def build(name: str, template: dict[str, Any], grid: Mapping[str, Any] | None, *,
          repetitions: int | None = None, max_parallel: int | None = None,
          max_cost: Any = None, labels: Mapping[str, str] | None = None,
          idempotency_key: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if labels:
        metadata["labels"] = dict(labels)
    if idempotency_key is not None:
        metadata["annotations"] = {ANNOTATION_IDEMPOTENCY_KEY: str(idempotency_key)}
    spec: dict[str, Any] = {}
    if max_cost is not None:
        spec["maxCostUSD"] = usd(max_cost)
    if max_parallel is not None:
        spec["maxParallel"] = max_parallel
    if repetitions is not None:
        spec["repetitions"] = repetitions
    spec["matrix"] = matrix(grid)
    spec["template"] = {"kind": "Job", "spec": copy.deepcopy(template)}
    return {"apiVersion": API_VERSION, "kind": "Sweep", "metadata": metadata, "spec": spec}


def generated_name(manifest: Mapping[str, Any], idempotency_key: str | None) -> str:
    """`sweep-<8 hex>`: from the spec and the key when there is a key (the same call
    names the same Sweep), random otherwise."""
    if idempotency_key is None:
        return f"sweep-{uuid.uuid4().hex[:8]}"
    text = json.dumps([manifest.get("spec"), idempotency_key], sort_keys=True, default=str)
    return f"sweep-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def render(manifest: Mapping[str, Any]) -> bytes:
    body = yaml.safe_dump(dict(manifest), sort_keys=False, allow_unicode=True, width=100)
    return HEADER + body.encode("utf-8")


def validate(file: str, content: bytes) -> None:
    """InvalidSweep listing every problem the reconciler would report for this file."""
    result = validate_files([(file, content)])
    if result.problems:
        raise errors.InvalidSweep(f"the Sweep would not validate ({len(result.problems)} "
                                  "problems)", [str(p) for p in result.problems])


def documents(file: str, content: bytes) -> list[dict[str, Any]]:
    try:
        return [d.data for d in load_documents(file, content) if isinstance(d.data, dict)]
    except ManifestError:
        return []


def _is_sweep(doc: Mapping[str, Any], name: str | None = None) -> bool:
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), Mapping) else {}
    return doc.get("kind") == "Sweep" and (name is None or meta.get("name") == name)


def find_by_key(files: Mapping[str, bytes], key: str) -> tuple[str, dict[str, Any]] | None:
    """The file and Sweep that carry idempotency key `key`, if any."""
    marker = ANNOTATION_IDEMPOTENCY_KEY.encode()
    for path, content in files.items():
        if marker not in content:
            continue
        for doc in documents(path, content):
            meta = doc.get("metadata") if isinstance(doc.get("metadata"), Mapping) else {}
            notes = meta.get("annotations") if isinstance(meta.get("annotations"), Mapping) else {}
            if _is_sweep(doc) and notes.get(ANNOTATION_IDEMPOTENCY_KEY) == key:
                return path, doc
    return None


def find_by_name(files: Mapping[str, bytes], name: str) -> tuple[str, dict[str, Any]] | None:
    """The file and Sweep named `name`, if any (a cheap byte test before parsing)."""
    for path, content in files.items():
        if name.encode() not in content:
            continue
        for doc in documents(path, content):
            if _is_sweep(doc, name):
                return path, doc
    return None


def set_state(file: str, content: bytes, name: str, state: str) -> bytes | None:
    """`content` with the Sweep `name`'s `spec.state` set to `state`; None when it is
    already so. The line is edited in place when that gives exactly the wanted
    document; otherwise the file is written again from its parsed documents."""
    docs = load_documents(file, content)
    found = next((d for d in docs if isinstance(d.data, dict) and _is_sweep(d.data, name)),
                 None)
    if found is None:
        raise errors.NotFound(f"{file} holds no Sweep named {name!r}")
    spec = found.data.get("spec")
    if not isinstance(spec, dict):
        raise errors.InvalidSweep(f"{file}: Sweep {name!r} has no spec mapping")
    if spec.get("state", "Running") == state:
        return None
    wanted = copy.deepcopy(found.data)
    wanted["spec"]["state"] = state
    edited = _edit_line(content.decode("utf-8"), found, state)
    if edited is not None:
        check = [d.data for d in load_documents(file, edited)]
        others = [d.data for d in docs]
        others[others.index(found.data)] = wanted
        if check == others:
            return edited.encode("utf-8")
    parts = [yaml.safe_dump(wanted if d is found else d.data, sort_keys=False,
                            allow_unicode=True, width=100) for d in docs]
    return "---\n".join(parts).encode("utf-8")


def _edit_line(text: str, doc: Any, state: str) -> str | None:
    lines = text.splitlines(keepends=True)
    if "state" in doc.data["spec"]:
        number = doc.line_of(("spec", "state")) - 1
        match = re.match(r"^(\s*state\s*:\s*)(\S+)(.*)$", lines[number], re.S)
        if match is None:
            return None
        lines[number] = f"{match.group(1)}{state}{match.group(3)}"
        return "".join(lines)
    if not doc.data["spec"]:
        return None
    spec_line = doc.line_of(("spec",), key=True) - 1
    match = re.match(r"^(\s*)spec\s*:\s*(#.*)?$", lines[spec_line].rstrip("\r\n"))
    if match is None:
        return None
    first_child = doc.line_of(("spec", next(iter(doc.data["spec"]))), key=True) - 1
    child = re.match(r"^(\s*)", lines[first_child])
    indent = child.group(1) if child else match.group(1) + "  "
    newline = "\r\n" if lines[spec_line].endswith("\r\n") else "\n"
    lines.insert(spec_line + 1, f"{indent}state: {state}{newline}")
    return "".join(lines)
