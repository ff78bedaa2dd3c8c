"""`$ref` inlining (schema_refs): the inlined schema accepts exactly what the schema with its
references resolved accepts, draft 2020-12 (`$ref` beside sibling keywords applies both)."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import Draft202012Validator
from nodus_gitops.schema_refs import inline_refs, inlined_kind_schema
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

BASE = "https://nodus.test/"
OBJ = {"type": "object", "properties": {"p": {"type": "string"}}, "required": ["p"],
       "description": "target"}


def docs_with(node: dict[str, Any], target: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """`a.json` holds `target` as `$defs/x`; `b.json` refers to it in `properties.f`."""
    return {"a.json": {"$defs": {"x": target}},
            "b.json": {"type": "object", "properties": {"f": node}, "$defs": {"unused": {}}}}


def inlined_f(node: dict[str, Any], target: dict[str, Any]) -> Any:
    docs = docs_with(node, target)
    return inline_refs(docs["b.json"], docs, "b.json")["properties"]["f"]


def same_verdicts(node: dict[str, Any], target: dict[str, Any], values: list[Any]) -> None:
    docs = docs_with(node, target)
    registry = Registry().with_resources(
        (BASE + name, Resource.from_contents(doc, default_specification=DRAFT202012))
        for name, doc in docs.items())
    resolved = Draft202012Validator({"$ref": BASE + "b.json"}, registry=registry)
    inlined = Draft202012Validator(inline_refs(docs["b.json"], docs, "b.json"))
    for value in values:
        assert resolved.is_valid({"f": value}) == inlined.is_valid({"f": value}), value


def test_siblings_that_add_to_the_target_make_one_node() -> None:
    node = {"$ref": "a.json#/$defs/x", "required": ["q"], "description": "here"}
    assert inlined_f(node, OBJ) == {"type": "object", "properties": {"p": {"type": "string"}},
                                    "required": ["p", "q"], "description": "here"}
    same_verdicts(node, OBJ, [{"p": "x"}, {"p": "x", "q": 1}, {"q": 1}, {"p": 1, "q": 1}, 3])


def test_a_ref_in_the_same_file_and_no_siblings() -> None:
    docs = {"b.json": {"properties": {"f": {"$ref": "#/$defs/y"}},
                       "$defs": {"y": {"$ref": "#/$defs/z"}, "z": {"type": "integer"}}}}
    assert inline_refs(docs["b.json"], docs, "b.json") == {
        "properties": {"f": {"type": "integer"}}}


@pytest.mark.parametrize("node, values", [
    # The same keyword on both sides, with different values: both apply.
    ({"$ref": "a.json#/$defs/x", "properties": {"q": {"type": "integer"}}},
     [{"p": "x", "q": 1}, {"p": "x", "q": "y"}, {"p": 1}, {"q": 1}]),
    # additionalProperties beside the ref sees only the properties beside it.
    ({"$ref": "a.json#/$defs/x", "additionalProperties": False},
     [{"p": "x"}, {}, 1]),
    ({"$ref": "a.json#/$defs/x", "unevaluatedProperties": False},
     [{"p": "x"}, {"p": "x", "q": 1}]),
])
def test_siblings_that_would_change_the_target_keep_it_in_all_of(node: dict, values: list
                                                                  ) -> None:
    f = inlined_f(node, OBJ)
    assert f["allOf"] == [OBJ]
    assert {k: v for k, v in f.items() if k != "allOf"} == {
        k: v for k, v in node.items() if k != "$ref"}
    same_verdicts(node, OBJ, values)


def test_a_target_whose_additional_properties_would_see_the_siblings() -> None:
    target = {"type": "object", "additionalProperties": False}
    node = {"$ref": "a.json#/$defs/x", "properties": {"p": {"type": "string"}}}
    assert "allOf" in inlined_f(node, target)
    same_verdicts(node, target, [{}, {"p": "x"}])


def test_other_references_stay_and_a_recursive_one_is_refused() -> None:
    node = {"$ref": "https://elsewhere.test/s.json"}
    assert inlined_f(node, OBJ) == node
    docs = {"b.json": {"$ref": "#/$defs/t", "$defs": {"t": {"items": {"$ref": "#/$defs/t"}}}}}
    with pytest.raises(ValueError, match=r"recursive \$ref b.json#/\$defs/t"):
        inline_refs(docs["b.json"], docs, "b.json")


@pytest.mark.parametrize("kind", ["Job", "Pipeline", "Sweep"])
def test_the_kinds_inline_to_no_reference_and_a_fresh_tree(kind: str) -> None:
    text = repr(inlined_kind_schema(kind))
    assert "$ref" not in text and "$defs" not in text
    inlined_kind_schema(kind)["properties"].clear()
    assert inlined_kind_schema(kind)["properties"]
