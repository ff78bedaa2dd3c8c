"""The page of one resource: its phase, reason and fix, how long it waited, ran and took
(`Timing`), its source file and commit, its manifest as the file's own text at that
commit (source_view.py; the stored copy, said to be, when the file cannot be read), its
status, conditions and events, secret-looking values masked throughout; for a Job its
attempts, outputs and log tails; for a Pipeline the stage graph (boxes linking to the
stage Jobs) and the stage table with each stage's durations; for a Sweep the cells, the
best cells, and the cost/throughput chart with a table of its points. Each stage and cell
links to its Job's page (a stage's or a cell's Job has one, with its parent). Also the
log page of a stage or cell Job. What changes while a page is open is marked data-live."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import yaml
from nodus_gitops.floor.errors import NotFoundError
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.floor.phases import is_terminal
from nodus_gitops.floor.redaction import url_without_userinfo
from nodus_gitops.output import money, sandbox_text
from nodus_gitops.state.records import EventRecord, InventoryRecord
from nodus_gitops.web import api, logs, source_view, svg
from nodus_gitops.web.format import commit_link, duration, duration_text, now_text, when
from nodus_gitops.web.html import (
    Safe,
    definition_list,
    esc,
    layout,
    path,
    phase_badge,
    table,
    tag,
    with_query,
)
from nodus_gitops.web.redact import configured_secrets, mask, mask_events, mask_record
from nodus_gitops.workloads.children import find_child, was_created

if TYPE_CHECKING:
    from nodus_gitops.service import Service

MAX_LOG_INDEXES = 8


def moment(value: Any) -> datetime | None:
    """A recorded time (a datetime, or RFC 3339 text as statuses hold it) as an aware
    datetime; None when there is none or it is not a time."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if not isinstance(value, str) or not value:
        return None
    try:
        return moment(datetime.fromisoformat(value.replace("Z", "+00:00")))
    except ValueError:
        return None


@dataclass(frozen=True)
class Timing:
    """When something was created (or became ready to start; None when unknown), started
    and finished, and whether it has ended; its queued, running and total durations follow
    from those (the total from its start when its creation is unknown).
    A duration still growing counts to now; one whose end was never recorded is `-`."""

    created: datetime | None
    started: datetime | None
    finished: datetime | None
    ended: bool

    def _span(self, start: datetime | None, end: datetime | None) -> Safe:
        if start is None or (end is None and self.ended):
            return esc("-")
        return duration(start, end)

    def running_text(self) -> str:
        """The running duration as plain text (`3m 05s`, `-`), for an SVG label."""
        if self.started is None or (self.finished is None and self.ended):
            return "-"
        end = self.finished or datetime.now(UTC)
        return duration_text((end - self.started).total_seconds())

    def queued(self) -> Safe:
        return self._span(self.created, self.started or self.finished)

    def running(self) -> Safe:
        return self._span(self.started, self.finished)

    def total(self) -> Safe:
        return self._span(self.created or self.started, self.finished)

    def facts(self) -> list[tuple[str, Any]]:
        return [("Queued", tag("span", self.queued(), data_field="queued")),
                ("Running", tag("span", self.running(), data_field="running")),
                ("Total", tag("span", self.total(), data_field="total"))]


def record_timing(r: InventoryRecord) -> Timing:
    """A resource's timing: created when its backend says (`status.createdTime`), else
    when it was recorded (unknown when that is after it started); started at
    `status.startTime`, for a Pipeline or Sweep its first stage's or cell's; finished at
    `status.completionTime` or when it was recorded ended."""
    status = r.status or {}
    entries = [e for e in status.get("stages") or status.get("cells") or []
               if isinstance(e, dict)]
    starts = [t for e in entries if (t := moment(e.get("startTime"))) is not None]
    ends = [t for e in entries if (t := moment(e.get("completionTime"))) is not None]
    ended = is_terminal(r.phase)
    finished = moment(status.get("completionTime")) or moment(r.finished_at)
    if finished is None and ended and ends:
        finished = max(ends)
    started = moment(status.get("startTime")) or (min(starts) if starts else None)
    created = moment(status.get("createdTime")) or moment(r.created_at)
    if created is not None and started is not None and started < created:
        created = None  # recorded after its backend started it (adopted): its wait unknown
    return Timing(created=created, started=started, finished=finished if ended else None,
                  ended=ended)


def entry_timing(entry: dict[str, Any], ready: datetime | None) -> Timing:
    """A stage's or a cell's timing from its parent's status entry; `ready` is when it
    could start (its parent's creation, or its last dependency's end)."""
    ended = is_terminal(entry.get("phase"))
    return Timing(created=ready, started=moment(entry.get("startTime")),
                  finished=moment(entry.get("completionTime")) if ended else None,
                  ended=ended)


def stage_timings(r: InventoryRecord) -> dict[str, Timing]:
    """Each stage's timing: it is ready when the Pipeline was created (a first stage) or
    when the last stage it depends on finished."""
    spec_stages = {s.get("name"): s for s in (r.manifest.get("spec") or {}).get("stages") or []
                   if isinstance(s, dict)}
    entries = {e.get("name"): e for e in (r.status or {}).get("stages") or []
               if isinstance(e, dict)}
    created = record_timing(r).created
    out: dict[str, Timing] = {}
    for name, entry in entries.items():
        deps = svg.dependencies(spec_stages.get(name) or {})
        ends = [t for d in deps if (t := moment((entries.get(d) or {}).get("completionTime")))]
        ready = created if not deps else max(ends) if len(ends) == len(deps) else None
        out[str(name)] = entry_timing(entry, ready)
    return out


def _yaml(value: Any) -> Safe:
    text = yaml.safe_dump(value, sort_keys=False, allow_unicode=True, default_flow_style=False)
    return tag("pre", tag("code", text), class_="yaml")


def _size(n: Any) -> str:
    if not isinstance(n, int):
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _api(r: InventoryRecord) -> str:
    return "/api/v1" + path("resources", r.key.kind, r.key.project, r.key.name)


def _logs_page(r: InventoryRecord, job: str) -> str:
    return with_query(path("resources", r.key.kind, r.key.project, r.key.name, "logs"),
                      {"job": job})


def _conditions(status: dict[str, Any]) -> Safe:
    rows = [tag("tr", tag("td", c.get("type")), tag("td", c.get("status")),
                tag("td", c.get("reason")), tag("td", c.get("message")),
                tag("td", when(moment(c.get("lastTransitionTime")))))
            for c in status.get("conditions") or [] if isinstance(c, dict)]
    if not rows:
        return tag("p", "none", class_="muted")
    return table(["Type", "Status", "Reason", "Message", "Since"], rows, class_="conditions")


def _events(events: list[EventRecord]) -> Safe:
    items = [tag("li", when(e.at), " ", tag("span", e.type, class_=f"event-{e.type.lower()}"),
                 " ", tag("strong", e.reason), " ", tag("span", e.message, class_="message"),
                 class_="event")
             for e in events]
    return tag("ol", *items, class_="timeline", data_field="events") if items else tag(
        "p", "none", class_="muted", data_field="events")


def job_page(project: str, entry: dict[str, Any]) -> str | None:
    """The page of a stage's or a cell's Job, once its parent created it."""
    job = str(entry.get("job") or "")
    return path("resources", "Job", project, job) if job and was_created(entry) else None


def _job_link(r: InventoryRecord, entry: dict[str, Any]) -> Safe:
    """A stage's or a cell's Job: a link to its page and to its logs on this page, once
    its parent created it."""
    job = str(entry.get("job") or "")
    href = job_page(r.key.project, entry)
    if href is None:
        return tag("span", job, " ", tag("span", "(not created)", class_="muted"))
    return Safe(tag("a", job, href=href, class_="job") + esc(" · ")
                + tag("a", "logs", href=_logs_page(r, job)))


def _stages(r: InventoryRecord, status: dict[str, Any], timings: dict[str, Timing]) -> Safe:
    rows = []
    for s in status.get("stages") or []:
        if not isinstance(s, dict):
            continue
        t = timings.get(str(s.get("name"))) or entry_timing(s, None)
        rows.append(tag(
            "tr",
            tag("td", s.get("name")), tag("td", _job_link(r, s)),
            tag("td", phase_badge(s.get("phase"))),
            tag("td", money(s.get("costUSD")), class_="num", data_field="cost"),
            tag("td", when(t.started)), tag("td", when(t.finished)),
            tag("td", t.queued(), class_="num", data_field="queued"),
            tag("td", t.running(), class_="num", data_field="running"),
            tag("td", t.total(), class_="num", data_field="total"),
            tag("td", s.get("reason") or "", data_field="reason"),
            data_stage=s.get("name")))
    return table(["Stage", "Job", "Phase", "Cost", "Started", "Finished", "Queued",
                  "Running", "Total", "Reason"], rows, class_="stages", data_live="stages")


def _pipeline(r: InventoryRecord, status: dict[str, Any]) -> list[Safe]:
    timings = stage_timings(r)
    facts = {}
    for s in status.get("stages") or []:
        if isinstance(s, dict) and s.get("name"):
            t = timings.get(str(s["name"])) or entry_timing(s, None)
            facts[str(s["name"])] = svg.StageFacts(
                href=job_page(r.key.project, s), duration=t.running_text(),
                cost=money(s.get("costUSD")))
    graph = svg.pipeline_graph(r.manifest.get("spec") or {}, status, facts)
    # The graph above its table, each as wide as the page: the table has ten columns.
    return [tag("h2", "Stages"),
            tag("figure", graph, class_="graph", data_live="stage-graph"),
            _stages(r, status, timings)]


def _params(params: Any) -> str:
    if not isinstance(params, dict) or not params:
        return "-"
    return ", ".join(f"{k}={v}" for k, v in params.items())


def _number_text(value: Any) -> str:
    return "-" if value is None else str(value)


def _sweep(r: InventoryRecord, status: dict[str, Any]) -> list[Safe]:
    best = status.get("best") or {}
    rows = []
    for c in status.get("cells") or []:
        if not isinstance(c, dict):
            continue
        marks = []
        if c.get("index") == best.get("byCost"):
            marks.append(tag("span", "best cost", class_="mark best-cost"))
        if c.get("index") == best.get("byThroughput"):
            marks.append(tag("span", "best throughput", class_="mark best-throughput"))
        wall = c.get("wallSeconds")
        rows.append(tag(
            "tr", tag("td", c.get("index")),
            tag("td", _job_link(r, c)),
            tag("td", c.get("gpu") or "-"), tag("td", c.get("region") or "-"),
            tag("td", _params(c.get("params"))), tag("td", phase_badge(c.get("phase"))),
            tag("td", money(c.get("costUSD")), class_="num", data_field="cost"),
            tag("td", duration_text(wall) if isinstance(wall, int | float) else "-",
                class_="num", data_field="running"),
            tag("td", _number_text(c.get("unitsPerSecond")), class_="num"),
            tag("td", *marks), data_cell=c.get("index"),
            class_="best" if marks else None))
    chart, left_out = svg.sweep_chart(status)
    caption = f"{left_out} cells without cost or throughput are not plotted" if left_out else ""
    best_text = f"cheapest: cell {best.get('byCost', '-')}, fastest: cell " \
                f"{best.get('byThroughput', '-')}"
    points = [tag("tr", tag("td", c.get("index")), tag("td", _number_text(x), class_="num"),
                  tag("td", money(c.get("costUSD")), class_="num"), data_cell=c.get("index"))
              for c, x, _y in svg.plotted(status)]
    data = table(["Cell", "Units per second", "Cost (USD)"], points, class_="chart-data",
                 data_live="sweep-chart-data") if points else Safe("")
    return [tag("h2", "Cells"), tag("p", best_text, class_="best-summary"),
            table(["#", "Job", "GPU", "Region", "Params", "Phase", "Cost", "Wall time",
                   "Units/s", "Best"], rows, class_="cells", data_live="cells"),
            tag("h2", "Cost against throughput"),
            tag("div",
                tag("figure", chart or tag("p", "no cell has reported throughput yet",
                                           class_="muted"),
                    tag("figcaption", caption), class_="chart", data_live="sweep-chart"),
                data, class_="chart-and-data")]


def _log_blocks(service: Service, r: InventoryRecord, job: str) -> list[Safe]:
    reader = logs.log_reader(service, r)
    if isinstance(reader, str):
        return [tag("p", f"No logs here: {reader}.", class_="muted")]
    key = ResourceKey("Job", r.key.project, job)
    count = logs.indexes(reader, key)
    blocks = []
    for index in range(min(count, MAX_LOG_INDEXES)):
        url = with_query(_api(r) + "/logs", {"job": job if job != r.key.name else None,
                                             "index": index, "tail": logs.DEFAULT_TAIL})
        try:
            tail = logs.tail(reader, key, index, logs.DEFAULT_TAIL,
                             configured_secrets(service.settings))
            text, attempt = "\n".join(tail["lines"]), tail["attempt"]
        except NotFoundError as exc:
            text, attempt = str(exc), None
        blocks.append(tag("h3", f"{job} · index {index}",
                          f" · attempt {attempt}" if attempt is not None else ""))
        blocks.append(tag("pre", text, class_="log", data_logs=url))
    if count > MAX_LOG_INDEXES:
        blocks.append(tag("p", f"{count - MAX_LOG_INDEXES} more indexes: read them with "
                               "`nodus-gitops logs`", class_="muted"))
    return blocks


def _job(service: Service, r: InventoryRecord, status: dict[str, Any]) -> list[Safe]:
    runs = [("Attempts", status.get("attempts", "-")),
            ("Succeeded / failed / active", f"{status.get('succeeded', 0)} / "
                                            f"{status.get('failed', 0)} / "
                                            f"{status.get('active', 0)}"),
            ("Completed indexes", status.get("completedIndexes") or "-"),
            ("Recoveries", status.get("recoveries", 0)),
            ("Started", when(moment(status.get("startTime")))),
            ("Completed", when(moment(status.get("completionTime"))))]
    outputs = status.get("outputs") or {}
    rows = [tag("tr", tag("td", name), tag("td", tag("code", o.get("path"))),
                tag("td", o.get("type") or "file"), tag("td", _size(o.get("size")),
                                                        class_="num"),
                tag("td", tag("code", o.get("sha256"), class_="sha")))
            for name, o in outputs.items() if isinstance(o, dict)]
    return [tag("h2", "Runs"), tag("div", definition_list(runs), data_live="runs"),
            tag("h2", "Outputs"),
            tag("div", table(["Name", "Path", "Type", "Size", "SHA-256"], rows,
                             class_="outputs")
                if rows else tag("p", "none stored (outputs are stored when the Job succeeds)",
                                 class_="muted"), data_live="outputs"),
            tag("h2", "Logs"), tag("div", *_log_blocks(service, r, r.key.name),
                                   data_live="logs")]


def resource_page(service: Service, kind: str, project: str, name: str) -> tuple[int, bytes]:
    found = api.find(service, kind, project, name)
    if found is None:
        return 404, layout("Not found", tag("p", f"No resource {kind}/{project}/{name}."))
    secrets = configured_secrets(service.settings)
    r = mask_record(found.record, secrets)
    status = r.status or {}
    binding = service.store.get_binding(r.binding_id)
    repo_url = url_without_userinfo(binding.url) if binding else None
    timing = record_timing(r)
    facts = [("Phase", phase_badge(r.phase)),
             ("Reason", tag("span", r.reason or "-", data_field="reason")),
             ("Message", tag("span", r.message or "-", data_field="message")),
             ("Fix", tag("span", r.fix or "-", data_field="fix", class_="fix" if r.fix else None)),
             ("Cost", tag("span", money(r.cost_usd), data_field="cost")),
             ("Project", r.key.project),
             ("Repo", tag("a", r.binding_id, href=path("repos", r.binding_id))),
             ("Source", Safe(tag("code", r.source_file or "-") + esc(" @ ")
                             + commit_link(repo_url, r.source_commit))),
             *timing.facts(),
             ("Created", when(r.created_at)), ("Started", when(timing.started)),
             ("Finished", when(timing.finished)), ("Updated", when(r.updated_at))]
    if found.child is not None:
        parent = found.child.parent.key
        facts.insert(1, ("Parent", Safe(
            tag("a", f"{parent.kind} {parent.name}", href=path(
                "resources", parent.kind, parent.project, parent.name), class_="parent")
            + esc(f" ({found.child.role} {found.child.id})"))))
    sandbox = sandbox_text(r) if kind == "Job" else None
    if sandbox:
        facts.append(("Sandbox", tag("span", sandbox, data_field="sandbox",
                                     class_="warn" if (r.status or {}).get("sandbox") == "none"
                                     else None)))
    if r.deleted:
        facts.append(("Gone", "the backend no longer has it (finished and removed)"))
    body: list[Any] = [tag("div", definition_list(facts), data_live="facts")]
    if kind == "Pipeline":
        body += _pipeline(r, status)
    elif kind == "Sweep":
        body += _sweep(r, status)
    else:
        body += _job(service, r, status)
    body += [tag("h2", "Conditions"), tag("div", _conditions(status), data_live="conditions"),
             tag("h2", "Events"),
             tag("div", _events(mask_events(found.events, secrets)), data_live="events"),
             tag("h2", "Manifest"), *_manifest(
                 service, r, repo_url, found.child.parent.key if found.child else None),
             tag("details", tag("summary", "Status"), _yaml(status), data_live="status")]
    title = f"{kind} {name}"
    return 200, layout(title, body, active="resources", page=f"resource {kind.lower()}",
                       poll=_api(r), generated=now_text())


def _lines(n: int) -> str:
    return f"{n} line" if n == 1 else f"{n} lines"


def _manifest(service: Service, r: InventoryRecord, repo_url: str | None,
              parent: ResourceKey | None) -> list[Safe]:
    """The file that declares `r`, as written at its commit, its own document marked;
    the stored manifest re-serialised (and said to be) when the file cannot be read."""
    where = [tag("code", r.source_file or "-"), " at ", commit_link(repo_url, r.source_commit)]
    source = source_view.read(service, r.binding_id, r.source_commit, r.source_file)
    if isinstance(source, str):
        return [tag("p", "The file cannot be read (", source, "): this is the manifest as "
                    "stored, re-serialised, not the file's own text.", class_="notice",
                    data_field="manifest-source"),
                tag("p", "from ", *where, class_="muted"),
                _yaml(mask(r.manifest, configured_secrets(service.settings)))]
    declared = parent or r.key  # a stage's or a cell's Job is declared by its parent
    own = source.lines_of(declared.kind, declared.name)
    note = [tag("a", "the file", href=source_view.file_url(
        r.binding_id, str(r.source_commit), str(r.source_file), own[0] if own else None)),
        f", lines {own[0]}–{own[1]}" if own else ""]
    if source.masked:
        note.append(f" · secret-looking values masked on {_lines(source.masked)}")
    return [tag("p", "from ", *where, " · ", *note, class_="muted",
                data_field="manifest-source"),
            source_view.listing(source, own)]


def logs_page(service: Service, kind: str, project: str, name: str,
              params: dict[str, list[str]]) -> tuple[int, bytes]:
    r = service.store.get_resource(ResourceKey(kind, project, name))
    job = (params.get("job") or [None])[-1]
    child = find_child(service.store, project, name) if r is None and kind == "Job" else None
    if child is not None and child.created and job in (None, name):  # a stage's or a cell's
        r, job = child.parent, name
    if r is None or (job or name) not in logs.child_jobs(r):
        return 404, layout("Not found", tag("p", f"No Job {job or name} of {kind}/{name}."))
    job = job or name
    back = tag("p", tag("a", f"← {kind} {name}", href=path("resources", kind, project, name)))
    blocks = tag("div", *_log_blocks(service, r, job), data_live="logs")
    return 200, layout(f"Logs of {job}", [back, blocks],
                       active="resources", page="logs", poll=_api(r), generated=now_text())
