"""How resources and plans are printed: tables, JSON and YAML for `get`, `describe` and
`plan`, from the state store's records."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import yaml

from reconciler.plan import ActionType, Change, Plan
from reconciler.validation import Problem
from state.records import EventRecord, InventoryRecord


def resource_object(r: InventoryRecord) -> dict[str, Any]:
    """The object `get -o json` prints and the JSON API serves for one resource."""
    return {
        "kind": r.key.kind,
        "name": r.key.name,
        "project": r.key.project,
        "phase": r.phase,
        "reason": r.reason,
        "message": r.message,
        "fix": r.fix,
        "costUSD": r.cost_usd,
        "sourceCommit": r.source_commit,
        "file": r.source_file,
        "specHash": r.spec_hash,
        "createdAt": _iso(r.created_at),
        "finishedAt": _iso(r.finished_at),
        "status": r.status,
    }


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def age(since: datetime | None, now: datetime | None = None) -> str:
    if since is None:
        return "-"
    now = now or datetime.now(UTC)
    seconds = max(0, int((now - since).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def money(value: str | None) -> str:
    amount = Decimal(value or "0")
    return "<$0.01" if 0 < amount < Decimal("0.01") else f"${amount:.2f}"


def progress(r: InventoryRecord) -> str:
    """The seeds' per-kind column: STAGES for Pipelines, CELLS for Sweeps, INDEXES for Jobs."""
    status = r.status or {}
    if r.key.kind == "Pipeline":
        stages = status.get("stages") or []
        done = sum(1 for s in stages if s.get("phase") == "Succeeded")
        return f"{done}/{len(stages)}" if stages else "-"
    if r.key.kind == "Sweep":
        cells = status.get("cells") or []
        done = sum(1 for c in cells if c.get("phase") in ("Succeeded", "Failed", "Cancelled"))
        return f"{done}/{len(cells)}" if cells else "-"
    return status.get("completedIndexes") or "-"


def table(rows: list[list[str]]) -> str:
    if not rows:
        return ""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                     for row in rows)


def best_cost(r: InventoryRecord) -> str:
    """The seeds' BEST-COST column: the index of the cheapest succeeded cell."""
    best = (r.status or {}).get("best") or {}
    return str(best["byCost"]) if "byCost" in best else "-"


# The seeds' `get` columns per kind; a mixed listing uses PROGRESS for all three.
_KIND_COLUMNS = {"Pipeline": "STAGES", "Sweep": "CELLS", "Job": "INDEXES"}


def resources_table(records: list[InventoryRecord], wide: bool = False) -> str:
    kinds = {r.key.kind for r in records}
    only = next(iter(kinds)) if len(kinds) == 1 else None
    header = ["NAME", "PHASE", _KIND_COLUMNS.get(only or "", "PROGRESS"), "COST"]
    if only is None:
        header.insert(0, "KIND")
    if only == "Sweep":
        header.append("BEST-COST")
    header.append("AGE")
    if wide:
        header += ["REASON", "COMMIT", "FILE"]
    rows = [header]
    for r in records:
        row = [r.key.name, r.phase or "-", progress(r), money(r.cost_usd)]
        if only is None:
            row.insert(0, r.key.kind)
        if only == "Sweep":
            row.append(best_cost(r))
        row.append(age(r.created_at))
        if wide:
            row += [r.reason or "-", (r.source_commit or "-")[:12], r.source_file or "-"]
        rows.append(row)
    return table(rows)


def dump(objects: Any, fmt: str) -> str:
    if fmt == "yaml":
        return yaml.safe_dump(objects, sort_keys=False, allow_unicode=True)
    return json.dumps(objects, indent=2, ensure_ascii=False, default=str)


def describe(r: InventoryRecord, events: list[EventRecord]) -> str:
    lines = [f"Name:        {r.key.name}", f"Kind:        {r.key.kind}",
             f"Project:     {r.key.project}", f"Phase:       {r.phase or '-'}"]
    if r.reason:
        lines.append(f"Reason:      {r.reason}")
    if r.message:
        lines.append(f"Message:     {r.message}")
    if r.fix:
        lines.append(f"Fix:         {r.fix}")
    lines += [f"Cost:        {money(r.cost_usd)}", f"Source:      {r.source_file} @ "
              f"{(r.source_commit or '-')[:12]}", f"Spec hash:   {r.spec_hash}",
              f"Created:     {_iso(r.created_at)}", f"Finished:    {_iso(r.finished_at) or '-'}"]
    if r.status:
        lines.append("Status:")
        lines += ["  " + line for line in yaml.safe_dump(
            r.status, sort_keys=False, allow_unicode=True).splitlines()]
    lines.append("Events:")
    if not events:
        lines.append("  <none>")
    for e in reversed(events):
        lines.append(f"  {e.at.strftime('%Y-%m-%d %H:%M:%S')}  {e.type:<7}  {e.reason:<14}  "
                     f"{e.message}")
    return "\n".join(lines)


_SYMBOL = {ActionType.CREATE: "+", ActionType.PATCH: "~", ActionType.REPLACE: "-/+",
           ActionType.DELETE: "-", ActionType.BLOCKED: "!", ActionType.NOOP: "="}


def plan_text(commit: str, plan: Plan, problems: list[Problem]) -> str:
    lines = [f"Plan for commit {commit[:12]}:"]
    if problems:
        lines.append(f"{len(problems)} problems; nothing from this commit would be applied:")
        lines += [f"  {p}" for p in problems]
        return "\n".join(lines)
    for a in plan.actions:
        if a.action == ActionType.NOOP and not a.reason:
            continue
        lines.append(f"  {_SYMBOL[a.action]:>3} {a.action.value:<8} {a.key.kind}/{a.key.name}"
                     f"  ({a.file})" + (f": {a.reason}" if a.reason else ""))
        for c in map(Change.as_dict, a.changes):
            lines.append(f"        {c['path']}: {json.dumps(c['old'])} -> {json.dumps(c['new'])}")
    counts = plan.summary()
    lines.append(", ".join(f"{n} {k}" for k, n in counts.items() if n) or "no resources")
    return "\n".join(lines)
