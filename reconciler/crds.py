"""CustomResourceDefinitions for Job, Pipeline and Sweep, generated from `schemas/`.

The JSON Schemas stay the one source of truth; this module converts them to the
Kubernetes *structural* subset so `kubectl apply -f job.yaml` works against a cluster
that serves nodus.dev/v1. The rules it applies: every `$ref` is inlined (`schema_refs`,
as for validation) and an `allOf` that leaves is laid flat; every node has a
`type` (unions become `x-kubernetes-int-or-string` where that fits, else untyped with
`x-kubernetes-preserve-unknown-fields`); keywords Kubernetes rejects are dropped (`const`
becomes a one-value `enum`); `additionalProperties: false` is omitted because structural
schemas prune unknown fields anyway; a node cannot have both `properties` and
`additionalProperties`; patterns must be RE2 (no lookaround).
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from nodus_gitops.schema_refs import inlined_kind_schema, join_required

GROUP = "nodus.dev"
VERSION = "v1"
PLURALS = {"Job": "jobs", "Pipeline": "pipelines", "Sweep": "sweeps"}

# Keywords of draft 2020-12 (or of our schemas) that a CRD schema may not carry.
_DROPPED = frozenset({"$schema", "$id", "$defs", "$comment", "patternErrorMessage",
                      "additionalPropertiesErrorMessage", "examples",
                      "propertyNames", "uniqueItems", "title", "contentEncoding"})
# Keywords that constrain one JSON type only: meaningless once a node is untyped.
_TYPED_ONLY = frozenset({"properties", "additionalProperties", "required", "items",
                         "minItems", "maxItems", "maxProperties", "minProperties", "pattern",
                         "minLength", "maxLength", "format", "minimum", "maximum",
                         "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "enum"})
_LOOKAROUND = re.compile(r"\(\?<?[=!]")
# The API server checks patterns with RE2, which has no lookaround. Exact rewrites of the
# ones in schemas/: the duration lookahead only says "not empty" (every group starts with
# a digit). Any other lookaround pattern is dropped and left to `nodus-gitops validate`.
_RE2_REWRITES: dict[str, dict[str, Any]] = {
    "^(?=[0-9])([0-9]+h)?([0-9]+m)?([0-9]+s)?$":
        {"pattern": "^([0-9]+h)?([0-9]+m)?([0-9]+s)?$", "minLength": 1},
}
_VALIDATE_NOTE = "nodus-gitops validate checks the full form."

_PRINTER_COLUMNS = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Reason", "type": "string", "jsonPath": ".status.reason"},
    {"name": "Cost", "type": "string", "jsonPath": ".status.costUSD",
     "description": "Spend so far, in US dollars"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def crds() -> list[dict[str, Any]]:
    """One apiextensions.k8s.io/v1 CustomResourceDefinition per kind."""
    return [_crd(kind, plural) for kind, plural in PLURALS.items()]


def render_crds() -> str:
    """The CRDs as one multi-document YAML stream (`nodus-gitops crds`)."""
    return yaml.safe_dump_all(crds(), sort_keys=False, width=100, allow_unicode=True)


def openapi_schema(kind: str) -> dict[str, Any]:
    """The structural `openAPIV3Schema` of one kind."""
    source = flatten_all_of(inlined_kind_schema(kind))
    props = source.get("properties", {})
    # At the root the API server owns apiVersion, kind and metadata: it allows no more
    # than their types there (metadata.name is checked by the server's own rules).
    root: dict[str, Any] = {
        "description": source.get("description", ""),
        "type": "object",
        "properties": {
            "apiVersion": {"description": props["apiVersion"].get("description", ""),
                           "type": "string"},
            "kind": {"description": props["kind"].get("description", ""), "type": "string"},
            "metadata": {"type": "object"},
            "spec": structural(props["spec"]),
            "status": {"description": "What Nodus reports: phase, reason, fix, costUSD and "
                       "the kind's own fields.", "type": "object",
                       "x-kubernetes-preserve-unknown-fields": True},
        },
        "required": ["spec"],
    }
    return root


def _crd(kind: str, plural: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural,
                      "singular": kind.lower(), "categories": ["nodus"]},
            "versions": [{
                "name": VERSION,
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [dict(c) for c in _PRINTER_COLUMNS],
                "schema": {"openAPIV3Schema": openapi_schema(kind)},
            }],
        },
    }


def flatten_all_of(node: Any) -> Any:
    """`node` with every `allOf` laid into the node that holds it: members in order, that
    node's own keywords last. `required` lists add up and `properties` too (one named on
    both sides is laid flat the same way), so the server prunes no field the schema
    allows; any other keyword comes from the last part that has it. Inlining a `$ref`
    whose siblings clash with its target leaves an `allOf`, and a structural schema needs
    its types and properties outside one; what this loosens `nodus-gitops validate`
    still checks."""
    if isinstance(node, list):
        return [flatten_all_of(n) for n in node]
    if not isinstance(node, dict):
        return node
    node = {k: flatten_all_of(v) for k, v in node.items()}
    if not isinstance(node.get("allOf"), list):
        return node
    merged: dict[str, Any] = {}
    for part in (*node.pop("allOf"), node):
        laid = {**merged, **part}
        if "required" in merged and "required" in part:
            laid["required"] = join_required(merged["required"], part["required"])
        if isinstance(merged.get("properties"), dict) and isinstance(part.get("properties"),
                                                                     dict):
            laid["properties"] = {**merged["properties"], **part["properties"]}
            for name in merged["properties"].keys() & part["properties"].keys():
                laid["properties"][name] = flatten_all_of(
                    {"allOf": [merged["properties"][name], part["properties"][name]]})
        merged = laid
    return merged


def structural(node: dict[str, Any]) -> dict[str, Any]:
    """One inlined JSON Schema node as a structural schema node."""
    out = {k: v for k, v in node.items() if k not in _DROPPED}
    if "const" in out:
        out["enum"] = [out.pop("const")]
    for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        # 2020-12 gives the bound itself; OpenAPI v3.0 (Kubernetes) a boolean beside it.
        if isinstance(out.get(bound), int | float) and not isinstance(out[bound], bool):
            out[limit], out[bound] = out[bound], True
    types = out.get("type")
    if isinstance(types, list):
        out = _union(out, set(types))
        if "type" not in out:
            return out
    if "pattern" in out and _LOOKAROUND.search(out["pattern"]):
        out.update(_RE2_REWRITES.get(out["pattern"], {}))
        if _LOOKAROUND.search(out["pattern"]):
            del out["pattern"]
            out["description"] = _note(out.get("description"))
    if isinstance(out.get("properties"), dict):
        out.setdefault("type", "object")
        if isinstance(out.get("additionalProperties"), dict):
            # Both are not allowed: keep it a map, and name the known keys in prose.
            known = ", ".join(out.pop("properties"))
            out["description"] = f"{out.get('description', '')} Known keys: {known}.".strip()
        else:
            out["properties"] = {k: structural(v) for k, v in out["properties"].items()}
    if out.get("additionalProperties") is False:
        del out["additionalProperties"]  # structural schemas prune unknown fields
    elif out.get("additionalProperties") is True:
        del out["additionalProperties"]
        out["x-kubernetes-preserve-unknown-fields"] = True
    elif isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = structural(out["additionalProperties"])
    if isinstance(out.get("items"), dict):
        out["items"] = structural(out["items"])
    if "type" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
        out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def _union(node: dict[str, Any], types: set[str]) -> dict[str, Any]:
    """`type: [a, b]` is not structural."""
    if types == {"string", "integer"}:
        node = dict(node)
        del node["type"]
        node["x-kubernetes-int-or-string"] = True
        return node
    if len(types) == 1:
        return {**node, "type": types.pop()}
    # No structural form: accept any value here and leave the check to nodus-gitops.
    kept = {k: v for k, v in node.items() if k not in _TYPED_ONLY and k != "type"}
    kept["description"] = _note(node.get("description"), f"One of: {', '.join(sorted(types))}.")
    kept["x-kubernetes-preserve-unknown-fields"] = True
    return kept


def _note(description: str | None, extra: str = "") -> str:
    return " ".join(p for p in (description or "", extra, _VALIDATE_NOTE) if p)
