"""The generated CRDs are structural schemas a Kubernetes API server accepts, they
round-trip through YAML, and the seeds' manifests pass them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from nodus_gitops.crds import crds, flatten_all_of, openapi_schema, render_crds, structural

from tests.providers.nodus.conftest import TESTDATA

FORBIDDEN = {"$ref", "$defs", "$schema", "$id", "patternErrorMessage", "examples", "const",
             "propertyNames", "uniqueItems", "allOf", "oneOf", "anyOf", "not"}
UNTYPED_OK = ("x-kubernetes-preserve-unknown-fields", "x-kubernetes-int-or-string")
SEED_FILES = sorted((TESTDATA / "seeds").glob("*.yaml"))


def walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node with its path."""
    yield path, node
    for name, child in (node.get("properties") or {}).items():
        yield from walk(child, f"{path}.{name}")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{*}}")
    if isinstance(node.get("items"), dict):
        yield from walk(node["items"], f"{path}[*]")


def schema_nodes() -> Iterator[tuple[str, str, dict[str, Any]]]:
    for crd in crds():
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for path, node in walk(schema):
            yield crd["spec"]["names"]["kind"], path, node


# --- a structural-schema type check, as the API server applies it -----------------


def check(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Problems with `value` under a structural schema; unknown fields count, since the
    server would prune them silently."""
    if schema.get("x-kubernetes-int-or-string"):
        ok = isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
        return [] if ok else [f"{path}: not an int or string"]
    kind = schema.get("type")
    if kind is None:
        assert schema.get("x-kubernetes-preserve-unknown-fields"), path
        return []
    expected = {"object": dict, "array": list, "string": str, "boolean": bool,
                "integer": int, "number": (int, float)}[kind]
    if not isinstance(value, expected) or (kind in ("integer", "number")
                                           and isinstance(value, bool)):
        return [f"{path}: expected {kind}, got {type(value).__name__}"]
    problems: list[str] = []
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{path}: {value!r} not in {schema['enum']}")
    if kind == "string":
        if "pattern" in schema and not re.search(schema["pattern"], value):
            problems.append(f"{path}: {value!r} does not match {schema['pattern']}")
        if len(value) < schema.get("minLength", 0):
            problems.append(f"{path}: too short")
    if kind in ("integer", "number") and value < schema.get("minimum", value):
        problems.append(f"{path}: below {schema['minimum']}")
    if kind == "array":
        if len(value) < schema.get("minItems", 0):
            problems.append(f"{path}: fewer than {schema['minItems']} items")
        for i, item in enumerate(value):
            problems += check(item, schema["items"], f"{path}[{i}]")
    if kind == "object":
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for name in schema.get("required", []):
            if name not in value:
                problems.append(f"{path}.{name}: required")
        for name, item in value.items():
            if name in props:
                problems += check(item, props[name], f"{path}.{name}")
            elif isinstance(extra, dict):
                problems += check(item, extra, f"{path}.{name}")
            elif not schema.get("x-kubernetes-preserve-unknown-fields") and props:
                problems.append(f"{path}.{name}: unknown field (would be pruned)")
    return problems


# --- the CRD objects ----------------------------------------------------------------


def test_one_crd_per_kind_with_status_and_printer_columns() -> None:
    by_kind = {c["spec"]["names"]["kind"]: c for c in crds()}
    assert sorted(by_kind) == ["Job", "Pipeline", "Sweep"]
    for kind, plural in (("Job", "jobs"), ("Pipeline", "pipelines"), ("Sweep", "sweeps")):
        crd = by_kind[kind]
        assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
        assert crd["metadata"]["name"] == f"{plural}.nodus.dev"
        spec = crd["spec"]
        assert (spec["group"], spec["scope"], spec["names"]["plural"]) == (
            "nodus.dev", "Namespaced", plural)
        (version,) = spec["versions"]
        assert (version["name"], version["served"], version["storage"]) == ("v1", True, True)
        assert version["subresources"] == {"status": {}}
        assert [c["name"] for c in version["additionalPrinterColumns"]] == [
            "Phase", "Reason", "Cost", "Age"]
        root = version["schema"]["openAPIV3Schema"]
        assert root["properties"]["status"] == {
            "description": root["properties"]["status"]["description"], "type": "object",
            "x-kubernetes-preserve-unknown-fields": True}
        # At the root, metadata may only be typed (the server validates ObjectMeta).
        assert root["properties"]["metadata"] == {"type": "object"}


def test_every_node_is_structural() -> None:
    problems = []
    for kind, path, node in schema_nodes():
        where = f"{kind}{path}"
        if FORBIDDEN & set(node):
            problems.append(f"{where}: forbidden {sorted(FORBIDDEN & set(node))}")
        if "type" not in node and not any(node.get(k) for k in UNTYPED_OK):
            problems.append(f"{where}: no type")
        if isinstance(node.get("type"), list):
            problems.append(f"{where}: type union")
        if "properties" in node and node.get("type") != "object":
            problems.append(f"{where}: properties without type: object")
        if "properties" in node and "additionalProperties" in node:
            problems.append(f"{where}: both properties and additionalProperties")
        if node.get("additionalProperties") is False:
            problems.append(f"{where}: additionalProperties: false")
        if node.get("type") == "array":
            items = node.get("items")
            if not isinstance(items, dict) or not (
                    "type" in items or any(items.get(k) for k in UNTYPED_OK)):
                problems.append(f"{where}: array without typed items")
        if "exclusiveMinimum" in node and not isinstance(node["exclusiveMinimum"], bool):
            problems.append(f"{where}: exclusiveMinimum must be a boolean in OpenAPI v3.0")
        if "pattern" in node:
            if re.search(r"\(\?<?[=!]", node["pattern"]):
                problems.append(f"{where}: lookaround is not RE2")
            re.compile(node["pattern"])
        if "default" in node:
            problems += [f"{where}: default {p}" for p in check(node["default"], node)]
    assert problems == []


def test_unions_become_int_or_string_or_preserved_values() -> None:
    nodes = {path: node for kind, path, node in schema_nodes() if kind == "Job"}
    gpu = nodes[".spec.resources.gpu"]
    assert gpu["x-kubernetes-preserve-unknown-fields"] is True and "type" not in gpu
    assert "properties" not in gpu and "nodus-gitops validate" in gpu["description"]
    env = nodes[".spec.env"]  # a mapping or the Kubernetes list: only validate says which
    assert env["x-kubernetes-preserve-unknown-fields"] is True and "type" not in env
    assert nodes[".spec.timeout"]["minLength"] == 1
    sweep = {path: node for kind, path, node in schema_nodes() if kind == "Sweep"}
    assert sweep[".spec.matrix.gpu[*]"]["x-kubernetes-preserve-unknown-fields"] is True
    assert sweep[".spec.matrix.params{*}"]["items"] == {"type": "string"}
    assert sweep[".spec.template.spec"]["required"] == ["command"]


@pytest.mark.parametrize("text", ["90s", "10m", "2h", "1h30m", "", "h", "10", "1m2h", "5x"])
def test_the_re2_duration_pattern_agrees_with_the_original(text: str) -> None:
    from nodus_gitops import schemas
    original = schemas.load("defs.schema.json")["$defs"]["duration"]["pattern"]
    rewritten = openapi_schema("Job")["properties"]["spec"]["properties"]["timeout"]
    ok = bool(re.search(rewritten["pattern"], text)) and len(text) >= rewritten["minLength"]
    assert ok == bool(re.search(original, text))


def test_yaml_round_trip() -> None:
    text = render_crds()
    assert list(yaml.safe_load_all(text)) == crds()
    assert text.count("kind: CustomResourceDefinition") == 3


# --- the seeds pass; a broken manifest does not --------------------------------------


def _schema(kind: str) -> dict[str, Any]:
    return openapi_schema(kind)


@pytest.mark.parametrize("path", SEED_FILES, ids=lambda p: p.name)
def test_the_seeds_pass_the_structural_schema(path: Path) -> None:
    manifest = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert check(manifest, _schema(manifest["kind"])) == []


def test_a_broken_manifest_fails_the_structural_check() -> None:
    manifest = yaml.safe_load((TESTDATA / "seeds" / "hello-job.yaml").read_text())
    manifest["spec"].update(timeout=600, command="python hello.py", gpuType="L4",
                            state="Paused")
    problems = check(manifest, _schema("Job"))
    assert problems == [
        ".spec.command: expected array, got str",
        ".spec.timeout: expected string, got int",
        ".spec.gpuType: unknown field (would be pruned)",
        ".spec.state: 'Paused' not in ['Running', 'Suspended', 'Cancelled']",
    ]
    del manifest["spec"]
    assert check(manifest, _schema("Job")) == [".spec: required"]


# --- the conversion rules, one node at a time ---------------------------------------


@pytest.mark.parametrize("node, expected", [
    ({"type": "string", "const": "x"}, {"type": "string", "enum": ["x"]}),
    ({"type": "number", "exclusiveMinimum": 0},
     {"type": "number", "minimum": 0, "exclusiveMinimum": True}),
    ({"type": ["string", "integer"], "description": "d"},
     {"description": "d", "x-kubernetes-int-or-string": True}),
    ({"type": ["string", "number"], "pattern": "^[0-9]+$", "description": "d"},
     {"description": "d One of: number, string. nodus-gitops validate checks the full form.",
      "x-kubernetes-preserve-unknown-fields": True}),
    ({"type": ["string"]}, {"type": "string"}),
    ({"properties": {"a": {"type": "string", "examples": ["x"]}}, "additionalProperties": False,
      "patternErrorMessage": "p"},
     {"type": "object", "properties": {"a": {"type": "string"}}}),
    ({"type": "object", "additionalProperties": True},
     {"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
    ({"type": "object", "properties": {"k": {"type": "string"}},
      "additionalProperties": {"type": "string"}, "propertyNames": {"pattern": "^a"}},
     {"type": "object", "additionalProperties": {"type": "string"},
      "description": "Known keys: k."}),
    ({"type": "string", "pattern": "^(?!x).*$"},
     {"type": "string", "description": "nodus-gitops validate checks the full form."}),
    ({"description": "anything"},
     {"description": "anything", "x-kubernetes-preserve-unknown-fields": True}),
])
def test_structural_conversion_rules(node: dict, expected: dict) -> None:
    assert structural(node) == expected


def test_an_all_of_left_by_inlining_is_laid_flat() -> None:
    # `{"$ref": x, "properties": {...}}` whose target has other properties inlines to an
    # allOf (schema_refs); the CRD lays it into one node that prunes no allowed field.
    inlined = {"properties": {"f": {
        "allOf": [{"type": "object", "required": ["p"], "description": "target",
                   "properties": {"p": {"type": "string"}, "r": {"type": "string"}}}],
        "required": ["q"], "description": "here",
        "properties": {"q": {"type": "integer"}, "r": {"maxLength": 3}}}}}
    flat = flatten_all_of(inlined)
    assert flat == {"properties": {"f": {
        "type": "object", "required": ["p", "q"], "description": "here",
        "properties": {"p": {"type": "string"}, "r": {"type": "string", "maxLength": 3},
                       "q": {"type": "integer"}}}}}
    assert structural(flat["properties"]["f"])["type"] == "object"
