"""The Sweep controller: one Job `<sweep>-<index>` per cell of the matrix, at most
`maxParallel` at once in index order; failed cells never stop the others, and the
report names the cheapest and the fastest cell."""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

from providers.base import Observed
from reconciler.composite import cell_job_name, sweep_cells
from reconciler.identity import LABEL_SWEEP
from reconciler.phases import Phase, Reason
from reconciler.workloads.base import Child, Controller, Record

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
                env = dict(spec.get("env") or {})
                env.update({f"NODUS_PARAM_{k}": v for k, v in cell.params.items()})
                spec["env"] = env
            children.append(Child(str(cell.index), cell_job_name(record.key.name, cell.index),
                                  spec))
        return children

    def status(self, record: Record, children: list[Child],
               observed: dict[str, Observed | None]) -> tuple[str, str | None, str | None,
                                                           dict[str, Any]]:
        cells = []
        for cell, child in zip(sweep_cells(record.spec), children, strict=True):
            o = observed[child.id]
            st = o.status if o else {}
            units_per_second = st.get("unitsPerSecond")
            cells.append({
                "index": cell.index, "job": child.job, "gpu": cell.gpu, "region": cell.region,
                "params": cell.params, "phase": o.phase if o else "Pending",
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
            running = any(c["phase"] in (Phase.RUNNING, Phase.PROVISIONING) for c in cells)
            phase, reason, message = (Phase.RUNNING if running else Phase.QUEUED), None, None
        elif record.spec.get("state") == "Cancelled":
            phase, reason, message = Phase.CANCELLED, None, None
        elif failed:
            phase, reason = Phase.FAILED, Reason.CELLS_FAILED
            message = f"{len(failed)} of {len(cells)} cells failed: " + ", ".join(
                cell_job_name(record.key.name, i) for i in failed)
        else:
            phase, reason, message = Phase.SUCCEEDED, None, None
        status = {"cells": cells, "best": best, "progress": f"{len(finished)}/{len(cells)}"}
        estimate = self._estimate(children)
        if estimate is not None:
            status["estimate"] = {"costUSD": estimate}
        return phase, reason, message, status

    def _estimate(self, children: list[Child]) -> str | None:
        estimate = getattr(self.inner, "estimate", None)
        if estimate is None:
            return None
        try:
            total = sum((Decimal(estimate({"kind": "Job", "spec": c.spec})) for c in children),
                        Decimal(0))
        except ArithmeticError:  # "unknown": a cell has neither expectedDuration nor timeout
            return None
        return f"{total:.2f}"
