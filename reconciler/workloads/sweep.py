"""The Sweep controller: one Job `<sweep>-<index>` per cell of the matrix, at most
`maxParallel` at once in index order; failed cells never stop the others, and the
report names the cheapest and the fastest cell."""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

from nodus_gitops.composite import cell_job_name, sweep_cells
from nodus_gitops.floor.identity import LABEL_SWEEP
from nodus_gitops.floor.phases import Phase, Reason
from nodus_gitops.workloads import pricing
from nodus_gitops.workloads.base import Child, Controller, Record, Views, held_by_budget

DEFAULT_MAX_PARALLEL = 4


class SweepController(Controller):
    kind = "Sweep"
    child_label = LABEL_SWEEP
    default_max_parallel = DEFAULT_MAX_PARALLEL

    def children(self, record: Record) -> list[Child]:
        template = copy.deepcopy(record.spec.get("template", {}).get("spec", {}))
        children = []
        for cell in sweep_cells(record.spec):
            spec = copy.deepcopy(template)
            if cell.gpu is not None:
                spec.setdefault("resources", {})["gpu"] = cell.gpu
            if cell.region is not None:
                spec.setdefault("placement", {})["regions"] = [cell.region]
            if cell.params:
                spec["env"] = _with_params(spec.get("env"), cell.params)
            children.append(Child(str(cell.index), cell_job_name(record.key.name, cell.index),
                                  spec))
        return children

    def child_metadata(self, record: Record) -> tuple[dict[str, str], dict[str, str]]:
        """The template's labels and annotations, on every cell Job (the schema's
        template.metadata)."""
        meta = record.spec.get("template", {}).get("metadata") or {}
        return dict(meta.get("labels") or {}), dict(meta.get("annotations") or {})

    def status(self, record: Record, children: list[Child],
               observed: Views) -> tuple[str, str | None, str | None, dict[str, Any]]:
        cells = []
        for cell, child in zip(sweep_cells(record.spec), children, strict=True):
            o = observed[child.id]
            st = o.status if o else {}
            units_per_second = st.get("unitsPerSecond")
            cells.append({
                "index": cell.index, "job": child.job, "gpu": cell.gpu, "region": cell.region,
                "params": cell.params, "phase": self.child_phase(record, child, o),
                "created": self.created(record, child),
                "costUSD": o.cost_usd if o else "0", "wallSeconds": st.get("wallSeconds"),
                "unitsPerSecond": units_per_second if st.get("units") else None,
                **({"reason": o.reason} if o and o.reason else {}),
            })
        succeeded = [c for c in cells if c["phase"] == Phase.SUCCEEDED]
        best: dict[str, Any] = {}
        if succeeded:
            best["byCost"] = min(succeeded, key=lambda c: (Decimal(c["costUSD"]),
                                                           c["index"]))["index"]
            fast = [c for c in succeeded if c["unitsPerSecond"]]
            if fast:
                best["byThroughput"] = max(fast, key=lambda c: (c["unitsPerSecond"],
                                                                -c["index"]))["index"]
        finished = [c for c in cells if c["phase"] in (Phase.SUCCEEDED, Phase.FAILED,
                                                        Phase.CANCELLED)]
        failed = [c["index"] for c in cells if c["phase"] == Phase.FAILED]
        if len(finished) < len(cells):
            running = any(c["phase"] in (Phase.RUNNING, Phase.PROVISIONING, Phase.RECOVERING)
                          for c in cells)
            phase, reason, message = (Phase.RUNNING if running else Phase.QUEUED), None, None
            if not running and (held := held_by_budget(cells, "cell")) is not None:
                phase, reason, message = held
        elif record.cancelled and any(c["phase"] == Phase.CANCELLED for c in cells):
            # the cancel stopped something; a Sweep done before it keeps its ending
            phase, reason, message = Phase.CANCELLED, None, None
        elif failed:
            phase, reason = Phase.FAILED, Reason.CELLS_FAILED
            message = f"{len(failed)} of {len(cells)} cells failed: " + ", ".join(
                cell_job_name(record.key.name, i) for i in failed)
        else:
            phase, reason, message = Phase.SUCCEEDED, None, None
        status = {"cells": cells, "best": best, "progress": f"{len(finished)}/{len(cells)}"}
        estimate = self._total_estimate(children)
        if estimate is not None:
            status["estimate"] = {"costUSD": estimate}
        return phase, reason, message, status

    def _total_estimate(self, children: list[Child]) -> str | None:
        """Over every cell; None when a cell has neither expectedDuration nor timeout."""
        total = Decimal(0)
        for child in children:
            one = pricing.estimate(self.inner, child.spec)
            if one is None:
                return None
            total += one
        return f"{total:.2f}"

def _with_params(env: Any, params: dict[str, str]) -> Any:
    """The template's env with the cell's NODUS_PARAM_<NAME> variables, in whichever form
    the template wrote it (a mapping, or the Kubernetes list of name and value)."""
    values = {f"NODUS_PARAM_{k}": v for k, v in params.items()}
    if isinstance(env, list):
        kept = [e for e in env if not (isinstance(e, dict) and e.get("name") in values)]
        return kept + [{"name": k, "value": v} for k, v in values.items()]
    return {**dict(env or {}), **values}
