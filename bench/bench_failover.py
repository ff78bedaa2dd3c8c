"""A killed replica's bindings taken over: N bindings (10 manifests each: Jobs, Pipelines
and Sweeps, each its own bare repository served over HTTP on 127.0.0.1) on three replica
processes sharing one PostgreSQL store, each running `serve`'s own loop (`Service.run`:
the scheduler, the status refresh, the leases) as bench_bindings.py does.

Once every binding has had its first sync and the leases have settled, one replica is
killed with SIGKILL; then a new commit (patch manifest 0, add manifest 10) is pushed to
every binding it held. Per binding it measures, from the kill, the time until a
surviving replica holds the binding's lease, and the time until a surviving replica has
applied the new commit; the target is the lease time plus one poll interval.

Then the checks of the crash tests, over every binding: nothing lost (each binding's
last applied commit is its tip; its inventory holds exactly the tip's manifests at the
tip's caps, and the backend the same resources; no intent left pending) and nothing
applied twice (no resource created twice in the backend, no resource with two create
intents in the journal). The backend is shared by the processes (the fake backend is
per process, and a replica taking over would find nothing of what the dead one made):
each resource is a JSON file in a folder per binding (tests/support/dir_provider.py's
DirProvider), created Succeeded so that the status refresh has nothing to watch, and
every real creation is appended to the folder's `created.log` with the replica that
made it.

Prints JSON. The lease time is LeaseKeeper's (15 s by default, renewed every third of
it); `--ttl` and `--interval` shorten a run (the output says which were used).

Run: python bench/bench_failover.py --state postgresql+psycopg://postgres@127.0.0.1:5432/test
        [--bindings 1000] [--replicas 3] [--interval 30] [--ttl 15] [--wait 300]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict, deque
from multiprocessing.connection import Connection, wait
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))
import bench_bindings  # noqa: E402
from bench_bindings import _loadavg, binding_ids, percentile, serve  # noqa: E402
from bench_reconcile import Repo  # noqa: E402
from nodus_gitops.config import Binding, Settings  # noqa: E402
from nodus_gitops.floor.identity import ResourceKey  # noqa: E402
from nodus_gitops.floor.results import SyncResult  # noqa: E402
from nodus_gitops.leases import DEFAULT_TTL, LeaseKeeper  # noqa: E402
from nodus_gitops.providers.base import Observed, Workload  # noqa: E402
from nodus_gitops.state.models import Intent  # noqa: E402
from nodus_gitops.state.store import Store  # noqa: E402
from nodus_gitops.wiring import build_service  # noqa: E402
from sqlalchemy import select  # noqa: E402

from tests.support.dir_provider import DirProvider  # noqa: E402

MANIFESTS = 10
NEW = MANIFESTS  # the manifest the commit after the kill adds (index 10: a Pipeline)
FIRST_RECONCILE_DEADLINE = 900


class FinishedDir(DirProvider):
    """DirProvider whose workloads are Succeeded as soon as made; every real creation
    is logged with the replica that made it (a replayed one, same idempotency key, is
    counted apart: that is the journal's recovery, not a second creation)."""

    def __init__(self, root: Path, replica: str) -> None:
        super().__init__(root)
        self.replica = replica
        self.replays = 0

    def create(self, workload: Workload, idempotency_key: str) -> Observed:
        path = self._path(workload.key)
        if path.exists():
            data = json.loads(path.read_text())
            if data["idempotencyKey"] == idempotency_key:
                self.replays += 1
            return super().create(workload, idempotency_key)  # same answer, or refused
        data = {"id": f"dir-{workload.key.name}", "idempotencyKey": idempotency_key,
                "manifest": workload.manifest, "phase": "Succeeded"}
        self._write(workload.key, data)
        with open(self.root / "created.log", "a") as log:
            log.write(f"{workload.key.kind}/{workload.key.name} {self.replica}\n")
        return self._observed(workload.key, data)


class ProjectDirs:
    """One FinishedDir per project (each binding is its own project), so that a
    binding's listing reads its own ten files, not every binding's."""

    name = "dir"
    native_kinds = DirProvider.native_kinds

    def __init__(self, root: Path, replica: str) -> None:
        self.root, self.replica = root, replica
        self.dirs: dict[str, FinishedDir] = {}
        self.lock = threading.Lock()

    def _dir(self, project: str) -> FinishedDir:
        with self.lock:
            if project not in self.dirs:
                self.dirs[project] = FinishedDir(self.root / project, self.replica)
            return self.dirs[project]

    def close(self) -> None:
        pass

    def create(self, workload: Workload, idempotency_key: str) -> Observed:
        return self._dir(workload.key.project).create(workload, idempotency_key)

    def patch(self, workload: Workload, changes: dict) -> Observed:
        return self._dir(workload.key.project).patch(workload, changes)

    def delete(self, key: ResourceKey) -> None:
        self._dir(key.project).delete(key)

    def get(self, key: ResourceKey) -> Observed | None:
        return self._dir(key.project).get(key)

    def list_owned(self, project: str, instance: str) -> list[Observed]:
        return self._dir(project).list_owned(project, instance)


def replica(name: str, state: str, state_dir: str, backend: str, base_url: str, count: int,
            interval: float, ttl: float, conn: Connection, run_id: str) -> None:
    """One reconciler process: `Service.run` until the parent says stop (or a SIGKILL).
    Each event goes to the parent on this replica's own pipe, so that a replica killed
    mid-write leaves no lock held that the others would wait on."""
    bench_bindings.RUN = run_id
    send_lock = threading.Lock()

    def send(*event: object) -> None:
        with send_lock:
            conn.send(event)

    store = Store.open(state)
    settings = Settings(
        state_dir=Path(state_dir) / name, instance="bench", checks={"gitnotes": False},
        bindings=tuple(Binding(id=b, url=f"{base_url}{b}.git", path="manifests", project=b,
                               provider="dir", interval=interval)
                       for b in binding_ids(count)))
    provider = ProjectDirs(Path(backend), name)
    service = build_service(settings, store, provider_factory=lambda _n: provider)
    keeper = LeaseKeeper(store, service.syncs, replica=name, ttl=ttl)
    service.leases = keeper
    tick = keeper.tick

    ticks: list[float] = []  # how long each lease tick took (renewals every ttl / 3)

    def timed_tick(busy: object = ()) -> tuple[set[str], set[str]]:
        at = time.monotonic()
        gained, lost = tick(busy)
        ticks.append(time.monotonic() - at)
        if gained or lost:
            send("leases", name, sorted(gained), sorted(lost), time.time())
        return gained, lost

    keeper.tick = timed_tick
    results: Counter[str] = Counter()
    reconcile = service.reconcile
    # What each binding's last calls found (for the bindings a run reports as never
    # applied): when, whether the lease was held and the lock free before it, the result.
    calls: dict[str, deque] = defaultdict(lambda: deque(maxlen=12))

    refreshing: dict[str, float] = {}  # binding -> when its status refresh began
    refresh_binding = service.refresh_binding
    dropped: Counter[str] = Counter()  # polls of a held binding dropped: its lock was busy

    def timed_refresh(binding_id: str, *args: object, **options: object) -> None:
        refreshing[binding_id] = time.time()
        try:
            refresh_binding(binding_id, *args, **options)
        finally:
            refreshing.pop(binding_id, None)

    service.refresh_binding = timed_refresh

    def timed(binding_id: str, **options: object):
        at, held, locked = time.time(), keeper.holds(binding_id), \
            service.locks[binding_id].locked()
        by_refresh = binding_id in refreshing
        report = reconcile(binding_id, **options)
        if report is None and held and locked:
            dropped["refresh" if by_refresh else "other"] += 1
        calls[binding_id].append((round(at, 2), held, locked, by_refresh,
                                  None if report is None else (
                                      str(report.result), report.commit, report.message)))
        if report is not None:
            results[str(report.result)] += 1
            if report.result == SyncResult.APPLIED:
                send("applied", name, binding_id, report.commit, time.time())
        return report

    def diagnose(bindings: list[str]) -> dict:
        now = keeper.clock()
        out = {}
        for b in bindings:
            sync = service.syncs[b]
            renewed = keeper.renewed_at.get(b)
            out[b] = {"token_held": keeper.held.get(b), "holds": keeper.holds(b),
                      "renewed_ago_s": None if renewed is None else round(now - renewed, 2),
                      "locked": service.locks[b].locked(),
                      "retry_in_s": round(sync.retry_at - sync.clock(), 2),
                      "failures": sync.failures, "errors": sync.errors,
                      "retry_commit": sync.retry_commit, "calls": list(calls[b])}
        return out

    service.reconcile = timed

    def stop_when_told() -> None:
        _, report_on = conn.recv()  # ("stop", the bindings to report on)
        send("diagnosis", name, {"dropped_polls": dict(dropped),
                                 "bindings": diagnose(list(report_on))})
        service.stopping.set()

    threading.Thread(target=stop_when_told, daemon=True).start()
    send("running", name, time.time())
    service.run()
    replays = sum(d.replays for d in provider.dirs.values())
    send("done", name, {"results": dict(results), "replayed_creates": replays,
                        "lease_ticks": len(ticks), "lease_tick": spread(ticks),
                        "lease_ticks_over_renewal": sum(1 for t in ticks if t > ttl / 3),
                        "lease_ticks_over_ttl": sum(1 for t in ticks if t > ttl)})


class Events:
    """The replicas' events, read from their pipes as they come."""

    def __init__(self, conns: dict[str, Connection]) -> None:
        self.conns = dict(conns)
        self.applied: dict[str, list[tuple[str, str, float]]] = defaultdict(list)
        self.gained: dict[str, list[tuple[str, float]]] = defaultdict(list)
        self.lost: dict[str, list[tuple[str, float]]] = defaultdict(list)
        self.diagnosis: dict[str, dict] = {}
        self.lease_changes: list[float] = []
        self.done: dict[str, dict] = {}
        self.running: dict[str, float] = {}

    def drop(self, name: str) -> None:
        self.conns.pop(name, None)

    def read(self, timeout: float) -> None:
        by_conn = {c: n for n, c in self.conns.items()}
        for conn in wait(list(by_conn), timeout=timeout):
            try:
                event = conn.recv()
            except (EOFError, OSError):
                self.drop(by_conn[conn])
                continue
            what = event[0]
            if what == "applied":
                _, who, binding, commit, at = event
                self.applied[binding].append((who, commit, at))
            elif what == "leases":
                _, who, gained, lost, at = event
                self.lease_changes.append(at)
                for binding in gained:
                    self.gained[binding].append((who, at))
                for binding in lost:
                    self.lost[binding].append((who, at))
            elif what == "diagnosis":
                self.diagnosis[event[1]] = event[2]
            elif what == "running":
                self.running[event[1]] = event[2]
            elif what == "done":
                self.done[event[1]] = event[2]


def spread(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"max_s": None, "p50_s": None, "p99_s": None}
    return {"max_s": round(max(values), 2), "p50_s": round(percentile(values, 50), 2),
            "p99_s": round(percentile(values, 99), 2)}


def check(state: str, backend: Path, ids: list[str], repos: dict[str, Repo],
          tips: dict[str, str]) -> dict:
    """The crash tests' checks over every binding of the run."""
    store = Store.open(state)
    try:
        wrong_commit, wrong_inventory, wrong_backend = [], [], []
        for binding in ids:
            repo = repos[binding]
            expected = {f"{repo.kinds[i % len(repo.kinds)][0]}-{i}": f"{cap}.00"
                        for i, cap in repo.caps.items()}
            record = store.get_binding(binding)
            if record is None or record.last_applied_commit != tips[binding]:
                wrong_commit.append(binding)
            inventory = {r.key.name: r.manifest["spec"]["maxCostUSD"]
                         for r in store.list_inventory(binding_id=binding)
                         if not getattr(r, "deleted", False)}
            if inventory != expected:
                wrong_inventory.append(binding)
            live = {}
            for path in (backend / binding).glob("*.json"):  # Kind.project.name.json
                manifest = json.loads(path.read_text())["manifest"]
                live[path.stem.split(".", 2)[2]] = manifest["spec"]["maxCostUSD"]
            # The backend keeps each resource as created: a change to a finished run is
            # recorded, never sent (plan.py: "in-place changes have no effect").
            made = {name: "1.00" for name in expected}
            if live != made:
                wrong_backend.append({"binding": binding, "differ": {
                    k: [live.get(k), made.get(k)] for k in sorted({*live, *made})
                    if live.get(k) != made.get(k)}})
        pending = [i for i in store.pending_intents() if i.binding_id in set(ids)]
        table = Intent.__table__  # type: ignore[attr-defined]
        prefix = ids[0].rsplit("-", 1)[0] + "-%"
        with store._engine.connect() as conn:  # the journal, read as it is
            rows = conn.execute(select(table.c.kind, table.c.project, table.c.name,
                                       table.c.state).where(table.c.action == "create",
                                                            table.c.binding_id.like(prefix)))
            intents = Counter((kind, project, name) for kind, project, name, st in rows
                              if st == "done")
    finally:
        store.close()
    created: Counter[str] = Counter()
    by_replica: Counter[str] = Counter()
    for binding in ids:
        log = backend / binding / "created.log"
        for line in log.read_text().splitlines() if log.exists() else []:
            key, who = line.split()
            created[f"{binding}/{key}"] += 1
            by_replica[who] += 1
    expected_creates = sum(len(repos[b].caps) for b in ids)
    return {
        "bindings_not_at_tip": len(wrong_commit), "not_at_tip_sample": wrong_commit[:5],
        "inventory_not_the_tip": len(wrong_inventory),
        "inventory_wrong_sample": wrong_inventory[:5],
        "backend_not_the_tip": len(wrong_backend), "backend_wrong_sample": wrong_backend[:5],
        "intents_pending": len(pending),
        "backend_creations": sum(created.values()), "expected_creations": expected_creates,
        "created_twice": sorted(k for k, n in created.items() if n > 1)[:10],
        "created_by_replica": dict(sorted(by_replica.items())),
        "done_create_intents": sum(intents.values()),
        "keys_with_two_done_create_intents": sum(1 for n in intents.values() if n > 1),
        "nothing_lost": not (wrong_commit or wrong_inventory or wrong_backend or pending),
        "nothing_applied_twice": (not any(n > 1 for n in created.values())
                                  and not any(n > 1 for n in intents.values())),
    }


def stored_state(state: str, bindings: list[str], since: float) -> dict:
    """What the store holds of each binding: its lease, polls, commits and last syncs."""
    out = {}
    with Store.open(state) as store:
        for b in bindings:
            lease = store.lease_of(b)
            record = store.get_binding(b)
            out[b] = {
                "lease": None if lease is None else {
                    "holder": lease[0], "expires_in_s": round(lease[1].timestamp()
                                                              - time.time(), 2),
                    "token": lease[2]},
                "last_seen": record and (record.last_seen_commit or "")[:8],
                "last_applied": record and (record.last_applied_commit or "")[:8],
                "last_error": record and record.last_error,
                "last_poll_s": record and record.last_poll_at and round(
                    record.last_poll_at.timestamp() - since, 2),
                "syncs": [(s.commit[:8], s.result, s.message,
                           round(s.started_at.timestamp() - since, 2))
                          for s in store.list_syncs(b, limit=5)],
                "pending_intents": len(store.pending_intents(b))}
    return out


def run(count: int, replicas: int, interval: float, ttl: float, state: str,
        wait: float) -> dict:
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ids = binding_ids(count)
        made = time.time()
        repos = {b: Repo(root / "srv" / f"{b}.git", MANIFESTS, "mixed") for b in ids}
        made = time.time() - made
        tips = {b: str(r.repo.references["refs/heads/main"].target) for b, r in repos.items()}
        Store.open(state).close()  # migrated once, before the replicas race to it
        stop, server_out = context.Event(), context.Queue()
        server = context.Process(target=serve, args=(str(root / "srv"), server_out, stop))
        server.start()
        base_url = server_out.get(timeout=60)
        names = [f"replica-{n}" for n in range(replicas)]
        pipes = {n: context.Pipe() for n in names}
        procs = {n: context.Process(target=replica, args=(
            n, state, str(root), str(root / "backend"), base_url, count, interval, ttl,
            pipes[n][1], bench_bindings.RUN)) for n in names}
        started = time.time()
        for p in procs.values():
            p.start()
        events = Events({n: pipes[n][0] for n in names})
        deadline = time.time() + FIRST_RECONCILE_DEADLINE
        while time.time() < deadline and not all(b in events.applied for b in ids):
            events.read(1.0)
        first_ok = all(b in events.applied for b in ids)
        first_full = (max(events.applied[b][0][2] for b in ids)
                      - min(events.running.values())) if first_ok else None
        started_s = min(events.running.values(), default=started) - started
        # Settled: no lease changed hands for two renewal periods.
        settle_deadline = time.time() + 3 * ttl + 60
        while time.time() < settle_deadline:
            last = max(events.lease_changes, default=started)
            if time.time() - last > 2 * ttl / 3 + 1:
                break
            events.read(0.5)
        load_before_kill = _loadavg()
        victim = names[0]
        with Store.open(state) as store:
            holders = {b: (store.lease_of(b) or ("?",))[0] for b in ids}
        held = Counter(holders.values())
        victims = [b for b in ids if holders[b] == victim]
        killed_at = time.time()
        os.kill(procs[victim].pid, signal.SIGKILL)
        events.drop(victim)
        for binding in victims:  # a new commit on each: patch manifest 0, add manifest 10
            repo = repos[binding]
            repo.caps[0] += 1
            repo._write(0)
            repo.caps[NEW] = 1
            repo._write(NEW)
            tips[binding] = repo.commit("after the kill: raise manifest 0's cap, add one")
        pushed_s = time.time() - killed_at
        wait_until = killed_at + wait
        taken: dict[str, float] = {}
        applied: dict[str, float] = {}
        while time.time() < wait_until and len(applied) < len(victims):
            events.read(0.5)
            for binding in victims:
                if binding not in taken:
                    at = [t for who, t in events.gained.get(binding, ())
                          if who != victim and t >= killed_at]
                    if at:
                        taken[binding] = min(at)
                if binding not in applied:
                    at = [t for who, commit, t in events.applied.get(binding, ())
                          if who != victim and commit == tips[binding]]
                    if at:
                        applied[binding] = min(at)
        load_after = _loadavg()
        time.sleep(min(interval, 10))  # any late second creation shows in the checks
        missing = sorted(set(victims) - set(applied))[:10]
        stored = stored_state(state, missing, killed_at)
        for n in names[1:]:
            pipes[n][0].send(("stop", missing))
        stop_deadline = time.time() + 120
        while time.time() < stop_deadline and len(events.done) < replicas - 1:
            events.read(1.0)
        for p in procs.values():
            p.join(timeout=30)
        stop.set()
        host = server_out.get(timeout=60)
        server.join(timeout=60)
        checks = check(state, root / "backend", ids, repos, tips)
    took = [applied[b] - killed_at for b in applied]
    takeover = [taken[b] - killed_at for b in taken]
    target = ttl + interval
    by_survivor = Counter(next(who for who, c, _t in events.applied[b]
                               if c == tips[b] and who != victim) for b in applied)
    return {
        "bindings": count, "manifests_each": MANIFESTS, "replicas": replicas,
        "state": state.split(":", 1)[0], "interval_s": interval, "lease_ttl_s": ttl,
        "lease_renewal_s": round(ttl / 3, 2),
        "settings_note": ("LeaseKeeper's default lease time" if ttl == DEFAULT_TTL
                          else f"a shortened lease time ({ttl} s; default {DEFAULT_TTL} s)")
        + (", the default 30 s interval" if interval == 30 else
           f", a shortened interval ({interval} s; default 30 s)"),
        "repositories_made_s": round(made, 1),
        "processes_started_s": round(started_s, 1),
        "first_full_reconcile_s": round(first_full, 1) if first_ok else None,
        "held_before_kill": dict(sorted(held.items())),
        "killed": victim, "bindings_of_killed": len(victims),
        "push_after_kill_s": round(pushed_s, 2),
        "loadavg_before_kill": load_before_kill, "loadavg_after_takeover": load_after,
        "lease_taken_over": len(taken), "lease_taken_from_kill": spread(takeover),
        "new_commit_applied_by_survivor": len(applied),
        "kill_to_applied": spread(took),
        "applied_by": dict(sorted(by_survivor.items())),
        "never_applied": missing,
        "never_applied_why": {b: {
            "store": stored.get(b),
            "lease_events": sorted([("gained", w, round(t - killed_at, 2))
                                    for w, t in events.gained.get(b, ())]
                                   + [("lost", w, round(t - killed_at, 2))
                                      for w, t in events.lost.get(b, ())],
                                   key=lambda e: e[2]),
            "applied_events": [(w, c[:8], round(t - killed_at, 2))
                               for w, c, t in events.applied.get(b, ())],
            "tip": tips[b][:8],
            "replicas": {n: {**d["bindings"][b], "calls": [
                (round(at - killed_at, 2), held, locked, by_refresh,
                 r if r is None else (r[0], (r[1] or "")[:8], r[2]))
                for at, held, locked, by_refresh, r in d["bindings"][b]["calls"]]}
                for n, d in sorted(events.diagnosis.items()) if b in d["bindings"]}}
            for b in missing},
        "polls_dropped_lock_busy": {n: d["dropped_polls"]
                                    for n, d in sorted(events.diagnosis.items())},
        "waited_from_kill_s": wait,
        "within_target": sum(1 for t in took if t <= target),
        "target_s": target, "target_note": "lease time + one interval",
        "met": bool(victims) and len(applied) == len(victims) and max(took) <= target,
        "checks": checks,
        "per_replica": {n: d for n, d in sorted(events.done.items())},
        "git_host": host,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bindings", type=int, default=1000)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--interval", type=float, default=30.0)
    parser.add_argument("--ttl", type=float, default=DEFAULT_TTL, help="the lease time")
    parser.add_argument("--state", required=True, help="postgresql+psycopg://...")
    parser.add_argument("--wait", type=float, default=300.0,
                        help="how long after the kill to wait for the new commits")
    args = parser.parse_args()
    if not args.state.startswith("postgresql"):
        parser.error("--state must be PostgreSQL (the replicas share it)")
    if args.replicas < 2:
        parser.error("--replicas must be 2 or more: one is killed")
    load = _loadavg()
    result = run(args.bindings, args.replicas, args.interval, args.ttl, args.state,
                 args.wait)
    print(json.dumps({"benchmark": "failover", "loadavg_start": load, **result,
                      "loadavg_end": _loadavg()}))


if __name__ == "__main__":
    main()
