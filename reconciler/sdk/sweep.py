"""`Sweep`: describe a matrix of Job runs in Python, commit it to the manifests
repository, and read its report from the reconciler's JSON API.

Every action a script takes is a commit (create, suspend, resume, cancel), so Git's
history is the record of what ran and who asked; every read is `GET /api/v1/...`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from nodus_gitops.composite import sweep_cell_count
from nodus_gitops.floor.phases import TERMINAL_PHASES
from nodus_gitops.sdk import errors
from nodus_gitops.sdk import manifest as mf
from nodus_gitops.sdk.client import Client, default_client
from nodus_gitops.sdk.gitrepo import Edit
from nodus_gitops.sdk.views import View

log = logging.getLogger("nodus_gitops.sdk")
_PLACEHOLDER_NAME = "sweep-00000000"
_STATES = {"suspend": "Suspended", "resume": "Running", "cancel": "Cancelled"}


def _report(obj: Mapping[str, Any]) -> View:
    """The report of one API resource object: phase and reason, every cell in index
    order, the best cells, the cost so far and the estimate (missing values as None)."""
    status = obj.get("status") or {}
    best = status.get("best") or {}
    estimate = status.get("estimate") or {}
    cells = sorted((c for c in status.get("cells") or [] if isinstance(c, Mapping)),
                   key=lambda c: c.get("index", 0))
    return View({
        "name": obj.get("name"), "project": obj.get("project"), "phase": obj.get("phase"),
        "reason": obj.get("reason"), "message": obj.get("message"), "fix": obj.get("fix"),
        "costUSD": obj.get("costUSD"), "progress": status.get("progress"),
        "cells": [_cell(c) for c in cells],
        "best": {"byCost": best.get("byCost"), "byThroughput": best.get("byThroughput")},
        "estimate": {"costUSD": estimate.get("costUSD")},
        "sourceCommit": obj.get("sourceCommit"), "file": obj.get("file"),
    })


def _cell(c: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("index", "job", "gpu", "region", "params", "phase", "reason", "costUSD",
            "wallSeconds", "unitsPerSecond")
    out = {k: c.get(k) for k in keys}
    out["params"] = dict(c.get("params") or {})
    return {**c, **out}


class Sweep:
    """A Sweep: describe it, `run()` it, then read the report with `wait()`, `cells()` and
    `status()`. `target` is the Job spec every cell runs; `grid` maps `gpu` and `region`
    (dimensions) and parameter names to their values."""

    def __init__(self, target: Mapping[str, Any] | None = None, *,
                 grid: Mapping[str, Any] | None = None, repetitions: int | None = None,
                 max_parallel: int | None = None, max_cost: Any = None,
                 name: str | None = None, labels: Mapping[str, str] | None = None,
                 project: str | None = None, client: Client | None = None) -> None:
        self._template = mf.check_target(target)
        self._options = {"repetitions": repetitions, "max_parallel": max_parallel,
                         "max_cost": max_cost, "labels": dict(labels) if labels else None}
        self._grid = dict(grid) if grid is not None else None
        self._name = name
        self._project = project
        self._client = client
        self.file: str | None = None  # where the manifest is in the repository
        self.commit: str | None = None  # the last commit this object made
        self._check(name or _PLACEHOLDER_NAME)

    @classmethod
    def from_name(cls, name: str, project: str | None = None, *,
                  client: Client | None = None) -> Sweep:
        """A Sweep that exists already, to wait on, read, suspend, resume or cancel."""
        sweep = cls.__new__(cls)
        sweep._template = None
        sweep._options, sweep._grid = {}, None
        sweep._name, sweep._project, sweep._client = name, project, client
        sweep.file = sweep.commit = None
        return sweep

    # -- identity --------------------------------------------------------------------

    @property
    def name(self) -> str | None:
        """The Sweep's name; a Sweep without one gets it from `run()`."""
        return self._name

    @property
    def project(self) -> str:
        return self._project or self.client.project

    @property
    def client(self) -> Client:
        return self._client or default_client()

    def __repr__(self) -> str:
        where = f", file={self.file!r}" if self.file else ""
        return f"Sweep(name={self._name!r}, project={self.project!r}{where})"

    def manifest(self, idempotency_key: str | None = None) -> dict[str, Any]:
        """The manifest `run()` writes (with a placeholder name until it has one)."""
        if self._template is None:
            raise errors.NodusError("a Sweep from from_name() has no description to write")
        return self._body(self._name or _PLACEHOLDER_NAME, idempotency_key)

    def _body(self, name: str, idempotency_key: str | None) -> dict[str, Any]:
        o = self._options
        return mf.build(name, self._template or {}, self._grid,
                        repetitions=o["repetitions"], max_parallel=o["max_parallel"],
                        max_cost=o["max_cost"], labels=o["labels"],
                        idempotency_key=idempotency_key)

    def _file_for(self, name: str) -> str:
        folder = self.client.path
        return f"{folder}/{name}.yaml" if folder else f"{name}.yaml"

    def _check(self, name: str, idempotency_key: str | None = None) -> tuple[dict, bytes]:
        """The manifest and file content for `name`; InvalidSweep when it would not
        validate."""
        body = self._body(name, idempotency_key)
        content = mf.render(body)
        mf.validate(self._file_for(name), content)
        return body, content

    # -- writes: commits -------------------------------------------------------------

    def run(self, idempotency_key: str | None = None) -> Sweep:
        """Create the Sweep (one commit) and return it; `.wait()` blocks until every cell
        is terminal. With `idempotency_key`, a Sweep already carrying that key is
        returned instead and nothing is committed."""
        if self._template is None:
            raise errors.NodusError("this Sweep came from from_name(): it exists already")
        key = None if idempotency_key is None else str(idempotency_key)
        client = self.client
        name = self._name or mf.generated_name(self.manifest(key), key)

        def edit(tip: str | None) -> Edit:
            files = repo.files(tip)
            if key is not None and (found := mf.find_by_key(files, key)) is not None:
                return Edit(value=(False, found[0], found[1]["metadata"]["name"]))
            body, content = self._check(name, key)
            file = self._file_for(name)
            existing = mf.find_by_name(files, name)
            if existing is not None:
                if existing[1] == body:
                    return Edit(value=(False, existing[0], name))
                raise errors.InvalidSweep(
                    f"a different Sweep named {name!r} is already in {existing[0]}: choose "
                    "another name, or use Sweep.from_name() to work with that one")
            return Edit({file: content}, _create_message(name, key, body),
                        value=(True, file, name))

        with client.lock:
            repo = client.repository()
            written = repo.commit(edit, client.author)
        created, file, found_name = written.value  # type: ignore[misc]
        self._name, self.file = found_name, file
        if created:
            self.commit = written.commit
            log.info("sweep created", extra={"sweep": found_name, "commit": written.commit})
        else:
            log.info("sweep exists already; nothing committed", extra={"sweep": found_name})
        return self

    def suspend(self) -> None:
        """Commit `spec.state: Suspended`: every unfinished cell saves its state and stops."""
        self._set_state("suspend")

    def resume(self) -> None:
        """Commit `spec.state: Running`: suspended cells continue, waiting cells start."""
        self._set_state("resume")

    def cancel(self) -> None:
        """Commit `spec.state: Cancelled`: every unfinished cell stops for good."""
        self._set_state("cancel")

    def _set_state(self, verb: str) -> None:
        name = self._require_name()
        state = _STATES[verb]
        client = self.client

        def edit(tip: str | None) -> Edit:
            files = repo.files(tip)
            preferred = self.file or self._file_for(name)
            found = (mf.find_by_name({preferred: files[preferred]}, name)
                     if preferred in files else None) or mf.find_by_name(files, name)
            if found is None:
                raise errors.NotFound(f"no Sweep named {name!r} on branch {client.branch} "
                                      f"of {repo.url}")
            path, doc = found
            new = mf.set_state(path, files[path], name, state)
            if new is None:
                return Edit(value=path)
            old = (doc.get("spec") or {}).get("state", "Running")
            message = (f"sweep {name}: {verb}\n\nspec.state: {old} -> {state} in {path}.\n"
                       "Written by the nodus-gitops Python SDK.\n")
            return Edit({path: new}, message, value=path)

        with client.lock:
            repo = client.repository()
            written = repo.commit(edit, client.author)
        self.file = str(written.value)
        if written.commit is not None:
            self.commit = written.commit

    # -- reads: the JSON API ---------------------------------------------------------

    def _require_name(self) -> str:
        if self._name is None:
            raise errors.NotFound("this Sweep has no name yet: call run() first")
        return self._name

    def _resource(self) -> dict[str, Any]:
        return self.client.resource("Sweep", self.project, self._require_name())

    def status(self) -> View:
        """The Sweep's `status` now: phase, reason, cells, best, cost and estimate."""
        return _report(self._resource())

    def cells(self) -> list[View]:
        """One entry per cell, in index order: index, gpu, region, params, phase,
        cost_usd, wall_seconds and units_per_second (and job, reason)."""
        return list(self.status().cells)

    def estimate(self) -> View:
        """The Sweep's `status.estimate`: the cost estimate over every cell (`cost_usd`,
        None when a cell has neither expectedDuration nor timeout)."""
        return self.status().estimate

    def jobs(self) -> list[View]:
        """The cell Jobs the Sweep created, in index order (a cell not started has none):
        each the API's Job object (its status, manifest, events, and `parent` naming this
        Sweep and the cell), else, where the API no longer has the Job, what the Sweep's
        status says of it."""
        report = self.status()
        out = []
        for c in report.cells:
            if not _created(c):
                continue
            try:
                found = self.client.resource("Job", self.project, c.job)
            except errors.NotFound:  # a reconciler that serves no cell Jobs by name
                found = {"kind": "Job", "name": c.job, "project": self.project,
                         "phase": c.phase, "reason": c.reason, "costUSD": c.cost_usd,
                         "status": {"wallSeconds": c.wall_seconds,
                                    "unitsPerSecond": c.units_per_second}}
            out.append(View({**found, "cell": c.index}))
        return out

    def wait(self, timeout: float | None = None, poll: float = 1.0) -> View:
        """Block until the Sweep is terminal and return its report (as `status()`).

        A Sweep with failed cells ends `Failed` with reason `CellsFailed` and still has
        its report, so only a timeout (`errors.Timeout`) or a missing Sweep raises. A
        Sweep the API does not know yet is polled for the client's `not_found_grace`
        (the reconciler picks up a commit on its next poll) before `errors.NotFound`."""
        name = self._require_name()
        client = self.client
        start = time.monotonic()
        deadline = None if timeout is None else start + max(0.0, timeout)
        missing_since: float | None = None
        phase = None
        while True:
            try:
                obj = self._resource()
            except (errors.NotFound, errors.ApiError) as exc:
                now = time.monotonic()
                missing_since = missing_since if missing_since is not None else now
                if now - missing_since >= client.not_found_grace:
                    if isinstance(exc, errors.ApiError):
                        raise
                    raise errors.NotFound(
                        f"Sweep {self.project}/{name} is not known to the API at "
                        f"{client.api_url} after {client.not_found_grace:g}s: is the "
                        f"reconciler following {client.branch} and {client.path or '/'} of "
                        "the repository, with this project?") from None
            else:
                missing_since = None
                phase = obj.get("phase")
                if phase in TERMINAL_PHASES:
                    return _report(obj)
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                raise errors.Timeout(f"Sweep {self.project}/{name} is still "
                                     f"{phase or 'not created'} after {timeout:g}s")
            pause = poll if deadline is None else min(poll, max(0.0, deadline - now))
            time.sleep(max(0.01, pause))


def _created(cell: Mapping[str, Any]) -> bool:
    """Whether a cell's Job was created: the status says so (`created`); a reconciler
    that does not say leaves a cell never started Pending."""
    created = cell.get("created")
    return bool(created) if created is not None else cell.get("phase") != "Pending"


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def _create_message(name: str, key: str | None, body: Mapping[str, Any]) -> str:
    """`sweep <name>: create (idempotency key <key>)`, then the matrix's shape."""
    spec, matrix = body["spec"], body["spec"]["matrix"]
    title = f"sweep {name}: create" + (f" (idempotency key {key})" if key else "")
    shape = [_count(len(matrix[k]), what) for k, what in (("gpu", "GPU type"),
                                                           ("regions", "region"))
             if matrix.get(k)]
    shape += [_count(len(v), f"{k} value") for k, v in (matrix.get("params") or {}).items()]
    if spec.get("repetitions"):
        shape.append(_count(spec["repetitions"], "repetition"))
    lines = [f"{_count(sweep_cell_count(spec), 'cell')}: {' x '.join(shape) or 'one'}."]
    limits = [f"{k} {spec[k]}" for k in ("maxParallel", "maxCostUSD") if spec.get(k)]
    if limits:
        lines.append(", ".join(limits) + ".")
    lines.append("Written by the nodus-gitops Python SDK.")
    return title + "\n\n" + "\n".join(lines) + "\n"
