"""Many bindings on one reconciler: N repositories of 10 manifests each (Jobs, Pipelines
and Sweeps), each its own bare repository served over HTTP on 127.0.0.1, reconciled by
`serve`'s own loop (`Service.run`: the scheduler, the status refresh, the leases) against
the fake backend.

Measures the first full reconcile (from the scheduler's start to the last binding's
first applied sync), then over a window without pushes: how far each binding's polls
fall behind its interval (the slowest binding's lag, and the p50/p99 over every
binding's worst lag) and the reconciler's own CPU time per idle poll (the process's CPU
time over the window, everything it does then, divided by the polls it made). The Git
server runs in a process of its own: its time is the host's, reported apart.

With `--replicas 3 --state postgresql+psycopg://...` as many processes share the store
and split the bindings by their leases; each reports how many it held.
The backend's Jobs end Succeeded at once (an idle reconciler: nothing left to watch);
`--running` keeps them Running, so the status refresh reads every one each tick.
Prints JSON. Targets: first full reconcile < 60 s (one replica), < 25 s (three);
every binding polled within its interval; CPU per idle poll < 1 ms.

`--trace` records why each late poll was late (`poll_trace.py`): for the bindings
that lagged, the cause of each one's worst gap counted, and the slowest ones' events.

Run: python bench/bench_bindings.py [--bindings 1000] [--interval 30] [--seconds 90]
                                    [--replicas 1] [--state URL] [--running] [--trace]
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import multiprocessing
import os
import resource
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))
from bench_reconcile import Repo  # noqa: E402
from nodus_gitops.config import Binding, Settings  # noqa: E402
from nodus_gitops.floor.results import SyncResult  # noqa: E402
from nodus_gitops.leases import LeaseKeeper  # noqa: E402
from nodus_gitops.providers.base import FakeProvider, Observed  # noqa: E402
from nodus_gitops.state.store import Store  # noqa: E402
from nodus_gitops.wiring import build_service  # noqa: E402

MANIFESTS = 10
FIRST_RECONCILE_DEADLINE = 600  # seconds: past this the window starts anyway


# Binding ids of this run: a store shared with earlier runs (PostgreSQL) has their
# bindings and inventories, which are not this run's.
RUN = os.environ.get("BENCH_RUN") or f"{os.getpid():x}"


def binding_ids(count: int) -> list[str]:
    return [f"team-{RUN}-{n:04d}" for n in range(count)]


def serve(root: str, out: multiprocessing.Queue, stop: multiprocessing.Event) -> None:
    """The Git host: one HTTP server for every repository under `root`."""
    from tests.fixtures_git import serve_git_http
    with serve_git_http(Path(root)) as server:
        out.put(server.url_for("x").removesuffix("x.git"))
        stop.wait()
        times = os.times()
        out.put({"requests": server.requests, "busy_s": round(server.busy_seconds, 1),
                 "cpu_s": round(times.user + times.system + times.children_user
                                + times.children_system, 1)})


class SharedFakeProvider(FakeProvider):
    """The fake backend behind every binding, safe to call from the sync workers at once
    (FakeProvider alone is not: listing it while another thread creates fails)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.lock = threading.RLock()

    def create(self, *args: object) -> Observed:
        with self.lock:
            return super().create(*args)

    def patch(self, *args: object) -> Observed:
        with self.lock:
            return super().patch(*args)

    def delete(self, *args: object) -> None:
        with self.lock:
            super().delete(*args)

    def get(self, *args: object) -> Observed | None:
        with self.lock:
            return super().get(*args)

    def list_owned(self, *args: object) -> list[Observed]:
        with self.lock:
            return super().list_owned(*args)


def finished_at_once(op: str, key: object, workload: object) -> Observed | None:
    """The fake backend's answer to a create: the workload already Succeeded."""
    if op == "create":
        return Observed(key, provider_id=f"fake-{key}", phase="Succeeded")
    return None


def replica(name: str, state: str, state_dir: str, base_url: str, count: int,
            interval: float, running: bool, several: bool, control: multiprocessing.Queue,
            out: multiprocessing.Queue, run_id: str, trace: bool = False) -> None:
    """One reconciler process: `Service.run` until the parent's window is over."""
    global RUN
    RUN = run_id
    store = Store.open(state)
    settings = Settings(
        state_dir=Path(state_dir) / name, instance="bench", checks={"gitnotes": False},
        bindings=tuple(Binding(id=b, url=f"{base_url}{b}.git", path="manifests", project=b,
                               interval=interval) for b in binding_ids(count)))
    started = time.time()
    provider = SharedFakeProvider(None if running else finished_at_once)
    service = build_service(settings, store, provider_factory=lambda _n: provider)
    if several:  # else `run` holds every lease itself, as `serve` does alone
        service.leases = LeaseKeeper(store, service.syncs, replica=name)
    built = time.time()
    polls: dict[str, list[float]] = defaultdict(list)  # binding -> wall time of each poll
    first_applied: dict[str, float] = {}
    results: dict[str, int] = defaultdict(int)
    errors = ErrorCount()
    logging.getLogger().addHandler(errors)  # crashed syncs return no report: logged
    reconcile = service.reconcile
    tracer = None
    if trace:
        import nodus_gitops.service as service_module
        from poll_trace import Trace
        tracer = Trace(service)
        service_module.BackgroundScheduler = tracer.scheduler_class()
        tracer.start()

    def timed(binding_id: str, **options: object):
        at = time.time()
        report = tracer.call(reconcile, binding_id, **options) if tracer \
            else reconcile(binding_id, **options)
        if report is not None:  # it ran (not another replica's, nor already running)
            polls[binding_id].append(at)
            results[str(report.result)] += 1
            if report.result == SyncResult.APPLIED and binding_id not in first_applied:
                first_applied[binding_id] = time.time()
                out.put(("applied", binding_id, first_applied[binding_id]))
        return report

    service.reconcile = timed  # what the scheduler calls, as `run` looks it up
    cpu: dict[str, float] = {}

    def window() -> None:
        start, end = control.get()
        time.sleep(max(0.0, start - time.time()))
        times = os.times()
        cpu["start"] = times.user + times.system
        time.sleep(max(0.0, end - time.time()))
        times = os.times()
        cpu["end"] = times.user + times.system
        service.stopping.set()

    threading.Thread(target=window, daemon=True).start()
    run_started = time.time()
    out.put(("running", name, run_started))
    service.run()
    out.put(("done", name, {
        "build_s": round(built - started, 2), "run_started": run_started,
        "polls": dict(polls), "cpu_s": cpu["end"] - cpu["start"],
        "cpu_s_to_window": round(cpu["start"], 1),
        "held": len(first_applied), "results": dict(results), "errors_logged": errors.count,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
        "trace": tracer.result() if tracer else None}))


class ErrorCount(logging.Handler):
    """How many errors the reconciler logged (a crashed sync, a failed lease renewal)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


def lags(polls: dict[str, list[float]], ids: list[str], start: float, end: float,
         interval: float) -> dict[str, float]:
    """Each binding's worst lag behind its interval within [start, end]: how much longer
    than `interval` a gap between two of its polls (or since its last poll, at `end`)
    lasted. A binding not polled at all lags the whole window."""
    return {b: max(0.0, g[1] - g[0] - interval)
            for b, g in worst_gaps(polls, ids, start, end, interval).items()}


def worst_gaps(polls: dict[str, list[float]], ids: list[str], start: float, end: float,
               interval: float) -> dict[str, tuple[float, float]]:
    """Each binding's longest gap between two polls (or its last poll and `end`)."""
    worst = {}
    for binding in ids:
        times = sorted(polls.get(binding, []))
        inside = [t for t in times if start <= t <= end]
        before = [t for t in times if t < start][-1:]
        marks = [*before, *inside] or [start - interval]
        gaps = [*zip(marks, marks[1:], strict=False), (marks[-1], end)]
        worst[binding] = max(gaps, key=lambda g: g[1] - g[0])
    return worst


def why_late(done: dict, polls: dict[str, list[float]], ids: list[str],
             window: tuple[float, float], interval: float, origin: float) -> dict:
    """From the replicas' traces: each late binding's worst gap's cause, counted; the
    slowest five's events; the lock holds by what held them; the lease ticks; the
    workers' queue and the follow-up backlog over time (seconds from `origin`)."""
    from poll_trace import classify, explain
    events: dict[str, list] = defaultdict(list)
    holds: dict[str, list[float]] = defaultdict(list)
    ticks, samples = [], []
    for data in done.values():
        trace = data.get("trace") or {}
        for binding, got in trace.get("events", {}).items():
            events[binding].extend(got)
        for label, got in trace.get("holds", {}).items():
            holds[label].extend(got)
        ticks.extend(trace.get("lease_ticks", []))
        samples.extend(trace.get("samples", []))
    for got in events.values():
        got.sort(key=lambda e: e[1])
    gaps = worst_gaps(polls, ids, *window, interval)
    late = {b: g for b, g in gaps.items() if g[1] - g[0] - interval > 1.0}
    causes: dict[str, int] = defaultdict(int)
    for binding, gap in late.items():
        causes[classify(events[binding], gap)] += 1
    slowest = sorted(late, key=lambda b: late[b][1] - late[b][0])[-5:]
    return {
        "late_bindings": len(late), "causes": dict(causes),
        "slowest": {b: explain(events[b], late[b], origin) for b in slowest},
        "lock_holds": {label: {"count": len(got), "total_s": round(sum(got), 1),
                               "max_s": round(max(got), 3)}
                       for label, got in holds.items() if got},
        "lease_ticks": {"count": len(ticks), "max_s": round(max((d for _, d in ticks),
                                                                default=0), 2),
                        "over_5s": [[round(at - origin, 1), round(d, 1)]
                                    for at, d in ticks if d > 5]},
        # every 5 s from the start: [t, polls started, their median and max delay after
        # the fire time, their median and max duration] (the first syncs apart)
        "polls_timeline": poll_timeline(events, origin),
        # every 5th sample: [t, workers' queue, follow-ups waiting, overdue, oldest late s]
        "samples": [[round(s[0] - origin, 1), s[1], s[2], s[3], round(s[4], 1)]
                    for s in sorted(samples)[::5]],
        "window_s": [round(window[0] - origin, 1), round(window[1] - origin, 1)],
    }


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(p / 100 * len(ordered)) - 1)]


def poll_timeline(events: dict[str, list], origin: float) -> list:
    """The regular polls that ran, by 5 s of their start: how many, how long after their
    fire time they started, how long they took (median, max)."""
    slots: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for got in events.values():
        fires = [e for e in got if e[0] == "fire"]
        for e in got:
            if e[0] != "ran":
                continue
            due = [f for f in fires if f[1] <= e[1] + 0.001]
            if len(due) < 2:  # its first sync
                continue
            slots[int((e[1] - origin) // 5)].append((e[1] - due[-1][2], e[2]))
    rows = []
    for slot in sorted(slots):
        delays = sorted(d for d, _ in slots[slot])
        took = sorted(t for _, t in slots[slot])
        rows.append([slot * 5, len(delays), round(delays[len(delays) // 2], 2),
                     round(delays[-1], 2), round(took[len(took) // 2], 3),
                     round(took[-1], 3)])
    return rows


def run(count: int, interval: float, seconds: float, replicas: int,
        state_url: str | None, running: bool, trace: bool = False) -> dict:
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        made = time.time()
        for binding in binding_ids(count):
            Repo(root / "srv" / f"{binding}.git", MANIFESTS, "mixed")
        made = time.time() - made
        state = state_url or f"sqlite:///{root / 'state.db'}"
        store = Store.open(state)  # migrated once, before the replicas race to it
        store.close()
        stop, server_out = context.Event(), context.Queue()
        server = context.Process(target=serve, args=(str(root / "srv"), server_out, stop))
        server.start()
        base_url = server_out.get(timeout=60)
        out = context.Queue()
        controls = [context.Queue() for _ in range(replicas)]
        procs = [context.Process(target=replica, args=(
            f"replica-{n}", state, str(root), base_url, count, interval, running,
            replicas > 1, controls[n], out, RUN, trace)) for n in range(replicas)]
        for p in procs:
            p.start()
        run_starts, applied = [], {}
        busy_start = _cpu_busy()
        deadline = time.time() + FIRST_RECONCILE_DEADLINE
        while len(applied) < count and time.time() < deadline:
            try:
                what, who, at = out.get(timeout=max(0.1, deadline - time.time()))
            except Exception:  # noqa: BLE001 (the queue's Empty: the deadline passed)
                break
            if what == "running":
                run_starts.append(at)
            elif what == "applied":
                applied.setdefault(who, at)
        all_applied = time.time()
        busy_first = _cpu_busy()
        load_first = _loadavg()
        window = (all_applied, all_applied + seconds)
        for control in controls:
            control.put(window)
        done = {}
        while len(done) < replicas:
            what, who, data = out.get(timeout=seconds + 300)
            if what == "done":
                done[who] = data
            elif what == "running":
                run_starts.append(data)
        for p in procs:
            p.join(timeout=60)
        stop.set()
        host = server_out.get(timeout=60)
        server.join(timeout=60)
    polls: dict[str, list[float]] = defaultdict(list)
    for data in done.values():
        for binding, times in data["polls"].items():
            polls[binding].extend(times)
    ids = binding_ids(count)
    worst = lags(polls, ids, *window, interval)
    window_polls = sum(1 for t in (t for ts in polls.values() for t in ts)
                       if window[0] <= t <= window[1])
    cpu = sum(d["cpu_s"] for d in done.values())
    first = max(applied.values()) - min(run_starts) if len(applied) == count else None
    return {
        "bindings": count, "manifests_each": MANIFESTS, "interval_s": interval,
        "replicas": replicas, "state": state.split(":", 1)[0],
        "backend_jobs": "Running" if running else "Succeeded",
        "repositories_made_s": round(made, 1),
        "first_full_reconcile_s": round(first, 2) if first is not None else None,
        "bindings_applied": len(applied),
        "loadavg_after_first": load_first,
        # the host's CPU seconds (every process: replicas, Git host, database) from the
        # replicas' start to the first full reconcile, and the replicas' own share
        "host_cpu_s_to_first": round(busy_first[0] - busy_start[0], 1),
        "host_cpu_idle_s_to_first": round(busy_first[1] - busy_start[1], 1),
        "replicas_cpu_s_to_window": sum(d["cpu_s_to_window"] for d in done.values()),
        "window_s": seconds, "polls_in_window": window_polls,
        "lag_slowest_s": round(max(worst.values()), 2),
        "lag_slowest_binding": max(worst, key=worst.get),
        "lag_p50_s": round(percentile(list(worst.values()), 50), 2),
        "lag_p99_s": round(percentile(list(worst.values()), 99), 2),
        # The slowest three: their polls, in seconds from the window's start.
        "slowest_polls_s": {b: [round(t - window[0], 1) for t in sorted(polls.get(b, []))]
                            for b in sorted(worst, key=worst.get)[-3:]},
        "bindings_polled_within_interval_1s": sum(1 for v in worst.values() if v <= 1.0),
        "cpu_per_idle_poll_ms": round(cpu / window_polls * 1000, 2) if window_polls else None,
        "cpu_s_in_window": round(cpu, 1),
        "per_replica": {name: {"held_first": d["held"], "build_s": d["build_s"],
                               "peak_rss_mb": d["peak_rss_mb"], "results": d["results"],
                               "errors_logged": d["errors_logged"]}
                        for name, d in sorted(done.items())},
        "git_host": host,
        "loadavg_end": _loadavg(),
        **({"why_late": why_late(done, polls, ids, window, interval, min(run_starts))}
           if trace else {}),
    }


def _cpu_busy() -> tuple[float, float]:
    """The host's CPU seconds so far: (busy, idle), every core (/proc/stat)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / tick, idle / tick


def _loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bindings", type=int, default=1000)
    parser.add_argument("--interval", type=float, default=30.0)
    parser.add_argument("--seconds", type=float, default=90.0, help="the idle window")
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--state", help="state URL (PostgreSQL for several replicas)")
    parser.add_argument("--running", action="store_true",
                        help="the backend's workloads stay Running (the status refresh "
                        "reads each one every tick)")
    parser.add_argument("--trace", action="store_true",
                        help="record why each late poll was late (the slowest ones' events)")
    args = parser.parse_args()
    if args.replicas > 1 and not (args.state or "").startswith("postgresql"):
        parser.error("--replicas above 1 needs --state postgresql+psycopg://...")
    load = _loadavg()
    result = run(args.bindings, args.interval, args.seconds, args.replicas, args.state,
                 args.running, args.trace)
    print(json.dumps({"benchmark": "bindings", "loadavg_start": load, **result, "targets": {
        "first_full_reconcile_s": 60 if args.replicas == 1 else 25, "lag_slowest_s": 0,
        "cpu_per_idle_poll_ms": 1}}))


if __name__ == "__main__":
    main()
