"""Push-to-apply latency with a webhook: `nodus-gitops serve` on the local backend with a
30 s poll interval; each round pushes a commit adding a Job over smart HTTP, POSTs a
signed generic webhook, and measures until the Job's process is running (its phase leaves
Queued in the API). Prints JSON with the median and the poll path's figures at 30 s for
comparison. Target: under 1 s.

With `--bindings N` (N > 1) the same service also serves N - 1 other bindings, 10
manifests each (Jobs, Pipelines and Sweeps: bench_reconcile.py's), each its own bare
repository over HTTP, polled on the same 30 s interval; the rounds start once every
binding has had its first sync and spread over one interval, so the webhook's binding
is measured while the others are polled. The measured binding stays on the local
backend; the others are on the fake backend, their workloads Succeeded at once
(bench_bindings.py's): 9,990 real local runs would measure the machine, not the
reconciler. `serve` cannot be given a fake backend, so the service then runs in a child
of this script (`--serve`) doing what `serve` does (the same settings from the same
config file, `Service.run` with the web server), with the others added; the Git host
runs in a process of its own, as in bench_bindings.py.

`--trace` (with `--bindings` above 1) times each step of every round in the service:
the webhook's trigger, the measured binding's syncs (waiting for its lock, then the
sync), its status reads (a sync's follow-up reads, the status tick's) and what each
read found, the backend's create and reads; each step in seconds from the round's push.

Run: python bench/bench_webhook.py [--rounds 10] [--bindings 1] [--trace]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))
from nodus_gitops.web.hooks import sign  # noqa: E402

from tests.fixtures_git import ManifestRepo, serve_git_http  # noqa: E402
from tests.support.local_runs import stop_local_runs  # noqa: E402

JOB = ("apiVersion: nodus.dev/v1\nkind: Job\nmetadata:\n  name: {name}\nspec:\n"
       "  command: [python3, -c, 'import time; time.sleep(5)']\n")
SECRET = "bench-secret"
INTERVAL = 30


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


OTHER_MANIFESTS = 10


def other_ids(count: int) -> list[str]:
    return [f"other-{n:04d}" for n in range(count)]


@contextlib.contextmanager
def git_host(root: Path, separate: bool) -> Iterator[tuple[object, dict]]:
    """The Git host: (url_for, its figures once stopped). In this process for one
    binding (as before); in a process of its own beside many (bench_bindings.py's)."""
    if not separate:
        with serve_git_http(root) as git:
            yield git.url_for, {}
        return
    from bench_bindings import serve

    root.mkdir(parents=True, exist_ok=True)
    context = multiprocessing.get_context("spawn")
    stop, out = context.Event(), context.Queue()
    process = context.Process(target=serve, args=(str(root), out, stop))
    process.start()
    base = out.get(timeout=60)
    figures: dict = {}
    try:
        yield (lambda name: f"{base}{name.removesuffix('.git')}.git"), figures
    finally:
        stop.set()
        figures.update(out.get(timeout=60))
        process.join(timeout=60)


def serve_with_others(config: str, others: int, base_url: str, ready: Path) -> None:
    """`serve --config CONFIG` with `others` bindings more on the fake backend (the
    config's own on theirs). Writes `ready` once every binding has had its first sync,
    and on SIGTERM `ready`.polls: the polls it made of the others (in all, and from the
    first round on)."""
    from bench_bindings import SharedFakeProvider, finished_at_once
    from nodus_gitops.backends import build_backend
    from nodus_gitops.commands import open_store
    from nodus_gitops.config import Binding, load_settings
    from nodus_gitops.logging_setup import setup_logging
    from nodus_gitops.web.server import start_server
    from nodus_gitops.wiring import build_service

    extra = tuple(Binding(id=b, url=f"{base_url}{b}.git", path="manifests", project=b,
                          provider="fake", interval=INTERVAL) for b in other_ids(others))
    settings = load_settings(config, bindings=extra)
    setup_logging()
    store = open_store(settings)
    fake = SharedFakeProvider(finished_at_once)
    service = build_service(settings, store, provider_factory=lambda name: (
        fake if name == "fake" else build_backend(
            name, settings.provider_settings(name), settings.state_dir)))
    synced: set[str] = set()
    polls = {"others": 0, "others_once_ready": 0}
    lock = threading.Lock()
    reconcile = service.reconcile

    def counted(binding_id: str, **options: object):
        report = reconcile(binding_id, **options)
        if report is not None:
            with lock:
                polls["others"] += binding_id != "bench"
                polls["others_once_ready"] += binding_id != "bench" and ready.exists()
                if binding_id not in synced:
                    synced.add(binding_id)
                    if len(synced) == len(service.syncs):
                        written = ready.with_suffix(".tmp")  # whole, or not there
                        written.write_text(str(time.time()))
                        os.replace(written, ready)
        return report

    service.reconcile = counted
    trace = os.environ.get("BENCH_WEBHOOK_TRACE")
    steps = trace_steps(service) if trace else []
    service.run(serve_http=lambda svc: start_server(svc, settings.listen))
    ready.with_suffix(".polls").write_text(json.dumps(polls))
    if trace:
        Path(trace).write_text(json.dumps(steps))


def trace_steps(service: object, binding: str = "bench") -> list:
    """Record [time, step, detail] of the measured binding's path: the trigger, its
    syncs (the lock's wait apart), its status reads and the backend's calls."""
    steps: list = []
    lock = threading.Lock()

    def note(step: str, detail: object = None) -> None:
        with lock:
            steps.append([time.time(), step, detail])

    def around(owner: object, name: str, describe) -> None:
        inner = getattr(owner, name)

        def wrapped(*args: object, **kwargs: object) -> object:
            if not describe(args, kwargs, None, True):
                return inner(*args, **kwargs)
            note(f"{name} start", describe(args, kwargs, None, False))
            result = inner(*args, **kwargs)
            note(f"{name} end", describe(args, kwargs, result, False))
            return result

        setattr(owner, name, wrapped)

    def ours(a: tuple, _k: dict, _r: object, ask: bool) -> object:
        return a[0] == binding if ask else threading.current_thread().name

    around(service, "trigger", ours)
    around(service, "refresh_binding", lambda a, k, r, ask: a[0] == binding if ask else (
        threading.current_thread().name, "all" if len(a) < 2 or a[1] is None else "keys"))
    sync = service.syncs[binding]
    reconcile_once = sync.reconcile_once

    def traced_sync(**options: object) -> object:
        note("sync start (lock held)")
        report = reconcile_once(**options)
        note("sync end", str(report.result))
        return report

    sync.reconcile_once = traced_sync
    around(sync, "refresh", lambda a, k, r, ask: True if ask else r)
    provider = sync.applier.provider
    around(provider, "create", lambda a, k, r, ask: True if ask else getattr(r, "phase", None))
    around(provider, "get", lambda a, k, r, ask: True if ask else (
        f"{a[0]}: {getattr(r, 'phase', None)}" if r is not None else str(a[0])))
    return steps


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--bindings", type=int, default=1,
                        help="bindings served (the measured one and N - 1 others)")
    parser.add_argument("--trace", action="store_true",
                        help="time each step of every round in the service (--bindings > 1)")
    parser.add_argument("--serve", nargs=4, metavar=("CONFIG", "OTHERS", "BASE_URL", "READY"),
                        help=argparse.SUPPRESS)  # the child that serves them
    args = parser.parse_args()
    if args.serve:
        config, others, base_url, ready = args.serve
        serve_with_others(config, int(others), base_url, Path(ready))
        return
    others = max(0, args.bindings - 1)
    load_start = _loadavg()
    extra: dict = {}
    with tempfile.TemporaryDirectory() as tmp, git_host(Path(tmp) / "git", others > 0) as (
            url_for, host):
        root = Path(tmp)
        made = time.time()
        if others:
            from bench_reconcile import Repo

            for b in other_ids(others):
                Repo(root / "git" / f"{b}.git", OTHER_MANIFESTS, "mixed")
        made = time.time() - made
        repo = ManifestRepo(root / "git", "manifests", root / "work",
                            push_url=url_for("manifests"))
        repo.write("jobs/job-0.yaml", JOB.format(name="job-0"))
        repo.commit("first")
        repo.push()
        port = free_port()
        config = root / "config.yaml"
        config.write_text(json.dumps({
            "listen": f"127.0.0.1:{port}", "stateDir": str(root / "state"),
            "repos": [{"id": "bench", "url": url_for("manifests"), "project": "p",
                       "interval": f"{INTERVAL}s"}],
            "checks": {"gitnotes": False, "webhooks": {"generic": SECRET}},
        }))
        ready = root / "ready"
        command = [sys.executable, "-P", "-m", "nodus_gitops.cli", "serve",
                   "--config", str(config)]
        if others:
            command = [sys.executable, "-P", str(Path(__file__).resolve()), "--serve",
                       str(config), str(others), url_for("x").removesuffix("x.git"),
                       str(ready)]
        started = time.time()
        log = root / "serve.log"  # the service's log, shown if it fails to come up
        trace = root / "steps.json"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        if args.trace and others:
            env["BENCH_WEBHOOK_TRACE"] = str(trace)
        with open(log, "wb") as err:
            server = subprocess.Popen(command, cwd=root, stdout=subprocess.DEVNULL,
                                      stderr=err, env=env)
        api = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + (60 if not others else 900)
            while time.monotonic() < deadline:
                try:
                    if (ready.exists() if others else
                            httpx.get(f"{api}/api/v1/resources", timeout=2).json()):
                        break
                except httpx.HTTPError:
                    pass
                if server.poll() is not None:
                    raise SystemExit(f"the service exited ({server.returncode}): "
                                     f"{log.read_text()[-2000:]}")
                time.sleep(0.2)
            else:
                raise SystemExit("the service did not come up (or sync every binding): "
                                 f"{log.read_text()[-2000:]}")
            if others:
                extra["first_full_reconcile_s"] = round(
                    float(ready.read_text()) - started, 1)
                extra["loadavg_at_first_round"] = _loadavg()
            rounds_started = time.time()
            latencies, pushed = [], []
            with httpx.Client(timeout=10) as client:
                for n in range(1, args.rounds + 1):
                    name = f"job-{n}"
                    repo.write(f"jobs/{name}.yaml", JOB.format(name=name))
                    repo.commit(f"add {name}")
                    repo.push()  # the push is done: the clock starts
                    start = time.perf_counter()
                    pushed.append(time.time())
                    body = json.dumps({"event": "push", "repository": "manifests"}).encode()
                    answer = client.post(f"{api}/hooks/generic", content=body, headers={
                        "X-Nodus-Signature-256": "sha256=" + sign(body, SECRET),
                        "Content-Type": "application/json"})
                    assert answer.status_code == 202, answer.text
                    url = f"{api}/api/v1/resources/Job/p/{name}"
                    while True:
                        r = client.get(url)
                        if r.status_code == 200 and r.json()["phase"] in ("Running", "Succeeded"):
                            break
                        if time.perf_counter() - start > 20:
                            raise SystemExit(f"{name} did not start: {r.text[:200]}")
                        time.sleep(0.01)
                    latencies.append(time.perf_counter() - start)
                    if others:  # the rounds spread over one interval of the others' polls
                        time.sleep(max(1.0, INTERVAL / args.rounds))
            rounds_s = time.time() - rounds_started
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=60)
            stop_local_runs(root / "state" / "local")  # each Job's filesystem is a mount
        if others:
            polls = ready.with_suffix(".polls")
            extra.update({
                "other_bindings": others, "other_manifests_each": OTHER_MANIFESTS,
                "others_backend": "fake (Succeeded at once)",
                "repositories_made_s": round(made, 1), "rounds_s": round(rounds_s, 1),
                "other_polls": json.loads(polls.read_text()) if polls.exists() else None})
        if trace.exists():
            extra["rounds_steps"] = round_steps(json.loads(trace.read_text()), pushed,
                                                latencies)
    if host:
        extra["git_host"] = host
    print(json.dumps({
        "benchmark": "webhook",
        "bindings": others + 1,
        "rounds": len(latencies),
        "push_to_running_median_s": round(statistics.median(latencies), 3),
        "push_to_running_max_s": round(max(latencies), 3),
        "push_to_running_s": [round(t, 3) for t in latencies],
        "target_s": 1.0,
        **extra,
        "poll_path_at_30s": {"mean_wait_s": INTERVAL / 2, "worst_wait_s": INTERVAL,
                             "note": "a poll finds a push after half the interval on average"},
        "loadavg_start": load_start, "loadavg_end": _loadavg(),
    }))


def round_steps(steps: list, pushed: list[float], latencies: list[float]) -> list:
    """Each round's steps in the service, in seconds from its push, to its end + 0.5 s."""
    rounds = []
    for n, (at, took) in enumerate(zip(pushed, latencies, strict=True), 1):
        rounds.append({"round": n, "push_to_running_s": round(took, 3), "steps": [
            f"{t - at:+.3f} {step}" + (f" {detail}" if detail is not None else "")
            for t, step, detail in steps if at - 0.05 <= t <= at + took + 0.5]})
    return rounds


def _loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


if __name__ == "__main__":
    main()
