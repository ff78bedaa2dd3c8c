"""How resources and plans are printed: tables, JSON and YAML for `get`, `describe` and
`plan`, from the state store's records."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.floor.markdown_text import visible
from nodus_gitops.floor.problems import Problem
from nodus_gitops.floor.quantities import parse_usd
from nodus_gitops.floor.results import ActionType
from nodus_gitops.state.records import EventRecord, InventoryRecord

if TYPE_CHECKING:  # a listing never loads the planner, nor YAML unless it prints YAML
    from nodus_gitops.plan import Plan


def resource_object(r: InventoryRecord, parent: dict[str, str] | None = None) -> dict[str, Any]:
    """The object `get -o json` prints and the JSON API serves for one resource; `parent`
    names the Pipeline or Sweep whose stage or cell a Job is (None for what Git declares)."""
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
        "parent": parent,
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


_CENT = Decimal("0.01")


def money(value: str | float | None) -> str:
    """Dollars as `get` and the dashboard show them: cents (`$0.31`), and an amount below a
    cent with two significant digits (`$0.0031`), never `<$0.01`; `-` when not an amount."""
    amount = _amount(value or "0")
    if amount is None:
        return "-"
    if 0 < abs(amount) < _CENT:
        shown = amount.quantize(Decimal(1).scaleb(amount.adjusted() - 1)).normalize()
        if abs(shown) < _CENT:  # 0.00999 rounds to a cent: shown as one below
            return f"${shown:f}"
    return f"${amount:.2f}"


def _amount(value: object) -> Decimal | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)
    return parse_usd(value) if isinstance(value, str) else None


def job_gpu(r: InventoryRecord) -> str:
    """The GPU a Job runs on: the backend's `status.gpu`, or the types of the devices in
    `status.gpus` (what the local backend writes) in the request form, `L4` or `H100:8`."""
    status = r.status or {}
    if isinstance(status.get("gpu"), str):
        return status["gpu"]
    types = [(g.get("type") or g.get("name")) if isinstance(g, dict) else g
             for g in status.get("gpus") or []]
    types = [str(t) for t in types if t]
    if not types:
        return "-"
    if len(set(types)) == 1:
        return types[0] if len(types) == 1 else f"{types[0]}:{len(types)}"
    return ",".join(dict.fromkeys(types))


def job_attempt(r: InventoryRecord) -> str:
    """The attempt a Job is on: `status.attempt`; else `status.attempts` when the Job has one
    index (it counts the runs of every index, so it is no attempt of an Indexed Job)."""
    status = r.status or {}
    attempt = status.get("attempt")
    if attempt is None and _completions(r) == 1:
        attempt = status.get("attempts")
    return str(attempt) if isinstance(attempt, int) and attempt > 0 else "-"


def job_offering(r: InventoryRecord) -> str:
    offering = (r.status or {}).get("offering")
    if isinstance(offering, dict):
        offering = offering.get("name")
    return str(offering) if offering else "-"


def job_rate(r: InventoryRecord) -> str:
    """The offering's rate, `status.rateUSDPerHour`, as `$0.80/h`."""
    rate = (r.status or {}).get("rateUSDPerHour")
    return f"{money(rate)}/h" if _amount(rate) is not None else "-"


def job_progress(r: InventoryRecord) -> str:
    """The progress the backend reports (`status.progress`), else indexes done of all."""
    status = r.status or {}
    if isinstance(status.get("progress"), str):
        return status["progress"]
    succeeded = status.get("succeeded")
    return f"{succeeded if isinstance(succeeded, int) else 0}/{_completions(r)}"


def _completions(r: InventoryRecord) -> int:
    spec = (r.manifest or {}).get("spec")
    completions = spec.get("completions") if isinstance(spec, dict) else None
    return completions if isinstance(completions, int) and completions > 0 else 1


def progress(r: InventoryRecord) -> str:
    """STAGES for Pipelines and CELLS for Sweeps, as the seeds print them; for a Job its
    completed indexes (`0-2,5`). A listing of several kinds and the dashboard show it."""
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


# Colour, for a terminal only (`colour_wanted`): what a reader scans a listing for, how a
# resource or a sync ended. SGR codes: green, red, yellow, cyan, dim.
_SGR = {"good": "32", "bad": "31", "held": "33", "busy": "36", "quiet": "2"}
PHASE_COLOURS = {"Succeeded": "good", "Failed": "bad", "CreateFailed": "bad",
                 "Running": "busy", "Provisioning": "busy", "Recovering": "held",
                 "Queued": "held", "Suspending": "held", "Suspended": "held",
                 "Cancelling": "quiet", "Cancelled": "quiet"}
RESULT_COLOURS = {"applied": "good", "noop": "good", "valid": "good", "invalid": "bad",
                  "error": "bad", "partial": "bad", "failed": "bad", "blocked": "held"}


def colour_wanted(stream: Any) -> bool:
    """Whether `stream` shows colour: a terminal, NO_COLOR unset or empty (no-color.org),
    and a TERM other than `dumb`. A pipe or a file never gets escape sequences."""
    import os

    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and not os.environ.get("NO_COLOR") and os.environ.get(
        "TERM") != "dumb"


def paint(text: str, colours: Mapping[str, str], colour: bool = True) -> str:
    """`text` in the colour `colours` gives it (unchanged without one, or `colour` off)."""
    code = _SGR.get(colours.get(text, "")) if colour else None
    return f"\x1b[{code}m{text}\x1b[0m" if code else text


def table(rows: list[list[str]], headers: bool = True,
          painted: Mapping[int, Mapping[str, str]] | None = None) -> str:
    """Columns padded to their widest cell. Without `headers` the first row (the titles)
    is left out, the columns still as wide as it made them, as `kubectl --no-headers`.
    `painted`: column index -> the colours of its cells (not the titles'), applied after
    the padding so that colour never moves a column."""
    if not rows:
        return ""
    # a cell is data (a file name, a reason): a control in it must not drive the terminal
    rows = [row if n == 0 else [visible(c) for c in row] for n, row in enumerate(rows)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    painted = painted or {}

    def cell(i: int, text: str, width: int, title: bool) -> str:
        shown = text if title or i not in painted else paint(text, painted[i])
        return shown + " " * (width - len(text))

    return "\n".join("   ".join(cell(i, c, w, n == 0) for i, (c, w) in enumerate(
        zip(row, widths, strict=True))).rstrip() for n, row in enumerate(rows)
        if headers or n > 0)


def best_cost(r: InventoryRecord) -> str:
    """The seeds' BEST-COST column: the index of the cheapest succeeded cell."""
    best = (r.status or {}).get("best") or {}
    return str(best["byCost"]) if "byCost" in best else "-"


Column = tuple[str, Callable[[InventoryRecord], str]]
_COST: Column = ("COST", lambda r: money(r.cost_usd))
_AGE: Column = ("AGE", lambda r: age(r.created_at))
# The seeds' `get` columns per kind. A Job: "the phase, the GPU, the attempt, the cost so far
# and the age (-o wide adds the offering, its rate and progress)"; a Pipeline: STAGES; a
# Sweep: CELLS and BEST-COST. A listing of several kinds names the kind, with PROGRESS.
_COLUMNS: dict[str | None, list[Column]] = {
    "Job": [("GPU", job_gpu), ("ATTEMPT", job_attempt), _COST, _AGE],
    "Pipeline": [("STAGES", progress), _COST, _AGE],
    "Sweep": [("CELLS", progress), _COST, ("BEST-COST", best_cost), _AGE],
    None: [("PROGRESS", progress), _COST, _AGE],
}
_WIDE: dict[str | None, list[Column]] = {
    "Job": [("OFFERING", job_offering), ("RATE", job_rate), ("PROGRESS", job_progress)],
}
# What -o wide adds for every kind: where the resource comes from.
_SOURCE: list[Column] = [("REASON", lambda r: r.reason or "-"),
                         ("COMMIT", lambda r: (r.source_commit or "-")[:12]),
                         ("FILE", lambda r: r.source_file or "-")]


def resources_table(records: list[InventoryRecord], wide: bool = False,
                    parents: Mapping[ResourceKey, ResourceKey] | None = None,
                    headers: bool = True, colour: bool = False) -> str:
    """The `get` table. `parents` maps a stage's or cell's Job to its Pipeline or Sweep:
    when any listed row has one, a PARENT column names it (`pipeline/te`), as kubectl
    shows an owner. `headers=False`: the rows alone (`--no-headers`); `colour`: phases
    coloured, for a terminal."""
    kinds = {r.key.kind for r in records}
    only = next(iter(kinds)) if len(kinds) == 1 else None
    columns: list[Column] = [("NAME", lambda r: r.key.name), ("PHASE", lambda r: r.phase or "-"),
                             *_COLUMNS.get(only, _COLUMNS[None])]
    if only is None:
        columns.insert(0, ("KIND", lambda r: r.key.kind))
    parents = parents or {}
    if any(r.key in parents for r in records):
        columns.append(("PARENT", lambda r: _short(parents.get(r.key))))
    if wide:
        columns += [*_WIDE.get(only, []), *_SOURCE]
    phase = [title for title, _ in columns].index("PHASE")
    return table([[title for title, _ in columns]]
                 + [[cell(r) for _, cell in columns] for r in records], headers,
                 painted={phase: PHASE_COLOURS} if colour else None)


def resource_names(records: list[InventoryRecord]) -> str:
    """`get -o name`: `kind/name` a line, what `describe`, `logs` and `get` take back."""
    return "\n".join(_short(r.key) for r in records)


# --sort-by: a column, or a field path into the document `get -o json` prints.
_PLAIN_COLUMNS: dict[str, Callable[[InventoryRecord], str]] = {
    "KIND": lambda r: r.key.kind, "NAME": lambda r: r.key.name,
    "PHASE": lambda r: r.phase or "-",
    **{title: cell for columns in (*_COLUMNS.values(), *_WIDE.values(), _SOURCE)
       for title, cell in columns}}
# Columns whose text does not sort as its value: the amount, not "$10.00" before "$9.00";
# the age, youngest first as the AGE column reads, from the creation time.
_VALUE_COLUMNS: dict[str, Callable[[InventoryRecord], Any]] = {
    "COST": lambda r: _amount(r.cost_usd),
    "RATE": lambda r: _amount((r.status or {}).get("rateUSDPerHour")),
    "AGE": lambda r: -r.created_at.timestamp() if r.created_at else None,
}
# The top-level fields of `get -o json`'s documents, read from one (so the two agree).
SORT_FIELDS = tuple(resource_object(InventoryRecord(ResourceKey("Job", "p", "n"), "", {}, "")))
Sorter = Callable[[InventoryRecord, Mapping[str, Any]], tuple]


def sort_key(text: str) -> Sorter:
    """What `--sort-by TEXT` sorts on: a column (`cost`, `AGE`, any title of a `get`
    table, the PARENT column too) or a field path (`.status.phase`, `{.costUSD}`), as a
    key of one resource's record and its document; numbers by value, missing last.
    ValueError naming what is allowed when TEXT is neither."""
    title = text.strip().upper()
    if title == "PARENT":
        return lambda _r, obj: _ordered(_parent_name(obj.get("parent")))
    if title in _VALUE_COLUMNS:
        return lambda r, _obj: _ordered(_VALUE_COLUMNS[title](r))
    if title in _PLAIN_COLUMNS:
        return lambda r, _obj: _ordered(_PLAIN_COLUMNS[title](r))
    path = text.strip().removeprefix("{").removesuffix("}").strip()
    steps = path.removeprefix(".").split(".") if path.startswith(".") else []
    if not steps or steps[0] not in SORT_FIELDS or not all(steps):
        columns = sorted({*_PLAIN_COLUMNS, "PARENT"})
        raise ValueError(
            f"{text!r} is neither a column nor a field: use a column ("
            f"{', '.join(c.lower() for c in columns)}) or a field path of `get -o json` ("
            f"{', '.join('.' + f for f in SORT_FIELDS)}; .status.phase reaches inside)")
    return lambda _r, obj: _ordered(_field(obj, steps))


def _parent_name(parent: Any) -> str | None:
    return f"{parent.get('kind', '')}/{parent.get('name', '')}".lower() if isinstance(
        parent, dict) else None


def _field(obj: Any, steps: list[str]) -> Any:
    for step in steps:
        obj = obj.get(step) if isinstance(obj, Mapping) else None
    return obj


def _ordered(value: Any) -> tuple:
    """A sort key that orders numbers (and amounts written as text) by value, then
    times, then text; what is missing (None, "-", "") sorts last."""
    if value is None or value in ("-", ""):
        return (1,)
    if isinstance(value, bool):
        return (0, 2, str(value).lower())
    if isinstance(value, int | float | Decimal):
        return (0, 0, Decimal(str(value)))
    if isinstance(value, str):
        number = _amount(value)  # costUSD is text: "10.00" after "9.50"
        return (0, 0, number) if number is not None else (0, 1, value)
    return (0, 2, json.dumps(value, sort_keys=True, default=str))


def _short(key: ResourceKey | None) -> str:
    return f"{key.kind.lower()}/{key.name}" if key else "-"


def dump(objects: Any, fmt: str) -> str:
    if fmt == "yaml":
        import yaml

        return yaml.safe_dump(objects, sort_keys=False, allow_unicode=True)
    return json.dumps(objects, indent=2, ensure_ascii=False, default=str)


def sandbox_text(r: InventoryRecord) -> str | None:
    """What contained a Job's runs, as its backend recorded it: the Sandboxed condition's
    message once a run was prepared (`none: the command runs as the reconciler's own
    user ...`, `bubblewrap: runs as ...`), else the backend's setting, not yet used; None
    where the backend records neither."""
    status = r.status or {}
    for condition in status.get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == "Sandboxed":
            text = str(condition.get("message") or condition.get("reason") or "-")
            return text.removeprefix("sandbox: ")  # the line is titled Sandbox already
    if isinstance(status.get("sandbox"), str):
        return f"{status['sandbox']} (the backend's setting; no run has been prepared yet)"
    return None


def backend_events(events: list[dict[str, Any]], key: ResourceKey) -> list[EventRecord]:
    """A backend's own events of one Job (`providers.base.HasEvents`: time, type, reason,
    message) as event records, beside the reconciler's."""
    out = []
    for e in events:
        at = e.get("time")
        if not isinstance(at, int | float):
            continue
        out.append(EventRecord(0, key, datetime.fromtimestamp(at, UTC), str(e.get("type") or
                               "Normal"), str(e.get("reason") or "-"), str(e.get("message") or "")))
    return out


def describe(r: InventoryRecord, events: list[EventRecord], parent: str | None = None,
             notes: list[str] | None = None, colour: bool = False) -> str:
    """`describe`: the resource, its status and its events (the reconciler's and its
    backend's, oldest first); `parent` (`Pipeline/te (stage train)`) for a stage's or a
    cell's Job, `notes` for what could not be read; `colour`: the phase coloured."""
    lines = [f"Name:        {r.key.name}", f"Kind:        {r.key.kind}",
             f"Project:     {r.key.project}"]
    if parent:
        lines.append(f"Parent:      {parent}")
    lines.append(f"Phase:       {paint(r.phase or '-', PHASE_COLOURS, colour)}")
    if r.deleted:
        lines.append("Gone:        the backend no longer has it (finished and removed)")
    if r.reason:
        lines.append(f"Reason:      {r.reason}")
    if r.message:
        lines.append(f"Message:     {visible(r.message)}")
    if r.fix:
        lines.append(f"Fix:         {r.fix}")
    sandbox = sandbox_text(r) if r.key.kind == "Job" else None
    if sandbox:
        lines.append(f"Sandbox:     {sandbox}")
    lines += [f"Cost:        {money(r.cost_usd)}", f"Source:      {visible(r.source_file)} @ "
              f"{(r.source_commit or '-')[:12]}", f"Spec hash:   {r.spec_hash or '-'}",
              f"Created:     {_iso(r.created_at)}", f"Finished:    {_iso(r.finished_at) or '-'}"]
    lines += [f"Note:        {note}" for note in notes or []]
    if r.status:
        import yaml

        lines.append("Status:")
        lines += ["  " + line for line in yaml.safe_dump(
            r.status, sort_keys=False, allow_unicode=True).splitlines()]
    lines.append("Events:")
    if not events:
        lines.append("  <none>")
    for e in sorted(events, key=lambda e: e.at):
        lines.append(f"  {e.at.strftime('%Y-%m-%d %H:%M:%S')}  {e.type:<7}  {e.reason:<14}  "
                     f"{visible(e.message)}")
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
        for c in (change.as_dict() for change in a.changes):
            lines.append(f"        {c['path']}: {json.dumps(c['old'])} -> {json.dumps(c['new'])}")
    counts = plan.summary()
    lines.append(", ".join(f"{n} {k}" for k, n in counts.items() if n) or "no resources")
    return "\n".join(lines)
