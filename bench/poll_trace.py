"""Why a binding's poll came late (`bench_bindings.py --trace`): every scheduler fire of
a binding's job (submitted to the workers, or skipped because its previous run had not
ended), every call of `Service.reconcile` (when it started, how long it took, and when
it did nothing: the binding's lock taken, by what and since when, or its lease not
held), how long each binding lock was held by what, the lease ticks, and once a second
the workers' queue and the follow-up reads' backlog.

`explain` reads a binding's worst gap between two polls out of that record.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any

from apscheduler.events import EVENT_JOB_MAX_INSTANCES, EVENT_JOB_SUBMITTED
from apscheduler.schedulers.background import BackgroundScheduler

_local = threading.local()


def doing() -> str:
    return getattr(_local, "doing", None) or threading.current_thread().name


class TracedLock:
    """A binding's lock that says who holds it: what its thread was doing, since when."""

    def __init__(self, holds: dict[str, list[float]]) -> None:
        self._lock = threading.Lock()
        self.holder: tuple[str, float] | None = None
        self._holds = holds  # label -> hold durations (polls' own excluded)

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        got = self._lock.acquire(blocking, timeout)
        if got:
            self.holder = (doing(), time.time())
        else:
            _local.refused = self.holder
        return got

    def release(self) -> None:
        holder, self.holder = self.holder, None
        if holder is not None and holder[0] != "poll":
            self._holds[holder[0]].append(time.time() - holder[1])
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *_exc: object) -> None:
        self.release()


class Trace:
    def __init__(self, service: Any) -> None:
        self.service = service
        self.events: dict[str, list[tuple]] = defaultdict(list)
        self.holds: dict[str, list[float]] = defaultdict(list)
        self.lease_ticks: list[tuple[float, float]] = []
        self.samples: list[tuple] = []
        self.schedulers: list[BackgroundScheduler] = []
        for binding_id in service.locks:
            service.locks[binding_id] = TracedLock(self.holds)
        self._wrap("refresh_all", "status tick")
        keep = service.keep_leases

        def keep_leases() -> None:
            _local.doing = "lease tick"
            at = time.time()
            try:
                keep()
            finally:
                self.lease_ticks.append((at, time.time() - at))
                _local.doing = None

        service.keep_leases = keep_leases

    def _wrap(self, name: str, label: str) -> None:
        inner = getattr(self.service, name)

        def wrapped(*args: object, **kwargs: object) -> object:
            _local.doing = label
            try:
                return inner(*args, **kwargs)
            finally:
                _local.doing = None

        setattr(self.service, name, wrapped)

    def scheduler_class(self) -> type:
        trace = self

        class TracedScheduler(BackgroundScheduler):
            def __init__(self, *args: object, **kwargs: object) -> None:
                super().__init__(*args, **kwargs)
                trace.schedulers.append(self)
                self.add_listener(trace.on_event, EVENT_JOB_SUBMITTED | EVENT_JOB_MAX_INSTANCES)

        return TracedScheduler

    def on_event(self, event: Any) -> None:
        if event.job_id in self.service.syncs:
            kind = "fire" if event.code == EVENT_JOB_SUBMITTED else "busy"
            self.events[event.job_id].append(
                (kind, time.time(), event.scheduled_run_times[-1].timestamp()))

    def call(self, reconcile: Any, binding_id: str, **options: object) -> Any:
        """`reconcile(binding_id)`, recorded: ("ran"|"lease"|"lock", start, seconds,
        holder's label, how long it had held the lock)."""
        _local.doing, _local.refused = "poll", None
        at = time.time()
        try:
            report = reconcile(binding_id, **options)
        finally:
            _local.doing = None
        took = time.time() - at
        if report is not None:
            self.events[binding_id].append(("ran", at, took, None, None))
        elif self.service.leases is not None and not self.service.leases.holds(binding_id):
            self.events[binding_id].append(("lease", at, took, None, None))
        else:
            holder = _local.refused
            self.events[binding_id].append(
                ("lock", at, took, holder[0] if holder else "?",
                 at - holder[1] if holder else None))
        return report

    def sample_forever(self) -> None:
        """Once a second: the default workers' queue, the follow-up reads waiting and
        how late the oldest of them is."""
        while True:
            time.sleep(1.0)
            now, mono = time.time(), time.monotonic()
            queued = None
            for scheduler in self.schedulers:
                pool = getattr(scheduler._executors.get("default"), "_pool", None)
                if pool is not None:
                    queued = pool._work_queue.qsize()
            due = list(self.service.follow_ups._due)
            overdue = [d for d, *_ in due if d <= mono]
            self.samples.append((now, queued, len(due), len(overdue),
                                 mono - min(overdue) if overdue else 0.0))

    def start(self) -> None:
        threading.Thread(target=self.sample_forever, daemon=True, name="trace").start()

    def result(self) -> dict:
        return {"events": dict(self.events), "holds": dict(self.holds),
                "lease_ticks": self.lease_ticks, "samples": self.samples}


def explain(events: list[tuple], gap: tuple[float, float], origin: float) -> dict:
    """What happened to a binding between two polls `gap` (times from `origin`)."""
    a, b = gap
    inside = [e for e in events if a - 0.001 <= e[1] <= b + 0.001]
    fires = [e for e in events if e[0] == "fire"]
    out = []
    for e in inside:
        if e[0] in ("fire", "busy"):
            out.append(f"{e[1] - origin:.1f} {e[0]} (scheduled {e[2] - origin:.1f})")
        else:
            sched = [f for f in fires if f[1] <= e[1] + 0.001]
            delay = e[1] - sched[-1][2] if sched else None
            line = f"{e[1] - origin:.1f} {e[0]} took {e[2]:.3f}s"
            if delay is not None:
                line += f", {delay:.1f}s after its fire time"
            if e[0] == "lock":
                line += f", lock held by {e[3]}" + (
                    f" for {e[4]:.3f}s" if e[4] is not None else "")
            out.append(line)
    return {"gap_s": [round(a - origin, 1), round(b - origin, 1)], "events": out}


def classify(events: list[tuple], gap: tuple[float, float]) -> str:
    """The gap's cause, in one word: a poll skipped (lock: by what; lease), the job's
    fire skipped because its previous run had not ended, or a run started late."""
    a, b = gap
    inside = [e for e in events if a + 0.001 < e[1] < b + 0.001]
    skipped = [e for e in inside if e[0] in ("lock", "lease")]
    if skipped:
        return "skipped: " + ", ".join(sorted({
            e[0] + (f" held by {e[3]}" if e[0] == "lock" else " not held") for e in skipped}))
    if any(e[0] == "busy" for e in inside):
        return "fire skipped: the previous run not ended (max_instances)"
    fires = [e for e in events if e[0] == "fire" and e[1] <= b + 0.001]
    if fires and b - fires[-1][2] > 1.0:
        return "started late after its fire time (workers' queue)"
    return "no fire in the gap (trigger)"
