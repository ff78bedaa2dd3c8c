"""Validation: JSON Schema plus the platform's rules, returning every problem as data.

Two layers. The schemas (`schemas/`) check shape: fields, types, formats, enums, unknown
fields. The rules here check what a schema cannot say: durations that are also limits,
names that must fit once combined, stage graphs, matrix sizes, duplicates across files.
Every problem names the file, the line, the resource and the JSON path of the field.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from nodus_gitops.composite import (
    cell_job_name,
    find_cycle,
    merge_defaults,
    stage_job_name,
    sweep_cell_count,
)
from nodus_gitops.envvars import reserved, twice
from nodus_gitops.floor.errors import ManifestError
from nodus_gitops.floor.gpu import effective_min_memory
from nodus_gitops.floor.identity import API_VERSION, KINDS, Kind
from nodus_gitops.floor.problems import Problem, json_path
from nodus_gitops.floor.quantities import parse_time, parse_usd
from nodus_gitops.manifests import Document, FieldPath, Manifest, bulk_loading, load_documents
from nodus_gitops.schema_check import json_type, schema_problems, show

MAX_PIPELINE_AND_STAGE_NAME = 62  # the two names together, without the '-' joining them
MAX_NAME = 63
MAX_SWEEP_CELLS = 256
OUTPUTS_ROOT = "/nodus/outputs"
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclass
class Result:
    """What validating a tree found: the resources (valid or not) and every problem."""

    manifests: list[Manifest] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


# --- the platform's rules ----------------------------------------------------------------


class _Collector:
    """Gathers the problems of one manifest, turning field paths into lines."""

    def __init__(self, manifest: Manifest) -> None:
        self.manifest = manifest
        self.problems: list[Problem] = []

    def add(self, path: FieldPath, message: str, *, key: bool = False) -> None:
        m = self.manifest
        line = m.doc.line_of(path, key=key)
        self.problems.append(Problem(m.file, line, m.kind, m.name, json_path(path), message))


def _get(obj: Any, *path: str | int) -> Any:
    for part in path:
        if isinstance(obj, dict) and isinstance(part, str):
            obj = obj.get(part)
        elif isinstance(obj, list) and isinstance(part, int) and 0 <= part < len(obj):
            obj = obj[part]
        else:
            return None
    return obj


def _dicts(value: Any) -> list[tuple[int, dict]]:
    return [(i, v) for i, v in enumerate(value) if isinstance(v, dict)] if isinstance(
        value, list) else []


def _check_cost(c: _Collector, spec: dict, at: FieldPath) -> Decimal | None:
    text = spec.get("maxCostUSD")
    value = parse_usd(text) if isinstance(text, str) else None
    if value is not None and value <= 0:
        c.add(at + ("maxCostUSD",), f"{show(text)} must be more than 0")
        return None
    return value


def _check_run_fields(c: _Collector, spec: dict, at: FieldPath) -> None:
    """Rules shared by Jobs, Pipelines and Sweeps: aliases, cost cap, times."""
    if "timeout" in spec and "activeDeadlineSeconds" in spec:
        c.add(at + ("activeDeadlineSeconds",),
              "activeDeadlineSeconds is an alias of timeout: set only one of them")
    _check_cost(c, spec, at)
    when = spec.get("completeByTime")
    if isinstance(when, str) and parse_time(when) is None:
        c.add(at + ("completeByTime",),
              f"{show(when)} is not an RFC 3339 time (use 2026-12-01T18:00:00Z)")


def _check_env(c: _Collector, spec: dict, at: FieldPath) -> None:
    """`env` as written at `at`, a mapping or the Kubernetes list of {name, value}: no name
    the platform reserves, and no name twice in the list (YAML refuses a repeated key).
    Its shape (names, string values, no valueFrom) is the schema's."""
    env = spec.get("env")
    if isinstance(env, dict):
        for name in env:
            _check_env_name(c, at + ("env", name), name, key=True)
        return
    first: dict[str, int] = {}
    for i, entry in _dicts(env):
        name = entry.get("name")
        if not isinstance(name, str):
            continue
        _check_env_name(c, at + ("env", i, "name"), name)
        if name in first:
            c.add(at + ("env", i, "name"), twice(name, first[name], i))
        first.setdefault(name, i)


def _check_env_name(c: _Collector, path: FieldPath, name: Any, key: bool = False) -> None:
    if isinstance(name, str) and reserved(name):
        c.add(path, f"{name!r}: the NODUS_ prefix is reserved for the platform's variables "
              "(only NODUS_PARAM_ names may be set)", key=key)


def _check_job_spec(c: _Collector, spec: dict, at: FieldPath) -> None:
    """The Job rules, for a Job, a merged Pipeline stage or a Sweep template (`env` aside:
    it is checked where it is written, see `_check_env`)."""
    _check_run_fields(c, spec, at)
    seen: dict[str, int] = {}
    for i, output in _dicts(spec.get("outputs")):
        name, path = output.get("name"), output.get("path")
        if isinstance(name, str):
            if name in seen:
                c.add(at + ("outputs", i, "name"),
                      f"output {name!r} is declared twice (outputs[{seen[name]}] and [{i}])")
            seen.setdefault(name, i)
        if isinstance(path, str) and not _under_outputs(path):
            c.add(at + ("outputs", i, "path"),
                  f"{show(path)} must lie under {OUTPUTS_ROOT} (absolute, without '..')")
    git = _get(spec, "source", "git")
    if isinstance(git, dict):
        repo = git.get("repo")  # its shape and the ref's: schemas/defs.schema.json
        if repo is not None and not git.get("ref"):
            c.add(at + ("source", "git", "ref"),
                  "ref is required with repo: set a branch, tag or commit", key=True)


def _under_outputs(path: str) -> bool:
    parts = path.split("/")
    return (path == OUTPUTS_ROOT or path.startswith(OUTPUTS_ROOT + "/")) and ".." not in parts


def _check_job(c: _Collector, m: Manifest) -> None:
    _check_job_spec(c, m.spec, ("spec",))
    _check_env(c, m.spec, ("spec",))


def _check_pipeline(c: _Collector, m: Manifest) -> None:
    spec = m.spec
    _check_run_fields(c, spec, ("spec",))
    cap = parse_usd(spec.get("maxCostUSD")) if isinstance(spec.get("maxCostUSD"), str) else None
    defaults = spec.get("defaults") if isinstance(spec.get("defaults"), dict) else {}
    stages = _dicts(spec.get("stages"))
    names: dict[str, int] = {}
    for i, stage in stages:
        name = stage.get("name")
        if not isinstance(name, str):
            continue
        if name in names:
            c.add(("spec", "stages", i, "name"),
                  f"stage {name!r} is declared twice (stages[{names[name]}] and [{i}])")
            continue
        names[name] = i
        together = len(m.name) + len(name)
        if m.name and together > MAX_PIPELINE_AND_STAGE_NAME:
            job_name = stage_job_name(m.name, name)
            c.add(("spec", "stages", i, "name"),
                  f"the pipeline name plus the stage name are {together} characters; they can "
                  f"be at most {MAX_PIPELINE_AND_STAGE_NAME} (the stage Job {job_name!r} would "
                  f"be {len(job_name)} characters)")
    merged = {s.get("name"): merge_defaults(defaults, s.get("template")) for _, s in stages}
    _check_env(c, defaults, ("spec", "defaults"))
    _check_stage_cap(c, cap, defaults, ("spec", "defaults"))
    graph: dict[str, list[str]] = {}
    for i, stage in stages:
        name = stage.get("name")
        at = ("spec", "stages", i)
        deps = [d for d in (stage.get("dependsOn") or []) if isinstance(d, str)]
        if isinstance(name, str):
            graph.setdefault(name, deps)
        for j, dep in enumerate(stage.get("dependsOn") or []):
            if dep == name:
                c.add(at + ("dependsOn", j), f"stage {name!r} depends on itself")
            elif dep not in names:
                c.add(at + ("dependsOn", j), f"{show(dep)} is not a stage of this pipeline "
                      f"(stages: {', '.join(names)})")
        for j, inp in _dicts(stage.get("inputs")):
            src, output = inp.get("fromStage"), inp.get("output")
            if src not in names:
                c.add(at + ("inputs", j, "fromStage"), f"{show(src)} is not a stage of this "
                      "pipeline")
                continue
            if src not in deps:
                c.add(at + ("inputs", j, "fromStage"), f"input {inp.get('name')!r} reads from "
                      f"stage {src!r}, which must also be listed in dependsOn")
            declared = [o.get("name") for _, o in _dicts(merged.get(src, {}).get("outputs"))]
            if output not in declared:
                have = ", ".join(str(d) for d in declared) or "none"
                c.add(at + ("inputs", j, "output"), f"stage {src!r} declares no output "
                      f"{show(output)} (its outputs: {have})")
        job = merged.get(name, {})
        if "command" not in job:
            c.add(at + ("template",), "stage has no command: set template.command or "
                  "spec.defaults.command", key=True)
        _check_job_spec(c, job, at + ("template",))
        template = stage.get("template") if isinstance(stage.get("template"), dict) else {}
        _check_env(c, template, at + ("template",))
        _check_stage_cap(c, cap, template, at + ("template",))
    cycle = find_cycle(graph)
    if cycle:
        c.add(("spec", "stages", names[cycle[0]], "dependsOn"),
              f"dependency cycle: {' -> '.join(cycle)}")


def _check_stage_cap(c: _Collector, cap: Decimal | None, job: dict, at: FieldPath) -> None:
    """The seeds: "A stage can set a lower maxCostUSD of its own", strictly lower than the
    Pipeline's. Checked where it is written: a cap in spec.defaults is one problem, not one
    per stage."""
    text = job.get("maxCostUSD")
    stage_cap = parse_usd(text) if isinstance(text, str) else None
    if cap is None or stage_cap is None or stage_cap < cap:
        return
    how = "exceeds" if stage_cap > cap else "equals"
    c.add(at + ("maxCostUSD",), f"the stage cap {text} {how} the pipeline's maxCostUSD "
          f"{cap}: a stage can only set a lower maxCostUSD of its own (or leave it out)")


def _check_sweep(c: _Collector, m: Manifest) -> None:
    spec = m.spec
    _check_run_fields(c, spec, ("spec",))
    template = spec.get("template") if isinstance(spec.get("template"), dict) else {}
    target = template.get("kind")
    if isinstance(target, str) and target != Kind.JOB:
        c.add(("spec", "template", "kind"), f"Unsupported: a Sweep runs Job templates; a "
              f"{target} as the target is not available yet (use kind: Job)")
    job = template.get("spec") if isinstance(template.get("spec"), dict) else {}
    _check_job_spec(c, job, ("spec", "template", "spec"))
    _check_env(c, job, ("spec", "template", "spec"))
    matrix = spec.get("matrix") if isinstance(spec.get("matrix"), dict) else {}
    count = sweep_cell_count(spec) if _matrix_shape_ok(matrix, spec) else 0
    if count > MAX_SWEEP_CELLS:
        c.add(("spec", "matrix"), f"the matrix has {count} cells (the product of the non-empty "
              f"dimensions times repetitions); at most {MAX_SWEEP_CELLS} are allowed")
    allowed = _get(job, "placement", "regions")
    if isinstance(allowed, list):
        for i, region in enumerate(matrix.get("regions") or []):
            if region not in allowed:
                c.add(("spec", "matrix", "regions", i), f"{show(region)} is not within the "
                      f"template's placement.regions ({', '.join(map(str, allowed))})")
    if m.name and count and count <= MAX_SWEEP_CELLS:
        last = cell_job_name(m.name, count - 1)
        if len(last) > MAX_NAME or not _NAME.match(last):
            c.add(("metadata", "name"), f"cell Job names such as {last!r} would be longer than "
                  f"{MAX_NAME} characters: shorten the Sweep's name")


def _matrix_shape_ok(matrix: dict, spec: dict) -> bool:
    lists = [matrix.get("gpu"), matrix.get("regions"), *(matrix.get("params") or {}).values()]
    return all(v is None or isinstance(v, list) for v in lists) and isinstance(
        matrix.get("params", {}), dict) and isinstance(spec.get("repetitions", 1), int)


_RULES = {Kind.JOB: _check_job, Kind.PIPELINE: _check_pipeline, Kind.SWEEP: _check_sweep}


# --- entry points ------------------------------------------------------------------------


def validate_manifest(manifest: Manifest) -> list[Problem]:
    """Every problem of one manifest: kind, schema, then the kind's rules."""
    c = _Collector(manifest)
    kind = manifest.body.get("kind")
    if kind not in KINDS:
        if manifest.body.get("apiVersion") != API_VERSION:
            c.add(("apiVersion",), f"{show(manifest.body.get('apiVersion'))} must be "
                  f"{show(API_VERSION)}")
        c.add(("kind",), f"{show(kind)} is not one of {', '.join(KINDS)}")
        return c.problems
    for path, message, key in schema_problems(manifest.kind, manifest.body):
        c.add(path, message, key=key)
    _RULES[Kind(kind)](c, manifest)
    return c.problems


def duplicate_problems(manifests: list[Manifest]) -> list[Problem]:
    """Two documents with the same kind and name in one tree, naming both places."""
    first: dict[tuple[str, str], Manifest] = {}
    problems = []
    for m in manifests:
        if not m.kind or not m.name:
            continue
        other = first.setdefault((m.kind, m.name), m)
        if other is not m:
            problems.append(Problem(
                m.file, m.doc.line_of(("metadata", "name")), m.kind, m.name, "metadata.name",
                f"{m.label} is defined twice: in {other.file}:{other.line} and "
                f"{m.file}:{m.line}"))
    return problems


def manifests_from_documents(documents: list[Document]) -> tuple[list[Manifest], list[Problem]]:
    manifests, problems = [], []
    for doc in documents:
        if isinstance(doc.data, dict):
            manifests.append(Manifest(doc))
        else:
            problems.append(Problem(doc.file, doc.line, "", "", "", f"document {doc.index + 1} "
                                    f"is a {json_type(doc.data)}; a manifest is a mapping with "
                                    "apiVersion, kind, metadata and spec"))
    return manifests, problems


def validate_file(name: str, content: bytes) -> tuple[list[Manifest], list[Problem]]:
    """The manifests of one file and their own problems (duplicates across files aside)."""
    try:
        documents = load_documents(name, content)
    except ManifestError as e:
        return [], [Problem(e.file, e.line, "", "", "", e.message)]
    manifests, problems = manifests_from_documents(documents)
    for m in manifests:
        problems.extend(validate_manifest(m))
    if not problems:
        # Lines are only needed to report problems: drop the node trees of valid files,
        # which over a large tree cost more in garbage collection than parsing does.
        manifests = [m.without_nodes() for m in manifests]
    return manifests, problems


def validate_files(files: Iterable[tuple[str, bytes]]) -> Result:
    """Load and validate every file; all problems of all files in one result."""
    result = Result()
    with bulk_loading():
        for name, content in files:
            manifests, problems = validate_file(name, content)
            result.manifests.extend(manifests)
            result.problems.extend(problems)
    result.problems.extend(duplicate_problems(result.manifests))
    result.problems.sort()
    return result


def resource_summary(manifest: Manifest) -> dict[str, Any]:
    """The `resources` entry of `validate -o json`, with the derived GPU memory floor."""
    entry: dict[str, Any] = {"kind": manifest.kind, "name": manifest.name,
                             "file": manifest.file, "line": manifest.line}
    if manifest.kind == Kind.JOB:
        floor = effective_min_memory(manifest.spec, manifest.annotations)
        if floor:
            entry["effectiveMinMemory"] = floor
    return entry
