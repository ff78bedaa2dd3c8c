"""Schema checks: the JSON Schemas in `schemas/`, compiled once, and each error turned into
a message a YAML author understands (`"10x" is not a duration (use 90s, 10m, 2h)`).

Valid manifests (nearly all of them) pass a compiled fast path; only a manifest that
fails it is walked by jsonschema for every error with its path.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from functools import cache
from typing import Any

import fastjsonschema
from jsonschema import Draft202012Validator, ValidationError
from nodus_gitops.manifests import FieldPath
from nodus_gitops.schema_refs import inlined_kind_schema


def show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


@cache
def _validator(kind: str) -> Draft202012Validator:
    schema = inlined_kind_schema(kind)
    schema.pop("$id", None)
    return Draft202012Validator(schema)


@cache
def _fast_check(kind: str) -> Callable[[Any], Any]:
    """The same schema compiled to Python code by fastjsonschema: about fifteen times
    faster than jsonschema on a valid manifest. It only answers valid or not; jsonschema
    then explains a failure. The inlined schema uses no keyword whose meaning differs
    between draft-07 and 2020-12, and defaults are never written into the manifest."""
    schema = dict(_validator(kind).schema)
    schema["$schema"] = "http://json-schema.org/draft-07/schema#"
    return fastjsonschema.compile(schema, use_default=False, use_formats=False)


def schema_problems(kind: str, body: dict) -> Iterator[tuple[FieldPath, str, bool]]:
    """(path, message, points at the key) for every schema error of one manifest."""
    try:
        _fast_check(kind)(body)
        return
    except fastjsonschema.JsonSchemaException:
        pass
    for error in _validator(kind).iter_errors(body):
        yield from _describe(error)


def _describe(error: ValidationError) -> Iterator[tuple[FieldPath, str, bool]]:
    path = tuple(error.absolute_path)
    value = error.instance
    keyword = error.validator
    schema = error.schema if isinstance(error.schema, dict) else {}
    if "propertyNames" in error.absolute_schema_path:
        hint = error.message
        if schema.get("patternErrorMessage"):
            hint = f"{show(value)} {schema['patternErrorMessage']}"
        yield path + (value,), hint, True
        return
    if keyword == "additionalProperties":
        known = set(schema.get("properties", {}))
        patterns = [re.compile(p) for p in schema.get("patternProperties", {})]
        why = schema.get("additionalPropertiesErrorMessage")
        for extra in sorted(k for k in value if k not in known
                            and not any(p.search(k) for p in patterns)):
            allowed = f": {why}" if why else f" (allowed here: {', '.join(sorted(known))})"
            yield path + (extra,), f"unknown field {extra!r}{allowed}", True
    elif keyword == "required":
        missing = error.message.split("'")[1] if "'" in error.message else error.message
        yield path + (missing,), "required field is missing", True
    elif keyword == "pattern" and schema.get("patternErrorMessage"):
        yield path, f"{show(value)} {schema['patternErrorMessage']}", False
    elif keyword == "type":
        wanted = error.validator_value
        wanted = " or ".join(_TYPE_WORDS.get(w, w) for w in (
            wanted if isinstance(wanted, list) else [wanted]))
        hint = f' (quote it: "{value}")' if wanted == "string" and not isinstance(
            value, dict | list) else ""
        yield path, f"{show(value)} is a {json_type(value)}, expected a {wanted}{hint}", False
    elif keyword == "enum":
        choices = ", ".join(str(c) for c in error.validator_value)
        yield path, f"{show(value)} is not one of {choices}", False
    elif keyword == "const":
        yield path, f"{show(value)} must be {show(error.validator_value)}", False
    elif keyword in ("minimum", "exclusiveMinimum"):
        yield path, f"{show(value)} must be at least {error.validator_value}", False
    elif keyword in ("maximum", "exclusiveMaximum"):
        yield path, f"{show(value)} must be at most {error.validator_value}", False
    elif keyword == "minItems":
        yield path, f"needs at least {error.validator_value} entries", False
    elif keyword in ("maxItems", "maxProperties"):
        yield path, f"has {len(value)} entries; at most {error.validator_value} allowed", False
    elif keyword == "maxLength":
        yield path, f"{show(value)} is longer than {error.validator_value} characters", False
    else:
        yield path, error.message, False


# JSON Schema's type names as a YAML author reads them.
_TYPE_WORDS = {"object": "mapping", "array": "list", "integer": "whole number",
               "number": "number", "string": "string", "boolean": "boolean"}


def json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if value is None:
        return "null"
    return {dict: "mapping", list: "list", str: "string"}.get(type(value), type(value).__name__)
