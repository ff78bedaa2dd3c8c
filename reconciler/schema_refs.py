"""`$ref` inlining for the JSON Schemas in `schemas/` (draft 2020-12): every reference
(`#/$defs/x`, or `defs.schema.json#/$defs/x` into the shared file) is replaced by its
target, so a validator never resolves one and the CRD generator sees plain nodes.

In 2020-12 `$ref` is an applicator like any other: the keywords beside it apply too, to the
same value (`{"$ref": X, "required": ["q"]}` means X and also `required: [q]`). Inlining
keeps that meaning. The target and its siblings become one node where that is exact: no
keyword on both sides with different values, except annotations (the sibling, the more
specific, wins) and `required` (the lists add up); and no keyword whose meaning depends on
another in its node (`additionalProperties` on `properties`) meeting that one from the other
side. Otherwise the node is `{"allOf": [target], **siblings}`, exactly what the `$ref` said.
"""

from __future__ import annotations

from typing import Any

from nodus_gitops import schemas

DEFS = "#/$defs/"
# Keywords that never change whether a value is valid.
ANNOTATIONS = frozenset({"title", "description", "default", "examples", "deprecated",
                         "readOnly", "writeOnly", "$comment"})
# Keywords that read others of their own node: laid into one node with the target, a sibling
# would change what they see.
_READS = {
    "additionalProperties": ("properties", "patternProperties"),
    "items": ("prefixItems",),
    "minContains": ("contains",),
    "maxContains": ("contains",),
    "then": ("if",),
    "else": ("if",),
}
# Keywords that read every keyword of their node and of its in-place subschemas.
_READS_ALL = frozenset({"unevaluatedProperties", "unevaluatedItems"})


def kind_documents() -> dict[str, dict[str, Any]]:
    """Every schema document by file name: the kinds' and the shared definitions."""
    return {name: schemas.load(name)
            for name in (schemas.SHARED_FILE, *schemas.KIND_FILES.values())}


def inlined_kind_schema(kind: str) -> dict[str, Any]:
    """The schema of `kind` (Job, Pipeline, Sweep) with every `$ref` inlined; a new tree,
    the caller may change it."""
    filename = schemas.KIND_FILES[kind]
    documents = kind_documents()
    return inline_refs(documents[filename], documents, filename)


def inline_refs(node: Any, documents: dict[str, dict[str, Any]], current: str,
                _seen: tuple[str, ...] = ()) -> Any:
    """`node` of the document `current` with every `$ref` into a `$defs` of `documents`
    replaced by its target, and the `$defs` themselves left out; other references stay."""
    if isinstance(node, list):
        return [inline_refs(n, documents, current, _seen) for n in node]
    if not isinstance(node, dict):
        return node
    node = {k: inline_refs(v, documents, current, _seen)
            for k, v in node.items() if k != "$defs"}
    ref = node.get("$ref")
    if not isinstance(ref, str) or DEFS not in ref:
        return node
    file, _, name = ref.partition(DEFS)
    file = file or current
    where = f"{file}{DEFS}{name}"
    if where in _seen:
        raise ValueError(f"recursive $ref {where} cannot be inlined")
    target = inline_refs(documents[file]["$defs"][name], documents, file, (*_seen, where))
    siblings = {k: v for k, v in node.items() if k != "$ref"}
    if not _fits_one_node(target, siblings):
        return {"allOf": [target], **siblings}
    merged = {**target, **siblings}
    if "required" in target and "required" in siblings:
        merged["required"] = join_required(target["required"], siblings["required"])
    return merged


def join_required(first: list[str], second: list[str]) -> list[str]:
    """Both `required` lists as one: those of `first`, then the others of `second`."""
    return [*first, *(name for name in second if name not in first)]


def _fits_one_node(target: dict[str, Any], siblings: dict[str, Any]) -> bool:
    """Whether `{**target, **siblings}` (with `required` joined) validates exactly what the
    target and the siblings do together."""
    for key in target.keys() & siblings.keys():
        if key not in ANNOTATIONS and key != "required" and target[key] != siblings[key]:
            return False
    for one, other in ((target, siblings), (siblings, target)):
        for keyword, read in _READS.items():
            if keyword in one and any(k in other and one.get(k) != other[k] for k in read):
                return False
        if _READS_ALL & one.keys() and any(k not in ANNOTATIONS for k in other):
            return False
    return True
