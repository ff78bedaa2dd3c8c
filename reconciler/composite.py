"""How composite kinds expand into Jobs: Pipeline stages and Sweep cells.

Validation, the plan and the workload controllers all use these functions, so the Job
a reviewer is told about is the Job that runs.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass
from typing import Any

from nodus_gitops.envvars import EnvError, env_mapping


def merge_defaults(defaults: dict[str, Any] | None, template: dict[str, Any] | None,
                   *, top: bool = True) -> dict:
    """A stage's Job spec: objects merge field by field, a value (or list) the stage sets
    wins over the default, a list replaces the default list. `env` merges by name in
    either of its forms (a mapping or the Kubernetes list)."""
    merged = copy.deepcopy(defaults) if isinstance(defaults, dict) else {}
    for key, value in (template or {}).items():
        if top and key == "env" and "env" in merged:
            merged[key] = _merged_env(merged["env"], value)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_defaults(merged[key], value, top=False)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _merged_env(default: Any, stage: Any) -> Any:
    try:
        return env_mapping(default) | env_mapping(stage)
    except EnvError:
        return copy.deepcopy(stage)  # validation names the problem; the stage's value wins


def stage_job_name(pipeline: str, stage: str) -> str:
    return f"{pipeline}-{stage}"


def cell_job_name(sweep: str, index: int) -> str:
    return f"{sweep}-{index}"


@dataclass(frozen=True)
class Cell:
    """One combination of a Sweep's matrix."""

    index: int
    gpu: Any | None
    region: str | None
    params: dict[str, str]
    repetition: int


def sweep_cells(spec: dict[str, Any]) -> list[Cell]:
    """The cells in the platform's fixed order: GPU types vary slowest, then regions,
    then parameters by name, and repetitions fastest."""
    matrix = spec.get("matrix") or {}
    gpus = list(matrix.get("gpu") or []) or [None]
    regions = list(matrix.get("regions") or []) or [None]
    params = matrix.get("params") or {}
    names = sorted(n for n, values in params.items() if values)
    value_lists = [list(params[n]) for n in names]
    repetitions = spec.get("repetitions") or 1
    cells = []
    combos = itertools.product(gpus, regions, itertools.product(*value_lists), range(repetitions))
    for index, (gpu, region, values, repetition) in enumerate(combos):
        cells.append(Cell(index, gpu, region, dict(zip(names, values, strict=True)), repetition))
    return cells


def sweep_cell_count(spec: dict[str, Any]) -> int:
    """The product of the non-empty dimensions times repetitions, without expanding."""
    matrix = spec.get("matrix") or {}
    count = max(len(matrix.get("gpu") or []), 1) * max(len(matrix.get("regions") or []), 1)
    for values in (matrix.get("params") or {}).values():
        count *= max(len(values or []), 1)
    repetitions = spec.get("repetitions") or 1
    return count * (repetitions if isinstance(repetitions, int) else 1)


def find_cycle(graph: dict[str, list[str]]) -> list[str] | None:
    """A dependency cycle as the path that closes it (`[a, b, a]`), or None."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in graph.get(node, []):
            if dep not in graph:
                continue
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if state.get(dep) is None and (cycle := visit(dep)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in graph:
        if node not in state and (cycle := visit(node)):
            return cycle
    return None
