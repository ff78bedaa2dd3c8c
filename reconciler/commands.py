"""The handlers behind each `nodus-gitops` command (argument parsing lives in cli.py)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodus_gitops.floor.errors import ConfigError
from nodus_gitops.floor.identity import KINDS, MAX_NAME, ResourceKey, is_resource_name
from nodus_gitops.floor.phases import is_terminal
from nodus_gitops.floor.problems import Problem
from nodus_gitops.locations import CONFIG_ENV, STATE_FILE, find_config, no_state
from nodus_gitops.output import (
    RESULT_COLOURS,
    colour_wanted,
    describe,
    dump,
    paint,
    resource_names,
    resource_object,
    resources_table,
)

if TYPE_CHECKING:  # the commands import what they use when they run: see cli._command
    from nodus_gitops.config import Settings
    from nodus_gitops.state.quick_read import QuickReader
    from nodus_gitops.state.records import InventoryRecord
    from nodus_gitops.state.store import Store
    from nodus_gitops.workloads.children import ChildJob

    Children = dict[ResourceKey, ChildJob]  # a stage's or a cell's Job -> what it is

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2
EXIT_CHANGES = 2  # `plan`: changes pending


def settings_from(args: argparse.Namespace) -> Settings:
    """The settings of a command: its flags over the environment over the config file
    that `locations.find_config` finds (a config found in the user's folder, not named,
    adds no repos to a `--repo`)."""
    from nodus_gitops.config import binding_from_flags, load_settings

    config = find_config(getattr(args, "config", None), os.environ)
    if config.named_by == CONFIG_ENV and not Path(config.path or "").is_file():
        raise ConfigError(f"{CONFIG_ENV}={config.path}: no such file (unset it, or name a "
                          "config file that exists)")
    bindings = ()
    if getattr(args, "repo", None):
        bindings = (binding_from_flags(args.repo, args.branch, args.path, args.project,
                                       args.provider, getattr(args, "interval", None)),)
    settings = load_settings(config.path, bindings=bindings, overrides={
        "state_dir": args.state_dir, "state_url": args.state, "instance": args.instance,
        "listen": getattr(args, "listen", None)})
    if bindings and config.ambient:
        settings = replace(settings, bindings=bindings)
    if getattr(args, "binding", None):  # --binding ID: that binding of the config alone
        settings = replace(settings, bindings=(settings.binding(args.binding),))
    return settings


def open_store(settings: Settings) -> Store:
    """The state store, made (or migrated) where there is none yet: for the commands
    that write it (`reconcile`, `serve`)."""
    from nodus_gitops.state.store import Store

    settings.state_dir.mkdir(parents=True, exist_ok=True)
    return Store.open(settings.state_url, settings.state_dir)


def read_store(args: argparse.Namespace, settings: Settings) -> Store | QuickReader:
    """The state of a command that only lists and describes (`get`, `describe`): never
    made nor migrated, and read through `state.quick_read` where it can be. Where there
    is none, a ConfigError says each place looked and how to point elsewhere."""
    if not _has_state(settings):
        raise ConfigError(no_state(args.state_dir, os.environ, find_config(
            getattr(args, "config", None), os.environ), settings.state_dir))
    return _quick_or_read_only(settings)


def existing_reader(settings: Settings) -> Store | QuickReader | None:
    """`read_store` for a command that goes on without a state (`logs`, `cp`, completion):
    None where there is none."""
    return _quick_or_read_only(settings) if _has_state(settings) else None


def _quick_or_read_only(settings: Settings) -> Store | QuickReader:
    """The standard library's reader of a local SQLite state of this schema, else the
    full store (a database URL, or a schema it must name the upgrade of)."""
    if settings.state_url is None:
        from nodus_gitops.state.quick_read import open_quick

        quick = open_quick(_state_file(settings))
        if quick is not None:
            return quick
    return _open_read_only(settings)


def existing_store(settings: Settings) -> Store | None:
    """The state store if there is one, else None."""
    return _open_read_only(settings) if _has_state(settings) else None


def _open_read_only(settings: Settings) -> Store:
    from nodus_gitops.state.store import Store

    return Store.open(settings.state_url, settings.state_dir, read_only=True)


def _state_file(settings: Settings) -> Path:
    return settings.state_dir / STATE_FILE


def _has_state(settings: Settings) -> bool:
    """A state URL always names a database; without one, the state directory's file."""
    return settings.state_url is not None or _state_file(settings).is_file()


def cmd_validate(args: argparse.Namespace) -> int:
    from nodus_gitops.manifests import iter_manifest_files, outside_link
    from nodus_gitops.validation import resource_summary, validate_files

    files, links, unreadable = [], [], []
    for target in args.paths:
        if not Path(target).exists():
            print(f"nodus-gitops validate: {target}: no such file or directory", file=sys.stderr)
            return EXIT_USAGE
        root = Path(target) if Path(target).is_dir() else Path(target).parent
        for display, path in iter_manifest_files([target], unreadable):
            (links if outside_link(path, root) else files).append((display, path))
    contents = []
    for display, path in files:
        try:
            contents.append((display, path.read_bytes()))
        except OSError as exc:  # a file this user may not read, /proc/self/mem
            unreadable.append(display)
            print(f"nodus-gitops validate: {display}: {exc.strerror}", file=sys.stderr)
    result = validate_files(contents)
    result.problems.extend(Problem(display, 1, "", "", "", "a symbolic link to a file "
                                   "outside the tree: not read") for display, _ in links)
    result.problems.extend(Problem(display, 1, "", "", "", "cannot be read by this user: "
                                   "not validated") for display in unreadable)
    result.problems.sort()
    if args.output == "json":
        print(json.dumps({
            "resources": [resource_summary(m) for m in result.manifests],
            "problems": [p.as_dict() for p in result.problems],
        }, indent=2))
    else:
        for problem in result.problems:
            print(problem)
        n = len(result.manifests)
        if result.ok:
            print(f"{n} resource{'s' if n != 1 else ''} in {len(files)} "
                  f"file{'s' if len(files) != 1 else ''}: "
                  + paint("valid", RESULT_COLOURS, colour_wanted(sys.stdout)))
        else:
            count = f"{len(result.problems)} problem{'s' if len(result.problems) != 1 else ''}"
            print(f"{paint(count, {count: 'bad'}, colour_wanted(sys.stderr))} in {n} resources",
                  file=sys.stderr)
    return EXIT_OK if result.ok else EXIT_PROBLEMS


def _single_binding(settings: Settings, args: argparse.Namespace):
    if not settings.bindings:
        raise ConfigError("no repository: pass --repo URL|PATH (or --config FILE)")
    if getattr(args, "binding", None):
        return settings.binding(args.binding)
    if len(settings.bindings) > 1:
        raise ConfigError("the config has several repo bindings: choose one with --binding ID")
    return settings.bindings[0]


def cmd_plan(args: argparse.Namespace) -> int:
    from nodus_gitops.remote import server_of

    url = server_of(args)
    if url is not None:
        return _remote_plan(args, url)
    from nodus_gitops.apply import ApplyContext
    from nodus_gitops.desired import DesiredTree
    from nodus_gitops.plan import plan
    from nodus_gitops.plan_report import plan_report
    from nodus_gitops.sync import InventoryView, plan_options
    from nodus_gitops.wiring import git_source

    settings = settings_from(args)
    binding = _single_binding(settings, args)
    store = existing_store(settings)  # none yet: everything is still to create
    source = git_source(settings, binding)
    tip = source.fetch()
    commit = source.resolve(args.ref) if args.ref else tip
    tree = DesiredTree.read(commit, binding.project, source.read_tree(commit, binding.path))
    # Pure: the same function the sync applies, against what the store recorded; nothing
    # is built to apply it and nothing is written.
    inventory, observed = (InventoryView(store, binding.id).state(tree.index) if store
                           else ([], {}))
    the_plan = plan(tree.desired(), inventory, observed, plan_options(binding))
    ctx = ApplyContext(binding.id, binding.project, settings.instance, binding.url, commit)
    provider = _dry_run_backend(settings, binding)
    try:
        report = plan_report(commit, tree, the_plan, provider, ctx)
    finally:
        if provider is not None:
            provider.close()
    print(report.json_text() if args.output == "json" else report.text())
    return report.exit_code


def _remote_plan(args: argparse.Namespace, url: str) -> int:
    """`plan --server`: the server plans its binding (`--binding`, or its only one) at
    `--ref` (default its branch's tip, fetched) against its own state, and answers
    what the local plan prints, masked as its dashboard masks."""
    from nodus_gitops.remote import Client, remote_plan

    local = [f"--{name}" for name in ("repo", "branch", "path", "project", "provider")
             if getattr(args, name, None)]
    if local:
        print(f"nodus-gitops plan: {', '.join(local)}: with --server the server plans a "
              "binding it serves, from its own repository: name it with --binding ID",
              file=sys.stderr)
        return EXIT_USAGE
    answer = remote_plan(Client(url), args.binding, args.ref)
    print(answer["json"] if args.output == "json" else answer["text"])
    return int(answer["exitCode"])


def _dry_run_backend(settings: Settings, binding):
    """The binding's backend where it has a server-side dry run (the Nodus API), else
    None: the other backends are not built for a plan (the local one would make its
    folders)."""
    provider_settings = settings.provider_settings(binding.provider)
    if provider_settings.get("type", binding.provider) != "nodus":
        return None
    from nodus_gitops.backends import build_backend

    return build_backend(binding.provider, provider_settings, settings.state_dir)


def _service(settings: Settings, store: Store):
    from nodus_gitops.wiring import build_service

    return build_service(settings, store)


def cmd_reconcile(args: argparse.Namespace) -> int:
    from nodus_gitops.leases import LeaseKeeper, replica_name

    settings = settings_from(args)
    if not settings.bindings:
        raise ConfigError("no repository: pass --repo URL|PATH (or --config FILE)")
    store = open_store(settings)
    service = _service(settings, store)
    keeper = LeaseKeeper(store, service.syncs, replica=f"cli-{replica_name()}")
    busy = keeper.take_all()
    if busy:
        holders = ", ".join(f"{b} (by {keeper.holder_of(b)})" for b in busy)
        raise ConfigError(f"already being reconciled: {holders}; a running `serve` applies "
                          "new commits itself (POST /api/v1/repos/ID/refresh to poll now)")
    service.leases = keeper
    try:
        return _reconcile(service, store, args)
    finally:
        keeper.release_all()
        service.close()  # its backends: their clients, the local backend's spare supervisor


def _reconcile(service, store: Store, args: argparse.Namespace) -> int:
    reports = service.reconcile_all(force=True)
    failed = False
    for report in reports:
        result = paint(str(report.result), RESULT_COLOURS, colour_wanted(sys.stdout))
        print(f"{report.binding}: {result} at {(report.commit or '-')[:12]}: {report.message}")
        for p in report.problems:
            print(f"  {p}")
        if report.plan:
            from nodus_gitops.plan_text import action_lines, shown_actions

            for a in shown_actions(report.plan):
                print("\n".join(action_lines(a)))
        if report.changes:
            for o in report.changes.failed:
                print(f"  failed {o.action.key.short}: {o.error}")
        failed |= not report.ok
    if not args.once and not failed:
        failed = not _wait_until_finished(service, store, args.timeout)
    return EXIT_PROBLEMS if failed else EXIT_OK


def _wait_until_finished(service, store: Store, timeout: float | None) -> bool:
    """Refresh until every resource is finished, saying each phase as it changes; True
    when all Succeeded."""
    from nodus_gitops.progress import PhaseChanges

    started = time.monotonic()
    deadline = started + timeout if timeout else None
    changes = PhaseChanges()
    while True:
        if service.leases is not None:
            service.leases.renew()
        service.refresh_all()
        records = store.list_inventory()
        for line in changes.lines(records, time.monotonic() - started):
            print(line, flush=True)
        if all(is_terminal(r.phase) or r.deleted for r in records):
            print(resources_table(records, colour=colour_wanted(sys.stdout)))
            return all(r.phase == "Succeeded" or r.deleted for r in records)
        if deadline and time.monotonic() > deadline:
            print(resources_table(records))
            print(f"timed out after {timeout}s waiting for resources to finish",
                  file=sys.stderr)
            return False
        time.sleep(0.5)


def cmd_serve(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    if not settings.bindings:
        raise ConfigError("no repository: pass --repo URL|PATH or --config FILE")
    from nodus_gitops.logging_setup import setup_logging

    setup_logging(log_format=args.log_format)
    store = open_store(settings)
    service = _service(settings, store)
    from nodus_gitops.web.server import start_server

    service.run(serve_http=lambda svc: start_server(svc, settings.listen))
    return EXIT_OK


def _select(store: Store, target: str | None) -> list:
    records = store.list_inventory()
    if not target:
        return records
    kind, _, name = target.partition("/")
    kind = _kind(kind)
    return [r for r in records if r.key.kind == kind and (not name or r.key.name == name)]


def _kind(text: str) -> str:
    aliases = {k.lower(): k for k in KINDS} | {k.lower() + "s": k for k in KINDS}
    kind = aliases.get(text.lower())
    if kind is None:
        raise ConfigError(f"unknown kind {text!r} (use job, pipeline or sweep)")
    return kind


def _with_children(records: list[InventoryRecord]) -> tuple[list[InventoryRecord], Children]:
    """`records` with the Jobs their Pipelines and Sweeps created, after the other Jobs,
    as their parents recorded them; and what each such Job is."""
    from nodus_gitops.workloads.children import children_of

    children = [c for r in records for c in children_of(r) if c.created]
    jobs = [r for r in records if r.key.kind == "Job"]
    rest = [r for r in records if r.key.kind != "Job"]
    return jobs + [c.record() for c in children] + rest, {c.key: c for c in children}


def listing(store: Store, target: str | None) -> tuple[list[InventoryRecord], Children]:
    """What `get TARGET` lists: one kind (the stage and cell Jobs among the Jobs), or
    everything."""
    from nodus_gitops.workloads.children import PARENTS

    if target and "/" in target:
        return _select(store, target), {}
    records = store.list_inventory()
    if target is None:
        return _with_children(records)
    kind = _kind(target)
    if kind != "Job":
        return [r for r in records if r.key.kind == kind], {}
    listed, children = _with_children([r for r in records if r.key.kind in ("Job", *PARENTS)])
    return [r for r in listed if r.key.kind == "Job"], children


def _job_name(target: str) -> str:
    kind, _, name = target.partition("/")
    if _kind(kind) != "Job" or not name:
        raise ConfigError(f"{target!r}: name a Job as job/NAME")
    if not is_resource_name(name):
        raise ConfigError(f"{target!r}: {name!r} is not a Job name (lowercase letters, digits "
                          f"and '-', at most {MAX_NAME} characters)")
    return name


def label_selector(text: str | None) -> Callable[[InventoryRecord], bool]:
    """`-l`: KEY=VALUE (or KEY==VALUE), KEY!=VALUE and KEY (the label is set), all of
    them, as kubectl's equality selectors; read on the labels of each resource's manifest."""
    tests: list[Callable[[dict[str, str]], bool]] = []
    for term in (text.split(",") if text is not None else []):
        if "!=" in term:
            key, value = term.split("!=", 1)
        elif "=" in term:
            key, value = term.split("=", 1)
            value = value.removeprefix("=")
        else:
            key, value = term, None
        key, value = key.strip(), value.strip() if value is not None else None
        if not key or value == "" or any(c in key + (value or "") for c in "=! "):
            raise ConfigError(f"-l {text!r}: {term.strip()!r} is not KEY=VALUE, KEY!=VALUE "
                              "or KEY")
        if value is None:
            tests.append(lambda labels, k=key: k in labels)
        elif "!=" in term:
            tests.append(lambda labels, k=key, v=value: labels.get(k) != v)
        else:
            tests.append(lambda labels, k=key, v=value: labels.get(k) == v)
    return lambda r: all(test(_labels(r)) for test in tests)


def _labels(r: InventoryRecord) -> dict[str, str]:
    labels = ((r.manifest or {}).get("metadata") or {}).get("labels")
    return labels if isinstance(labels, dict) else {}


def reading(args: argparse.Namespace) -> tuple[Any, Callable[[], Any]]:
    """What a read command reads: a `serve`'s API with --server (or NODUS_GITOPS_SERVER),
    else the local state; and what answers for the backends (the server, or the local
    backends, `job_views.Backends`)."""
    from nodus_gitops.remote import server_of

    url = server_of(args)
    if url is not None:
        from nodus_gitops.remote import Client, RemoteBackends, RemoteStore

        remote = RemoteStore(Client(url))
        return remote, lambda: RemoteBackends(remote)
    from nodus_gitops.job_views import Backends

    settings = settings_from(args)
    return read_store(args, settings), lambda: Backends(settings)


def cmd_get(args: argparse.Namespace) -> int:
    from nodus_gitops.job_views import find_job

    store, backends_of = reading(args)
    kind, _, name = (args.target or "").partition("/")
    selected = label_selector(args.selector)
    if args.output_watch_events and args.output not in ("json", "yaml"):
        print("nodus-gitops get: --output-watch-events needs -o json or -o yaml",
              file=sys.stderr)
        return EXIT_USAGE
    shown: dict[ResourceKey, str] | None = None  # what was shown of each resource
    while True:
        records, children = listing(store, args.target)
        if name and not records and _kind(kind) == "Job":
            _record, child = find_job(store, _job_name(args.target))
            assert child is not None  # not in the inventory: a stage's or a cell's Job
            records, children = [child.record()], {child.key: child}
        with backends_of() as backends:  # the stage and cell Jobs as they are now
            records = [backends.child_now(children[r.key]) if r.key in children else r
                       for r in records]
        for note in backends.notes:
            print(f"nodus-gitops get: {note}", file=sys.stderr)
        records = [r for r in records if selected(r)]
        if name and not records:
            print(f"nodus-gitops get: {args.target} not found", file=sys.stderr)
            return EXIT_PROBLEMS
        objects = [resource_object(r, children[r.key].parent_object() if r.key in children
                                   else None) for r in records]
        if args.sort_by is not None:
            pairs = sorted(zip(records, objects, strict=True), key=lambda p: args.sort_by(*p))
            records, objects = [r for r, _ in pairs], [o for _, o in pairs]
        now = {r.key: dump(o, "json") for r, o in zip(records, objects, strict=True)}
        if shown is None or now != shown:
            _show(args, records, objects, children, shown, now)
            sys.stdout.flush()
            shown = now
        if not args.watch:
            return EXIT_OK
        time.sleep(2)
        getattr(store, "forget", lambda: None)()  # a server's answers: asked again


def _show(args: argparse.Namespace, records: list, objects: list, children: Children,
          before: dict[ResourceKey, str] | None, now: dict[ResourceKey, str]) -> None:
    """`get`'s listing, and with --watch, once it was shown, only what changed since: the
    changed rows (or objects, or names) as kubectl's `get -w` prints them, and with
    --output-watch-events each change as an event {type: ADDED|MODIFIED|DELETED, object}
    (one JSON line each with -o json)."""
    changed = [i for i, r in enumerate(records)
               if before is None or before.get(r.key) != now[r.key]]
    if args.output_watch_events:
        events = [{"type": "ADDED" if before is None or records[i].key not in before
                   else "MODIFIED", "object": objects[i]} for i in changed]
        events += [{"type": "DELETED", "object": {"kind": k.kind, "name": k.name,
                                                   "project": k.project}}
                   for k in (before or {}) if k not in now]
        for event in events:
            print(json.dumps(event, default=str, sort_keys=True) if args.output == "json"
                  else "---\n" + dump(event, "yaml"))
        return
    def table(headers: bool) -> str:
        return resources_table(records, wide=args.output == "wide",
                               parents={k: c.parent.key for k, c in children.items()},
                               headers=headers, colour=colour_wanted(sys.stdout))

    if before is None:  # the whole listing
        if args.output in ("json", "yaml"):
            print(dump(objects, args.output))
        elif args.output == "name":
            if records:  # nothing at all for none, as kubectl
                print(resource_names(records))
        else:
            print(table(headers=not args.no_headers))
        return
    if args.output in ("json", "yaml"):
        for i in changed:
            print(dump(objects[i], args.output))
    elif args.output == "name":
        for i in changed:
            print(resource_names([records[i]]))
    else:  # the changed rows of the whole table, so that they keep its columns
        rows = table(headers=False).splitlines()
        for i in changed:
            print(rows[i])


def cmd_describe(args: argparse.Namespace) -> int:
    from nodus_gitops.job_views import find_job

    store, backends_of = reading(args)
    kind, _, name = args.target.partition("/")
    records = [r for r in _select(store, args.target) if r.key.name == name]
    child = None
    if name and not records and _kind(kind) == "Job":
        _record, child = find_job(store, name)
    if not name or not (records or child):
        print(f"nodus-gitops describe: {args.target} not found (use KIND/NAME)", file=sys.stderr)
        return EXIT_PROBLEMS
    with backends_of() as backends:
        if child is not None:
            shown = backends.child_now(child)
            print(describe(shown, backends.events(child), parent=child.title,
                           notes=backends.notes, colour=colour_wanted(sys.stdout)))
        for r in records:
            events = store.list_events(r.key)
            if r.key.kind == "Job":  # with those its backend keeps
                events = events + backends.events(r)
            print(describe(r, events, notes=backends.notes, colour=colour_wanted(sys.stdout)))
    return EXIT_OK


def job_owner(store: Store | None, target: str
              ) -> tuple[ResourceKey, InventoryRecord | None]:
    """The key of the Job `target` names, and the record whose backend runs it. A Job the
    store does not know (created on the backend by something else, or with the state
    lost or never made) is asked of the backend that would run it, in the store's first
    project; the backend then says whether it has it."""
    from nodus_gitops.job_views import JobNotFound, find_job, owner_of

    name = _job_name(target)
    try:
        if store is None:
            raise JobNotFound(f"job/{name} not found")
        record, child = find_job(store, name)
    except JobNotFound:
        records = store.list_inventory() if store is not None else []
        projects = sorted({r.key.project for r in records}) or ["default"]
        return ResourceKey("Job", projects[0], name), None
    job = child or record
    assert job is not None
    return job.key, owner_of(job)


class _Lacks(Exception):
    """The Job's backend does not declare the capability a command needs."""


@contextmanager
def _job_backend_with(args: argparse.Namespace, target: str, capability: type,
                      lacking: str) -> Iterator[tuple[ResourceKey, Any]]:
    """The key of the Job `target` and its backend, which has `capability`; closed after.
    Where it lacks it, says so (`lacking` completes "runs on the X backend, whose ...")."""
    from nodus_gitops.job_views import job_backend

    settings = settings_from(args)
    key, owner = job_owner(existing_reader(settings), target)  # the backend has the logs
    backend = job_backend(settings, owner)
    try:
        if not isinstance(backend, capability):
            print(f"nodus-gitops {args.command}: {target} runs on the {backend.name} backend, "
                  f"whose {lacking}", file=sys.stderr)
            raise _Lacks
        yield key, backend
    finally:
        backend.close()


# C0 and C1 control characters but tab and newline, and DEL: in a terminal they move
# the cursor, rewrite what was shown, set the title or the clipboard (OSC 52). The
# bidirectional controls reorder what a line shows ("Trojan Source", CVE-2021-42574).
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x09), *range(0x0b, 0x20),
                                         *range(0x7f, 0xa0))} | {
    c: f"\\u{c:04x}" for c in (0x061c, 0x200e, 0x200f, *range(0x202a, 0x202f),
                                *range(0x2066, 0x206a))}


def terminal_safe(text: str) -> str:
    """`text` with every control character but tab and newline, and every bidirectional
    control, shown as its escape (`\\x1b`, `\\u202e`): what a Job printed can never
    drive the reader's terminal or reorder what it shows."""
    return text.translate(_CONTROLS)


def cmd_logs(args: argparse.Namespace) -> int:
    from nodus_gitops.providers.base import HasLogs
    from nodus_gitops.remote import server_of

    # Filtered for a terminal only: a file or a pipe gets the log as the program wrote it.
    shown = terminal_safe if sys.stdout.isatty() else str
    url = server_of(args)
    if url is not None:
        return _remote_logs(args, url, shown)
    try:
        with _job_backend_with(args, args.target, HasLogs, "logs the reconciler cannot read; "
                               "read them with that platform's own tools") as (key, backend):
            _check_index(args, backend.log_info(key, args.index or 0).indexes)
            for line in backend.logs(key, index=args.index, follow=args.follow):
                line = shown(line.removesuffix("\n"))
                sys.stdout.write(line + "\n")
                sys.stdout.flush()
    except _Lacks:
        return EXIT_PROBLEMS
    return EXIT_OK


def _remote_logs(args: argparse.Namespace, url: str, shown: Callable[[str], str]) -> int:
    """`logs` of a `serve`: the tail its API serves (its last 2000 lines)."""
    from nodus_gitops.remote import Client, RemoteNotFound, RemoteStore, resource_path

    if args.follow:
        print(f"nodus-gitops logs: {url} serves a log's tail, not a follow: drop -f (and run "
              "it again), or run `logs -f` without --server where the Job runs",
              file=sys.stderr)
        return EXIT_PROBLEMS
    client = Client(url)
    key, _owner = job_owner(RemoteStore(client), args.target)
    path = resource_path(key) + "/logs"
    try:
        body = client.get(path, index=args.index or 0, tail=2000)
    except RemoteNotFound:
        if not args.index:
            raise
        body = client.get(path, index=0, tail=1)  # to say which indexes there are
    _check_index(args, body["indexes"])
    if body.get("truncated"):
        print(f"nodus-gitops logs: the last {len(body['lines'])} lines of {args.target} "
              f"({url} serves a log's tail)", file=sys.stderr)
    for line in body["lines"]:
        sys.stdout.write(shown(line.removesuffix("\n")) + "\n")
    return EXIT_OK


def _check_index(args: argparse.Namespace, indexes: int) -> None:
    """`--index` must name one of the Job's indexes (ConfigError naming them). Without it
    an Indexed Job shows index 0, and stderr says so and how to choose another, as
    kubectl names the container it defaulted to: stdout stays the log alone."""
    span = "0" if indexes == 1 else f"0-{indexes - 1}"
    if args.index is not None and not 0 <= args.index < indexes:
        raise ConfigError(f"{args.target} has no index {args.index}: its indexes are {span} "
                          f"(choose one with --index)")
    if args.index is None and indexes > 1:
        print(f"nodus-gitops logs: showing index 0 of {args.target} (indexes {span}); "
              "choose another with --index N", file=sys.stderr)


def cmd_cp(args: argparse.Namespace) -> int:
    from nodus_gitops.providers.base import HasOutputs
    from nodus_gitops.remote import server_of

    source, _, output = args.source.partition(":outputs/")
    if not output:
        raise ConfigError(f"{args.source!r}: use job/NAME:outputs/OUTPUT")
    url = server_of(args)
    if url is not None:  # the server copies and checks it, this end checks it again
        from nodus_gitops.remote import Client, RemoteStore
        from nodus_gitops.remote_copy import copy_remote_output

        client = Client(url)
        key, _owner = job_owner(RemoteStore(client), source)
        path, size, digest = copy_remote_output(client, key, output, Path(args.dest))
        print(f"{path}: {size} bytes, sha256 {digest[:12]}")
        return EXIT_OK
    try:
        with _job_backend_with(args, source, HasOutputs, "outputs the reconciler cannot copy; "
                               "fetch them with that platform's own tools") as (key, backend):
            path, size, digest = backend.copy_output(key, output, Path(args.dest))
    except _Lacks:
        return EXIT_PROBLEMS
    print(f"{path}: {size} bytes, sha256 {digest[:12]}")
    return EXIT_OK


def cmd_sync(args: argparse.Namespace) -> int:
    from nodus_gitops.remote import Client, SyncFollower, server_of

    url = server_of(args)
    if url is None:
        print("nodus-gitops sync: it asks a running `nodus-gitops serve`: pass --server URL "
              "or set NODUS_GITOPS_SERVER", file=sys.stderr)
        return EXIT_USAGE
    follower = SyncFollower(Client(url), args.binding)
    follower.request()
    if not args.wait:
        print(f"{args.binding}: sync requested from {url}")
        return EXIT_OK
    deadline = time.monotonic() + args.timeout
    while (outcome := follower.outcome()) is None:
        if time.monotonic() > deadline:
            print(f"nodus-gitops sync: {args.binding} had not finished polling after "
                  f"{args.timeout:g}s; it goes on on the server ({url}/repos/{args.binding})",
                  file=sys.stderr)
            return EXIT_PROBLEMS
        time.sleep(0.5)
    result = paint(outcome.result, RESULT_COLOURS, colour_wanted(sys.stdout))
    sync = f" (sync {outcome.sync_id})" if outcome.sync_id is not None else ""
    print(f"{args.binding}: {result} at {(outcome.commit or '-')[:12]}: {outcome.message}{sync}")
    return EXIT_OK if outcome.ok else EXIT_PROBLEMS


def state_names(args: argparse.Namespace, kind: str) -> list[str]:
    """The names `get KIND` lists, from the state `args` point at, opened read-only:
    none where there is no state or it cannot be read (for shell completion)."""
    from nodus_gitops.floor.errors import NodusGitopsError

    try:
        store = existing_reader(settings_from(args))
        if store is None:
            return []
        try:
            records, _children = listing(store, kind)
        finally:
            store.close()
    except NodusGitopsError:
        return []
    return sorted({r.key.name for r in records if not r.deleted})


def cmd_doctor(args: argparse.Namespace) -> int:
    """Every check of this machine and the config, a line each (doctor.py)."""
    from nodus_gitops.doctor import run

    return run(args, lambda: settings_from(args))


def cmd_completion(args: argparse.Namespace) -> int:
    from nodus_gitops.completion import script

    sys.stdout.write(script(args.shell))
    return EXIT_OK


def cmd_crds(args: argparse.Namespace) -> int:
    from nodus_gitops.crds import render_crds

    sys.stdout.write(render_crds())
    return EXIT_OK
