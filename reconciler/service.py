"""The long-running service: polls every binding on its interval (APScheduler), never
runs two syncs of one binding at once, serves the read-only web API, and shuts down
cleanly on SIGTERM (first signal drains, a second one forces)."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from nodus_gitops.config import Binding, Settings
from nodus_gitops.floor.results import RUNS
from nodus_gitops.follow_ups import FollowUps
from nodus_gitops.leases import DEFAULT_TTL, LeaseKeeper
from nodus_gitops.metered import MeteredProvider
from nodus_gitops.poll_trigger import FirstSyncsApart, FirstThenEvery
from nodus_gitops.providers.base import HoldsBudgets, Provider
from nodus_gitops.repos import checks_repositories, match_bindings
from nodus_gitops.spending import PeriodSpend
from nodus_gitops.state.store import Store
from nodus_gitops.sync import BindingSync, SyncReport
from nodus_gitops.workloads.expiry import ExpiresFinished

if TYPE_CHECKING:
    from nodus_gitops.apply import ApplyContext
    from nodus_gitops.desired import DesiredTree
    from nodus_gitops.plan import Plan

log = logging.getLogger("nodus_gitops.service")
# Live status of unfinished resources is read this often, apart from Git polling, so that
# Pipelines and Sweeps move on quickly whatever the poll interval.
STATUS_REFRESH_SECONDS = 2
FOLLOW_UP_SECONDS = (0.1, 0.3, 0.6, 1.0)
FOLLOW_UP_WAIT_SECONDS = 0.2
# A scheduled poll waits this long for its binding's lock (a status read holds it for a
# moment) before it gives way: dropped, it would wait a whole interval for the next.
POLL_WAIT_SECONDS = STATUS_REFRESH_SECONDS
TRIGGER_WAIT_SECONDS = 120
PLAN_WAIT_SECONDS = 60  # a plan asked of the server waits this long for a running sync
# Idle polls' times are written in one batch this often (or each binding's shortest
# interval, when shorter): what a crash can lose of them, and how old another process's
# view of them can be (readiness allows 3 intervals).
POLL_TIMES_SECONDS = 5.0
SYNC_WORKERS = 10  # the scheduler's threads for polls, syncs and status ticks,
# and as many again for the first syncs
BOOKKEEPING = "bookkeeping"  # the scheduler's thread for the leases and the poll times


@dataclass
class Service:
    settings: Settings
    store: Store
    # Build each binding's sync (with its Git source and commit reporter) and each named
    # backend: the composition root's `wiring.build_service` hands them in, so the service
    # never imports the checks or the backend wiring above it.
    sync_factory: Callable[[Binding, Provider], BindingSync] | None = None
    provider_factory: Callable[[str], Provider] | None = None
    syncs: dict[str, BindingSync] = field(default_factory=dict)
    locks: dict[str, threading.Lock] = field(default_factory=dict)
    stopping: threading.Event = field(default_factory=threading.Event)
    latest_preview: dict[tuple[str, object], str] = field(default_factory=dict)
    # With several replicas on one store: which bindings this one may reconcile. None
    # (tests, one-off commands that hold no lease) reconciles every binding.
    leases: LeaseKeeper | None = None
    lease_ttl: float = DEFAULT_TTL
    follow_up: bool = True  # refresh soon after a sync that changed something
    triggered: set[str] = field(default_factory=set)  # bindings with a trigger waiting
    trigger_lock: threading.Lock = field(default_factory=threading.Lock)
    spending: PeriodSpend = field(default_factory=PeriodSpend)  # for the budget holds
    clock: Callable[[], datetime] | None = None  # the time budget periods are read at
    # Runs a binding's scheduled poll at once (set by `run` while its scheduler runs).
    poll_now: Callable[[str], None] | None = None

    def __post_init__(self) -> None:
        # One thread for every binding's follow-up reads; one waits only briefly for a
        # binding's running sync (the status tick reads it anyway) to keep the rest on time.
        self.follow_ups = FollowUps(lambda binding_id, keys: self.refresh_binding(
            binding_id, keys, wait=FOLLOW_UP_WAIT_SECONDS), stale_after=STATUS_REFRESH_SECONDS)
        providers: dict[str, Provider] = {}
        if self.sync_factory is None or self.provider_factory is None:
            raise TypeError("a Service gets its syncs and backends from wiring.build_service")
        for binding in self.settings.bindings:
            if binding.provider not in providers:
                providers[binding.provider] = MeteredProvider(
                    self.provider_factory(binding.provider))
            self.syncs[binding.id] = self.sync_factory(binding, providers[binding.provider])
            self.locks[binding.id] = threading.Lock()

    def reconcile(self, binding_id: str, *, force: bool = False,
                  wait: float = 10.0) -> SyncReport | None:
        """One sync of one binding; None when another sync or read of it is running and
        does not end within `wait` seconds (the scheduler's polls wait POLL_WAIT_SECONDS:
        at most one a binding waits, max_instances, so they never queue up)."""
        if self.leases is not None and not self.leases.holds(binding_id):
            return None  # another replica reconciles it
        lock = self.locks[binding_id]
        if not lock.acquire(timeout=wait) if wait else not lock.acquire(blocking=False):
            return None
        try:
            if self.leases is not None and not self.leases.holds(binding_id):
                return None  # given back while this waited for the lock
            report = self.syncs[binding_id].reconcile_once(force=force)
        except Exception:  # a bug must not stop the other bindings or the next tick
            log.exception("sync crashed", extra={"binding": binding_id})
            return None
        finally:
            lock.release()
        if report.plan is not None and report.plan.has_changes and self.follow_up:
            # What was just started shows its first phases soon after, not at the next
            # status tick: look at those resources again a few times in the next second.
            keys = [a.key for a in report.plan.actions if a.action in RUNS]
            if keys:
                self.follow_ups.add(binding_id, keys, FOLLOW_UP_SECONDS)
        return report

    def refresh_binding(self, binding_id: str, keys: list | None = None, *,
                        wait: float = STATUS_REFRESH_SECONDS) -> None:
        if self.leases is not None and not self.leases.holds(binding_id):
            return
        if self.locks[binding_id].acquire(timeout=wait):
            try:
                self.syncs[binding_id].refresh(keys)
            except Exception:
                log.exception("status refresh crashed", extra={"binding": binding_id})
            finally:
                self.locks[binding_id].release()

    def refresh_all(self) -> None:
        """Read the live status of unfinished resources of every binding not syncing now."""
        # A refresh waits for a short sync to finish rather than skip it: polls and
        # refreshes fall on the same ticks whenever one interval divides the other.
        for binding_id in self.syncs:
            self.refresh_binding(binding_id)
        self.expire_finished()
        self.hold_budgets()

    def expire_finished(self) -> None:
        """ttlSecondsAfterFinished with nobody looking: each backend this replica drives
        removes what is due (finished Jobs, and Pipelines and Sweeps with their stage and
        cell Jobs). A backend removes only what a read has shown finished, so the
        inventory's record of each is final before it goes, whichever refresh came first."""
        for provider in self.providers(held_only=True):
            if isinstance(provider, ExpiresFinished):
                try:
                    removed = provider.expire_finished()
                except Exception:  # a bug must not stop the next refresh
                    log.exception("TTL sweep crashed")
                    continue
                # The record stays final (its phase, its cost); its history says where
                # it went, for `describe` and the dashboard. Stage and cell Jobs have no
                # record of their own: their parent's event covers them.
                self.store.add_events([
                    (key, "Normal", "Expired", "ttlSecondsAfterFinished passed: the backend "
                     "removed it with its outputs and logs")
                    for key in removed if self.store.get_resource(key) is not None])

    def hold_budgets(self) -> None:
        """Tell each backend that holds budgets, for each project of the bindings this
        replica holds, whether the project spent its budget (`budgets:` in the config)
        in the current period: its Jobs suspend at the budget and resume when it is
        raised or the period rolls over. A project without a budget is told it is not
        held, so removing a budget lifts its hold too."""
        now = (self.clock or _now)()
        projects: dict[int, tuple[Provider, set[str]]] = {}
        for binding_id, sync in self.syncs.items():
            if self.leases is None or self.leases.holds(binding_id):
                provider = sync.applier.provider
                projects.setdefault(id(provider), (provider, set()))[1].add(
                    sync.binding.project)
        for provider, names in projects.values():
            if not isinstance(provider, HoldsBudgets):
                continue
            for project in sorted(names):
                budget = self.settings.budgets.get(project)
                try:
                    left = None if budget is None else self.spending.read(self.store,
                                                                          budget, now)
                    exceeded = left is not None and left.exceeded
                    provider.hold_budget(project, exceeded,
                                         left.describe() if left and exceeded else "")
                except Exception:  # one project's failure must not stop the others
                    log.exception("budget hold failed", extra={"project": project})

    def reconcile_all(self, *, force: bool = False) -> list[SyncReport]:
        return [r for b in self.syncs if (r := self.reconcile(b, force=force)) is not None]

    def bindings_for_repo(self, names: Iterable[str], host: str = "generic") -> list[str]:
        """Bindings following the repository a webhook from `host` names (by `owner/repo`
        path): by their URL, or by the repository their checks post to on that host."""
        posted_to = checks_repositories(self.settings.checks or {}, host)
        return match_bindings(names, [(b, repo) for b, s in self.syncs.items()
                                      for repo in (s.binding.url, *posted_to)])

    def first_delivery(self, host: str, delivery_id: str) -> bool:
        """Whether no replica received this webhook delivery before (it is recorded now).
        With the store unreachable, it counts as the first: a delivery can at worst
        trigger an early fetch, and dropping a push would delay it to the next poll."""
        try:
            return self.store.record_delivery(host, delivery_id)
        except Exception:
            log.exception("webhook delivery not recorded", extra={"host": host,
                                                                   "delivery": delivery_id})
            return True

    def branch_of(self, binding_id: str) -> str | None:
        """The branch `binding_id` tracks (a pull request's plan is only for its base)."""
        return next((b.branch for b in self.settings.bindings if b.id == binding_id), None)

    def trigger_preview(self, binding_id: str, ref: str | None, head_sha: str | None,
                        number: int | None = None) -> bool:
        """Plan a pull request's head in the background and post its plan check. A newer
        request for the same pull request supersedes one not yet started."""
        if binding_id not in self.syncs or not (ref or head_sha):
            return False
        wanted = (binding_id, number if number is not None else ref)
        self.latest_preview[wanted] = head_sha or ref or ""

        def run() -> None:
            with self.locks[binding_id]:
                if self.latest_preview.get(wanted) != (head_sha or ref):
                    return  # superseded by a newer push to the same pull request
                try:
                    self.syncs[binding_id].preview(ref or head_sha or "", head_sha, number)
                except Exception:
                    log.exception("preview failed", extra={"binding": binding_id, "ref": ref})

        threading.Thread(target=run, daemon=True, name=f"preview-{binding_id}").start()
        return True

    def write_poll_times(self) -> None:
        """Write the idle polls' times the store holds in memory (one transaction)."""
        try:
            self.store.flush_polls()
        except Exception:  # kept for the next tick; readers here see them meanwhile
            log.exception("writing the poll times failed: retried at the next tick")

    def keep_leases(self) -> None:
        """Renew and rebalance this replica's leases; a binding just taken over starts
        from the store (another replica may have changed it)."""
        assert self.leases is not None
        try:
            busy = {b for b, lock in self.locks.items() if lock.locked()}
            gained, _lost = self.leases.tick(busy)
        except Exception:
            log.exception("lease renewal failed: reconciling nothing until it works")
            return
        for binding_id in gained:
            with self.locks[binding_id]:
                self.syncs[binding_id].forget_cached_state()
            # Polled now, not at its next phase of the interval: a push to a dead
            # replica's binding would otherwise wait the lease time plus an interval.
            if self.poll_now is not None:
                try:
                    self.poll_now(binding_id)
                except Exception:  # it polls at its next interval instead
                    log.exception("polling a binding taken over failed",
                                  extra={"binding": binding_id})

    def plan_ref(self, binding_id: str, ref: str | None, *, wait: float = PLAN_WAIT_SECONDS
                 ) -> tuple[str, DesiredTree, Plan, Provider, ApplyContext] | None:
        """What `plan` shows of `ref` (default: the branch's tip) against this service's
        state, for `plan --server`: the commit, its tree, its plan, the binding's backend
        (for a dry run) and the context to ask it in. Made under the binding's lock, so
        that it never fetches into the mirror while a sync does; None when a sync held
        the lock for longer than `wait` seconds. KeyError for a binding not served here."""
        from nodus_gitops.apply import ApplyContext

        sync = self.syncs[binding_id]
        if not self.locks[binding_id].acquire(timeout=wait):
            return None
        try:
            commit, tree, the_plan = sync.plan_ref(ref)
        finally:
            self.locks[binding_id].release()
        binding = sync.binding
        return commit, tree, the_plan, sync.applier.provider, ApplyContext(
            binding.id, binding.project, self.settings.instance, binding.url, commit)

    def trigger(self, binding_id: str) -> bool:
        """Run a sync now, in the background (webhooks, the refresh endpoint)."""
        if binding_id not in self.syncs:
            return False
        with self.trigger_lock:
            if binding_id in self.triggered:
                return True  # one is already waiting to run: it will see this push too
            self.triggered.add(binding_id)

        def run() -> None:
            # Waits for a running sync or refresh instead of being dropped; leaves the
            # waiting set just before it polls, so a push arriving during this sync
            # triggers one more.
            with self.trigger_lock:
                self.triggered.discard(binding_id)
            self.reconcile(binding_id, wait=TRIGGER_WAIT_SECONDS)

        threading.Thread(target=run, daemon=True, name=f"trigger-{binding_id}").start()
        return True

    def run(self, *, serve_http: Callable[[Service], Callable[[], None]] | None = None) -> None:
        """Poll until SIGTERM/SIGINT. `serve_http` starts the web server and returns its
        stop function."""
        # A run that starts late still runs (misfire_grace_time None): with many bindings
        # the first syncs queue for the workers, and a dropped one would wait an interval.
        # The leases and the poll times run on a thread of their own: queued behind the
        # first syncs on the workers, a renewal came after its leases expired (100 bindings),
        # and every binding was taken over again (its cached inventory dropped, so each
        # status tick then read every binding's unfinished resources from the store).
        # The first syncs have threads of their own (as many again): queued on the same
        # ones, they held up the polls due meanwhile, and each one's next poll with it.
        scheduler = BackgroundScheduler(executors={
            "default": FirstSyncsApart(SYNC_WORKERS),
            BOOKKEEPING: ThreadPoolExecutor(1)}, job_defaults={
            "coalesce": True, "max_instances": 1, "misfire_grace_time": None})
        if self.leases is None:
            self.leases = LeaseKeeper(self.store, self.syncs, ttl=self.lease_ttl)
        self.keep_leases()  # the first syncs, just below, are at once anyway
        scheduler.add_job(self.keep_leases, "interval", seconds=self.leases.ttl / 3,
                          id="leases", executor=BOOKKEEPING)
        # Every binding's first sync now; after it, each polls on its own phase of the
        # interval, so that many bindings poll a few at a time rather than in one burst.
        now = _now()
        phases = poll_phases(list(self.syncs), None)
        for binding_id, sync in self.syncs.items():
            interval = sync.binding.interval
            start = now + timedelta(seconds=phases[binding_id] * interval)
            scheduler.add_job(self.reconcile, FirstThenEvery(now, interval, start),
                              args=[binding_id], kwargs={"wait": POLL_WAIT_SECONDS},
                              id=binding_id)
        scheduler.add_job(self.refresh_all, "interval", seconds=STATUS_REFRESH_SECONDS,
                          id="status-refresh")
        # An idle poll makes no durable commit of its own: its time is held by the store
        # (read from there at once) and written with the others on this tick and at stop.
        self.store.defer_poll_times()
        scheduler.add_job(self.write_poll_times, "interval", seconds=min(
            [POLL_TIMES_SECONDS, *(s.binding.interval for s in self.syncs.values())]),
            id="poll-times", executor=BOOKKEEPING)
        # On the scheduler's workers, and still one at a time for each binding
        # (max_instances); its regular polls keep their phase.
        self.poll_now = lambda binding_id: scheduler.modify_job(binding_id,
                                                                next_run_time=_now())
        stop_http = serve_http(self) if serve_http else None
        interrupts = []

        def on_signal(signum: int, _frame: object) -> None:
            interrupts.append(signum)
            if len(interrupts) > 1:
                log.warning("second signal: stopping now")
                raise SystemExit(1)
            log.info("signal received: finishing the running syncs, then stopping")
            self.stopping.set()

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        scheduler.start()
        log.info("serving", extra={"bindings": list(self.syncs), "listen": self.settings.listen})
        try:
            self.stopping.wait()
        finally:
            self.poll_now = None
            # Paused first: APScheduler 3's loop could still hand a due job to an executor
            # that shutdown had closed ("cannot schedule new futures after shutdown",
            # logged with its traceback); paused, it submits nothing more.
            scheduler.pause()
            scheduler.shutdown(wait=len(interrupts) < 2)  # a second signal: do not wait
            if stop_http:
                stop_http()
            self.store.defer_poll_times(False)  # a poll from now on is written at once
            self.write_poll_times()  # before the leases go: nothing held is lost
            self.leases.release_all()
            self.close()
            for s, handler in previous.items():
                signal.signal(s, handler)

    def close(self) -> None:
        """Close every backend once (HTTP clients, spare supervisors); runs keep going."""
        for provider in self.providers():
            try:
                provider.close()
            except Exception:  # one backend's failure must not keep the others open
                log.exception("closing a backend failed", extra={"provider": provider.name})

    def providers(self, *, held_only: bool = False) -> list[Provider]:
        """The backends of this service's bindings, each once; with `held_only`, only of
        the bindings this replica holds the lease of."""
        return list({id(s.applier.provider): s.applier.provider for b, s in self.syncs.items()
                     if not held_only or self.leases is None or self.leases.holds(b)}.values())


def poll_phases(binding_ids: list[str], interval: float | None) -> dict[str, float]:
    """When each binding's regular polls start after its first sync: evenly spread over
    (0, interval] in the bindings' order (as fractions of the interval when None)."""
    unit = 1.0 if interval is None else interval
    count = len(binding_ids)
    return {b: unit * (n + 1) / count for n, b in enumerate(binding_ids)}


def _now() -> datetime:
    return datetime.now(UTC)
