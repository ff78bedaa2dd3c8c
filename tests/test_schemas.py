"""The JSON Schemas in schemas/: well-formed, documented, closed, and right about the seeds.

Every manifest in tests/testdata/seeds/ is copied verbatim from the platform documentation.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError
from nodus_gitops import schemas
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_DIR = ROOT / "schemas"
SEEDS = Path(__file__).resolve().parent / "testdata" / "seeds"
# The files carry no `$id`, so an editor resolves their relative `$ref`s next to the file
# (`# yaml-language-server: $schema=<path>`); tests give each one this base URI.
BASE = "https://nodus.dev/schemas/v1/"
FILES = ["defs.schema.json", "job.schema.json", "pipeline.schema.json", "sweep.schema.json"]
# Objects that declare some well-known keys but accept any other string key.
MAPS_WITH_KNOWN_KEYS = {("defs.schema.json", "/$defs/annotations")}


def _load(name: str) -> dict:
    return json.loads((SCHEMA_DIR / name).read_text(encoding="utf-8"))


DOCS = {name: _load(name) for name in FILES}
REGISTRY = Registry().with_resources(
    (BASE + name, Resource.from_contents(doc, default_specification=DRAFT202012))
    for name, doc in DOCS.items()
)
VALIDATORS = {
    kind: Draft202012Validator({**DOCS[file], "$id": BASE + file}, registry=REGISTRY)
    for kind, file in schemas.KIND_FILES.items()
}


def _validator_for(file: str, pointer: str) -> Draft202012Validator:
    """A validator for the subschema at `pointer` in `file`, with refs resolving as in place."""
    wrapper = {"$schema": DOCS[file]["$schema"], "$ref": f"{BASE + file}#{pointer}"}
    return Draft202012Validator(wrapper, registry=REGISTRY)


def _def(name: str) -> Draft202012Validator:
    return _validator_for("defs.schema.json", f"/$defs/{name}")


INSTANCE_KEYWORDS = {"const", "enum", "default", "examples"}  # values, not subschemas
SCHEMA_MAPS = {"properties", "patternProperties", "$defs", "dependentSchemas"}


def _walk(node: Any, pointer: str = "") -> Iterator[tuple[str, dict]]:
    """Every subschema in a schema document with its JSON pointer, the document itself first."""
    if not isinstance(node, dict):
        return
    yield pointer, node
    for key, value in node.items():
        here = f"{pointer}/{_escape(key)}"
        if key in SCHEMA_MAPS and isinstance(value, dict):
            for name, sub in value.items():
                yield from _walk(sub, f"{here}/{_escape(name)}")
        elif isinstance(value, list) and key not in INSTANCE_KEYWORDS:
            for i, sub in enumerate(value):
                yield from _walk(sub, f"{here}/{i}")
        elif key not in INSTANCE_KEYWORDS:
            yield from _walk(value, here)


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _seed(name: str) -> dict:
    return yaml.safe_load((SEEDS / name).read_text(encoding="utf-8"))


def _errors(kind: str, manifest: dict) -> list[ValidationError]:
    return sorted(VALIDATORS[kind].iter_errors(manifest), key=lambda e: list(e.absolute_path))


def _message(error: ValidationError) -> str:
    """How the validator prints a pattern error: `path: "value" <patternErrorMessage>`."""
    path = ".".join(str(p) for p in error.absolute_path)
    return f"{path}: {json.dumps(error.instance)} {error.schema['patternErrorMessage']}"


# --- the documents themselves ---------------------------------------------------------------


@pytest.mark.parametrize("file", FILES)
def test_schema_is_valid_draft_2020_12(file: str) -> None:
    doc = DOCS[file]
    assert doc["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert "$id" not in doc  # relative refs must resolve beside the file in editors
    Draft202012Validator.check_schema(doc)


@pytest.mark.parametrize("file", FILES)
def test_schema_is_tidy_json(file: str) -> None:
    text = (SCHEMA_DIR / file).read_text(encoding="utf-8")
    assert text.endswith("}\n")
    assert "\t" not in text
    indents = {len(line) - len(line.lstrip(" ")) for line in text.splitlines()}
    assert all(i % 2 == 0 for i in indents)


def test_package_loads_the_same_documents() -> None:
    assert schemas.load(schemas.SHARED_FILE) == DOCS["defs.schema.json"]
    for file in schemas.KIND_FILES.values():
        assert schemas.load(file) == DOCS[file]
    assert schemas.all_documents() == [DOCS[f] for f in FILES]


@pytest.mark.parametrize("file", FILES)
def test_every_property_and_definition_has_a_description(file: str) -> None:
    missing = []
    for pointer, node in _walk(DOCS[file]):
        for group in ("properties", "$defs"):
            for key, sub in node.get(group, {}).items():
                desc = sub.get("description") if isinstance(sub, dict) else None
                if not isinstance(desc, str) or not desc.strip():
                    missing.append(f"{pointer}/{group}/{key}")
    assert not missing, f"no description: {missing}"


@pytest.mark.parametrize("file", FILES)
def test_every_object_with_properties_is_closed(file: str) -> None:
    open_objects = []
    for pointer, node in _walk(DOCS[file]):
        if "properties" not in node:
            continue
        if (file, pointer) in MAPS_WITH_KNOWN_KEYS:
            assert node["additionalProperties"] == {"type": "string"}
        elif node.get("additionalProperties") is not False:
            open_objects.append(pointer)
    assert not open_objects, f"additionalProperties is not false: {open_objects}"


@pytest.mark.parametrize("file", FILES)
def test_every_pattern_has_a_pattern_error_message(file: str) -> None:
    for pointer, node in _walk(DOCS[file]):
        if "pattern" in node:
            message = node.get("patternErrorMessage")
            assert isinstance(message, str) and message.startswith("is not "), pointer
            re.compile(node["pattern"])


@pytest.mark.parametrize(
    "name", ["name", "duration", "quantity", "cpu", "usd", "time", "gpuRequest"]
)
def test_pattern_bearing_defs_carry_their_message(name: str) -> None:
    node = DOCS["defs.schema.json"]["$defs"][name]
    assert node["pattern"] and node["patternErrorMessage"].startswith("is not ")


@pytest.mark.parametrize("file", FILES)
def test_every_ref_resolves(file: str) -> None:
    resolver = REGISTRY.resolver(base_uri=BASE + file)
    refs = [node["$ref"] for _, node in _walk(DOCS[file]) if "$ref" in node]
    assert refs
    for target in refs:
        assert isinstance(resolver.lookup(target).contents, dict), target


def test_kind_files_use_shared_definitions_by_relative_ref() -> None:
    for file in schemas.KIND_FILES.values():
        refs = [n["$ref"] for _, n in _walk(DOCS[file]) if "$ref" in n]
        for target in refs:
            assert target.startswith(("defs.schema.json#/$defs/", "#/$defs/")), target


def _defaults_and_examples() -> Iterator[tuple[str, str, str, Any]]:
    for file in FILES:
        for pointer, node in _walk(DOCS[file]):
            if pointer == "":
                continue
            for key in ("default", "examples"):
                if key in node:
                    values = node[key] if key == "examples" else [node[key]]
                    for value in values:
                        yield file, pointer, key, value


@pytest.mark.parametrize(("file", "pointer", "key", "value"), list(_defaults_and_examples()))
def test_defaults_and_examples_are_valid(file: str, pointer: str, key: str, value: Any) -> None:
    errors = list(_validator_for(file, pointer).iter_errors(value))
    assert not errors, [e.message for e in errors]


def test_documented_defaults() -> None:
    d = DOCS["defs.schema.json"]["$defs"]
    assert d["recovery"]["properties"]["continuity"]["default"] == "Checkpointed"
    assert d["recovery"]["properties"]["checkpointPaths"]["default"] == ["/nodus/state"]
    assert d["jobSpec"]["properties"]["completions"]["default"] == 1
    assert d["jobSpec"]["properties"]["parallelism"]["default"] == 1
    assert d["state"]["default"] == "Running"
    pipeline_spec = DOCS["pipeline.schema.json"]["properties"]["spec"]["properties"]
    assert pipeline_spec["failurePolicy"]["default"] == "FailFast"
    sweep_spec = DOCS["sweep.schema.json"]["properties"]["spec"]["properties"]
    assert sweep_spec["maxParallel"]["default"] == 4


def test_job_spec_fields_have_no_required_list_of_their_own() -> None:
    assert "required" not in DOCS["defs.schema.json"]["$defs"]["jobSpec"]


# --- the seeds ------------------------------------------------------------------------------

SEED_FILES = {
    "hello-job.yaml": "Job",
    "indexed-outputs-job.yaml": "Job",
    "train-eval-pipeline.yaml": "Pipeline",
    "batch-size-sweep.yaml": "Sweep",
}


@pytest.mark.parametrize(("file", "kind"), SEED_FILES.items())
def test_seed_manifests_are_valid(file: str, kind: str) -> None:
    manifest = _seed(file)
    assert manifest["kind"] == kind
    assert [e.message for e in _errors(kind, manifest)] == []


def test_seed_folder_holds_exactly_the_seeds() -> None:
    assert sorted(p.name for p in SEEDS.glob("*.yaml")) == sorted(SEED_FILES)


# --- invalid manifests: one error each, at the expected place ---------------------------------


BASE_SEED = {
    "Job": "hello-job.yaml",
    "Indexed": "indexed-outputs-job.yaml",
    "Pipeline": "train-eval-pipeline.yaml",
    "Sweep": "batch-size-sweep.yaml",
}
DROP = object()


def _parts(path: str | tuple) -> list[str | int]:
    """`spec.stages.0.template` -> ["spec", "stages", 0, "template"]; "" is the top level.
    A tuple is taken as it is (for keys with dots, such as annotation names)."""
    if isinstance(path, tuple):
        return list(path)
    return [int(p) if p.isdigit() else p for p in path.split(".")] if path else []


def _changed(seed: str, path: str | tuple, value: Any) -> dict:
    """The seed manifest of `seed` with the field at `path` set to `value` (or dropped)."""
    doc = _seed(BASE_SEED[seed])
    *parents, last = _parts(path)
    node = doc
    for part in parents:
        node = node[part]
    if value is DROP:
        del node[last]
    else:
        node[last] = value
    return doc


def _job() -> dict:
    return _seed(BASE_SEED["Job"])


def _sweep() -> dict:
    return _seed(BASE_SEED["Sweep"])


ANN = ("metadata", "annotations")
GPU = "spec.resources.gpu"
CPU = "spec.resources.cpu"
PARAMS = "spec.matrix.params"
# (case id, seed, field changed, new value, path of the one expected error, its keyword)
INVALID = [
    ("unknown-top", "Job", "status", {"phase": "Running"}, "", "additionalProperties"),
    ("unknown-metadata", "Job", "metadata.namespace", "x", "metadata", "additionalProperties"),
    ("unknown-spec", "Job", "spec.gpus", 1, "spec", "additionalProperties"),
    ("unknown-resources", "Job", "spec.resources.gpuCount", 2, "spec.resources",
     "additionalProperties"),
    ("unknown-gpu-field", "Job", GPU, {"type": "H100", "memory": "80Gi"}, GPU,
     "additionalProperties"),
    ("wrong-api-version", "Job", "apiVersion", "nodus.dev/v2", "apiVersion", "const"),
    ("wrong-kind", "Job", "kind", "Pipeline", "kind", "const"),
    ("missing-metadata", "Job", "metadata", DROP, "", "required"),
    ("missing-name", "Job", "metadata.name", DROP, "metadata", "required"),
    ("name-uppercase", "Job", "metadata.name", "Hello", "metadata.name", "pattern"),
    ("name-too-long", "Job", "metadata.name", "a" * 64, "metadata.name", "maxLength"),
    ("label-not-string", "Job", "metadata.labels", {"tier": 1}, "metadata.labels.tier", "type"),
    ("on-change-unknown", "Job", ANN, {"nodus.dev/on-change": "Sometimes"},
     (*ANN, "nodus.dev/on-change"), "enum"),
    ("prune-enabled", "Job", ANN, {"nodus.dev/prune": "enabled"}, (*ANN, "nodus.dev/prune"),
     "enum"),
    ("dataset-bytes-words", "Job", ANN, {"nodus.dev/dataset-bytes": "2 TB"},
     (*ANN, "nodus.dev/dataset-bytes"), "pattern"),
    ("missing-command", "Job", "spec.command", DROP, "spec", "required"),
    ("empty-command", "Job", "spec.command", [], "spec.command", "minItems"),
    ("bad-duration", "Job", "spec.timeout", "10x", "spec.timeout", "pattern"),
    ("empty-duration", "Job", "spec.timeout", "", "spec.timeout", "pattern"),
    ("duration-out-of-order", "Job", "spec.timeout", "30m1h", "spec.timeout", "pattern"),
    ("duration-number", "Job", "spec.timeout", 600, "spec.timeout", "type"),
    ("bad-quantity", "Indexed", "spec.resources.memory", "4GB", "spec.resources.memory",
     "pattern"),
    ("bad-cpu", "Indexed", CPU, "two", CPU, "pattern"),
    ("zero-cpu", "Indexed", CPU, "0", CPU, "pattern"),
    ("zero-cpu-number", "Indexed", CPU, 0, CPU, "exclusiveMinimum"),
    ("bad-gpu-request", "Job", GPU, "h100:0", GPU, "pattern"),
    ("gpu-count-zero", "Job", GPU, {"type": "H100", "count": 0}, f"{GPU}.count", "minimum"),
    ("gpu-bad-min-memory", "Job", GPU, {"minMemory": "24 GB"}, f"{GPU}.minMemory", "pattern"),
    ("gpu-number", "Job", GPU, 1, GPU, "type"),
    ("completions-zero", "Indexed", "spec.completions", 0, "spec.completions", "minimum"),
    ("parallelism-zero", "Indexed", "spec.parallelism", 0, "spec.parallelism", "minimum"),
    ("backoff-negative", "Indexed", "spec.backoffLimit", -1, "spec.backoffLimit", "minimum"),
    ("deadline-zero", "Job", "spec.activeDeadlineSeconds", 0, "spec.activeDeadlineSeconds",
     "minimum"),
    ("continuity-unknown", "Job", "spec.recovery", {"continuity": "Sometimes"},
     "spec.recovery.continuity", "enum"),
    ("checkpoint-relative", "Job", "spec.recovery", {"checkpointPaths": ["state"]},
     "spec.recovery.checkpointPaths.0", "pattern"),
    ("state-paused", "Job", "spec.state", "Paused", "spec.state", "enum"),
    ("ttl-negative", "Job", "spec.ttlSecondsAfterFinished", -1, "spec.ttlSecondsAfterFinished",
     "minimum"),
    ("output-without-path", "Job", "spec.outputs", [{"name": "report"}], "spec.outputs.0",
     "required"),
    ("usd-number", "Job", "spec.maxCostUSD", 0.25, "spec.maxCostUSD", "type"),
    ("usd-with-dollar", "Job", "spec.maxCostUSD", "$5", "spec.maxCostUSD", "pattern"),
    ("complete-by-not-rfc3339", "Job", "spec.completeByTime", "2026-12-01 18:00",
     "spec.completeByTime", "pattern"),
    ("env-bad-name", "Job", "spec.env", {"1BAD": "x"}, "spec.env", "pattern"),
    ("env-not-string", "Job", "spec.env", {"STEPS": 300}, "spec.env.STEPS", "type"),
    ("env-a-string", "Job", "spec.env", "STEPS=300", "spec.env", "type"),
    ("env-list-bad-name", "Job", "spec.env", [{"name": "1BAD", "value": "x"}],
     "spec.env.0.name", "pattern"),
    ("env-list-not-string", "Job", "spec.env", [{"name": "STEPS", "value": 300}],
     "spec.env.0.value", "type"),
    ("env-list-without-name", "Job", "spec.env", [{"value": "x"}], "spec.env.0", "required"),
    ("env-list-value-from", "Job", "spec.env",
     [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
     "spec.env.0", "additionalProperties"),
    ("env-list-entry-a-string", "Job", "spec.env", ["STEPS=300"], "spec.env.0", "type"),
    ("placement-unknown", "Job", "spec.placement", {"zone": "us-east-1a"}, "spec.placement",
     "additionalProperties"),
    ("interruptible-string", "Job", "spec.placement", {"interruptible": "yes"},
     "spec.placement.interruptible", "type"),
    ("source-git-unknown", "Job", "spec.source", {"git": {"repo": "o/r", "branch": "main"}},
     "spec.source.git", "additionalProperties"),
    ("source-without-git", "Job", "spec.source", {}, "spec.source", "required"),
    ("distributed-one-node", "Job", "spec.distributed", {"nodes": 1}, "spec.distributed.nodes",
     "minimum"),
    ("stages-empty", "Pipeline", "spec.stages", [], "spec.stages", "minItems"),
    ("stages-missing", "Pipeline", "spec.stages", DROP, "spec", "required"),
    ("failure-policy-unknown", "Pipeline", "spec.failurePolicy", "Continue",
     "spec.failurePolicy", "enum"),
    ("pipeline-max-parallel-0", "Pipeline", "spec.maxParallel", 0, "spec.maxParallel",
     "minimum"),
    ("stage-unknown-field", "Pipeline", "spec.stages.0.needs", ["x"], "spec.stages.0",
     "additionalProperties"),
    ("stage-without-template", "Pipeline", "spec.stages.0.template", DROP, "spec.stages.0",
     "required"),
    ("stage-bad-name", "Pipeline", "spec.stages.0.name", "Prepare", "spec.stages.0.name",
     "pattern"),
    ("input-without-output", "Pipeline", "spec.stages.1.inputs.0.output", DROP,
     "spec.stages.1.inputs.0", "required"),
    ("defaults-bad-duration", "Pipeline", "spec.defaults.timeout", "15 minutes",
     "spec.defaults.timeout", "pattern"),
    ("template-unknown-field", "Pipeline", "spec.stages.2.template.gpu", "L4",
     "spec.stages.2.template", "additionalProperties"),
    ("repetitions-65", "Sweep", "spec.repetitions", 65, "spec.repetitions", "maximum"),
    ("repetitions-0", "Sweep", "spec.repetitions", 0, "spec.repetitions", "minimum"),
    ("sweep-max-parallel-0", "Sweep", "spec.maxParallel", 0, "spec.maxParallel", "minimum"),
    ("params-name-lowercase", "Sweep", PARAMS, {"batch_size": ["32"]}, PARAMS, "pattern"),
    ("params-values-not-strings", "Sweep", f"{PARAMS}.BATCH_SIZE", [32],
     f"{PARAMS}.BATCH_SIZE.0", "type"),
    ("params-value-not-list", "Sweep", f"{PARAMS}.BATCH_SIZE", "32", f"{PARAMS}.BATCH_SIZE",
     "type"),
    ("params-too-many-values", "Sweep", f"{PARAMS}.BATCH_SIZE", [str(i) for i in range(65)],
     f"{PARAMS}.BATCH_SIZE", "maxItems"),
    ("params-too-many-names", "Sweep", PARAMS, {f"P{i}": ["1"] for i in range(17)}, PARAMS,
     "maxProperties"),
    ("matrix-gpu-too-many", "Sweep", "spec.matrix.gpu", ["L4"] * 17, "spec.matrix.gpu",
     "maxItems"),
    ("matrix-gpu-bad", "Sweep", "spec.matrix.gpu", ["L4", "A10:0"], "spec.matrix.gpu.1",
     "pattern"),
    ("matrix-unknown-dimension", "Sweep", "spec.matrix.BATCH_SIZE", ["32"], "spec.matrix",
     "additionalProperties"),
    ("sweep-without-matrix", "Sweep", "spec.matrix", DROP, "spec", "required"),
    ("sweep-template-without-kind", "Sweep", "spec.template.kind", DROP, "spec.template",
     "required"),
    ("sweep-template-without-command", "Sweep", "spec.template.spec.command", DROP,
     "spec.template.spec", "required"),
    ("sweep-template-metadata-name", "Sweep", "spec.template.metadata", {"name": "cell"},
     "spec.template.metadata", "additionalProperties"),
    ("sweep-usd-number", "Sweep", "spec.maxCostUSD", 0.75, "spec.maxCostUSD", "type"),
]


@pytest.mark.parametrize(
    ("seed", "field", "value", "path", "keyword"),
    [case[1:] for case in INVALID],
    ids=[case[0] for case in INVALID],
)
def test_invalid_manifest_has_one_error_at_the_expected_path(
    seed: str, field: str | tuple, value: Any, path: str | tuple, keyword: str
) -> None:
    manifest = _changed(seed, field, value)
    errors = _errors("Job" if seed == "Indexed" else seed, manifest)
    found = [(list(e.absolute_path), e.validator) for e in errors]
    assert found == [(_parts(path), keyword)], [e.message for e in errors]
    if keyword == "pattern":
        assert errors[0].schema["patternErrorMessage"].startswith("is not ")


def test_pattern_error_reads_as_documented() -> None:
    (error,) = _errors("Job", _changed("Job", "spec.timeout", "10x"))
    assert _message(error) == 'spec.timeout: "10x" is not a duration (use 90s, 10m, 2h)'
    (error,) = _errors("Job", _changed("Job", GPU, "h100:0"))
    assert _message(error) == (
        'spec.resources.gpu: "h100:0" is not a GPU request (use L4, H100:8 or H100!)'
    )
    (error,) = _errors("Sweep", _changed("Sweep", PARAMS, {"bs": ["1"]}))
    assert _message(error) == (
        'spec.matrix.params: "bs" is not a parameter name (use uppercase letters, digits and _)'
    )


def test_pipeline_stage_template_and_defaults_need_no_command() -> None:
    manifest = _seed(BASE_SEED["Pipeline"])
    manifest["spec"]["defaults"]["command"] = ["python", "stage.py"]
    for stage in manifest["spec"]["stages"]:
        del stage["template"]["command"]
    assert _errors("Pipeline", manifest) == []


def test_a_full_job_is_valid() -> None:
    manifest = _job()
    manifest["metadata"]["labels"] = {"team": "research"}
    manifest["metadata"]["annotations"] = {
        "nodus.dev/model": "meta-llama/Llama-3.1-8B",
        "nodus.dev/dataset-bytes": "2Ti",
        "nodus.dev/on-change": "Replace",
        "nodus.dev/prune": "disabled",
        "example.com/owner": "ml-platform",
    }
    manifest["spec"].update(
        {
            "workingDir": "/workspace",
            "env": {"LOG_LEVEL": "debug", "NODUS_PARAM_X": "1", "_PRIVATE": "y"},
            "resources": {
                "cpu": 4,
                "memory": "24Gi",
                "gpu": {"type": "H100!", "count": 8, "minMemory": "80Gi"},
            },
            "completions": 4,
            "parallelism": 2,
            "backoffLimit": 0,
            "activeDeadlineSeconds": 3600,
            "expectedDuration": "1h30m",
            "completeByTime": "2026-12-01T18:00:00.5+01:00",
            "recovery": {
                "continuity": "Restartable",
                "onInterruption": "Fail",
                "maxAttempts": 3,
                "minProgressDuration": "5m",
                "checkpointPaths": ["/nodus/state", "/cache"],
            },
            "placement": {"regions": ["us", "eu"], "queueTimeout": "30m", "interruptible": True},
            "source": {"git": {"repo": "your-org/your-repository", "ref": "main", "path": "/src"}},
            "state": "Suspended",
            "ttlSecondsAfterFinished": 0,
            "distributed": {"nodes": 2, "gpusPerNode": 8},
        }
    )
    assert [e.message for e in _errors("Job", manifest)] == []


def test_env_takes_a_mapping_or_the_kubernetes_list_of_name_and_value() -> None:
    listed = [{"name": "LOG_LEVEL", "value": "debug"}, {"name": "NODUS_PARAM_X", "value": "1"},
              {"name": "EMPTY"}]
    for env in ({"LOG_LEVEL": "debug"}, listed, {}, []):
        assert [e.message for e in _errors("Job", _changed("Job", "spec.env", env))] == []
    pipeline = _seed(BASE_SEED["Pipeline"])
    pipeline["spec"]["defaults"]["env"] = {"A": "1"}
    pipeline["spec"]["stages"][0]["template"]["env"] = [{"name": "B", "value": "2"}]
    assert _errors("Pipeline", pipeline) == []
    assert _errors("Sweep", _changed("Sweep", "spec.template.spec.env", listed)) == []


def test_a_full_sweep_is_valid() -> None:
    manifest = _sweep()
    manifest["spec"].update(
        {"repetitions": 64, "state": "Cancelled", "ttlSecondsAfterFinished": 60}
    )
    manifest["spec"]["matrix"] = {
        "gpu": ["L4", "H100:8", "H100!", {"minMemory": "48Gi"}],
        "regions": ["us", "eu"],
        "params": {"BATCH_SIZE": ["8", "16"], "LR_2": []},
    }
    manifest["spec"]["template"]["metadata"] = {
        "labels": {"bench": "throughput"},
        "annotations": {"nodus.dev/prune": "disabled"},
    }
    assert [e.message for e in _errors("Sweep", manifest)] == []


def test_sweep_template_kind_is_checked_in_python_not_here() -> None:
    manifest = _changed("Sweep", "spec.template.kind", "Function")
    assert _errors("Sweep", manifest) == []


# --- the shared scalar formats ----------------------------------------------------------------

SCALARS = {
    "name": (
        ["a", "hello", "train-eval", "0", "a" * 63, "x-1"],
        ["", "-a", "a-", "Hello", "a_b", "a.b", "a" * 64, 1],
    ),
    "duration": (
        ["90s", "10m", "2h", "1h30m", "1h30m15s", "0s", "100m"],
        ["", "10", "10x", "h", "1d", "30m1h", "1h1h", "1.5h", " 10m", "10M", 10],
    ),
    "quantity": (
        ["24Gi", "512Mi", "4G", "1.5Gi", "1000", "0", "2Ti", "1k"],
        ["", "4GB", "4gi", "1.", ".5Gi", "-1Gi", "4 Gi", "1K", 1024],
    ),
    "cpu": (
        ["2", "0.5", "500m", "16", 2, 0.5],
        ["", "0", "0.0", "0m", "two", "1.5m", "-1", "2 ", 0, -1, True],
    ),
    "usd": (
        ["0.25", "5", "100.00", "0"],
        ["", "$5", "0.", ".25", "-1", "1,000", "5 USD", 0.25, 5],
    ),
    "time": (
        [
            "2026-12-01T18:00:00Z",
            "2026-12-01t18:00:00z",
            "2026-12-01T18:00:00.123+01:00",
            "2026-12-31T23:59:60-05:30",
        ],
        [
            "",
            "2026-12-01",
            "2026-12-01T18:00:00",
            "2026-12-01 18:00:00Z",
            "2026-13-01T18:00:00Z",
            "2026-12-01T24:00:00Z",
            "2026-12-01T18:00Z",
            "2026-12-01T18:00:00+0100",
        ],
    ),
    "gpuRequest": (
        [
            "L4",
            "A10",
            "H100:8",
            "H100!",
            "H100!:8",
            "a100-80gb",
            "RTX_4090",
            {},
            {"minMemory": "24Gi"},
            {"type": "H100!", "count": 8},
        ],
        [
            "",
            "h100:0",
            "H100:",
            "H100:08",
            ":8",
            "-L4",
            "H 100",
            "H100!!",
            8,
            ["L4"],
            {"type": "H100:8"},
            {"count": 1.5},
            {"gpu": "L4"},
        ],
    ),
}


@pytest.mark.parametrize(
    ("name", "value"),
    [(n, v) for n, (good, _) in SCALARS.items() for v in good],
)
def test_scalar_accepts(name: str, value: Any) -> None:
    assert [e.message for e in _def(name).iter_errors(value)] == []


@pytest.mark.parametrize(
    ("name", "value"),
    [(n, v) for n, (_, bad) in SCALARS.items() for v in bad],
)
def test_scalar_rejects(name: str, value: Any) -> None:
    errors = list(_def(name).iter_errors(value))
    assert errors
    # One error per bad value keeps the validator's message clean (no anyOf noise).
    assert len(errors) == 1, [e.message for e in errors]
