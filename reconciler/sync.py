"""One binding's reconcile step: fetch, validate, plan, apply, record.

`BindingSync.reconcile_once()` is a ladder of numbered steps with early returns and a
single `finally` that records the sync's result, the binding's condition and its reason.
It keeps the last commit's parsed tree in memory, so a new commit re-reads only the
paths its tree diff names.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field

from nodus_gitops import failpoints, metrics
from nodus_gitops.adoption import adopt_owned
from nodus_gitops.apply import Applier, ApplyContext, ChangeSet
from nodus_gitops.config import Binding
from nodus_gitops.desired import DesiredTree
from nodus_gitops.floor.errors import ProviderError, SourceError
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.floor.phases import is_terminal
from nodus_gitops.floor.problems import Problem
from nodus_gitops.floor.results import RUNS, ActionType, SyncResult, counts_text
from nodus_gitops.outcomes import CommitReporter
from nodus_gitops.plan import Desired, Live, Plan, PlanOptions, Recorded, plan
from nodus_gitops.providers.base import Provider
from nodus_gitops.source import Backoff, GitSource
from nodus_gitops.state.records import InventoryRecord
from nodus_gitops.state.store import Store

log = logging.getLogger("nodus_gitops.sync")


@dataclass
class SyncReport:
    """What one reconcile step saw and did; `result` is the sync's named outcome."""

    binding: str
    commit: str | None = None
    # Proven otherwise step by step: a step that ends any other way is an error.
    result: SyncResult = SyncResult.ERROR
    message: str = ""
    problems: list[Problem] = field(default_factory=list)
    plan: Plan | None = None
    changes: ChangeSet | None = None

    @property
    def ok(self) -> bool:
        return self.result.ok


class InventoryView:
    """The binding's inventory as the plan reads it, kept in memory between syncs: one
    replica owns a binding at a time and every write to it goes through this process, so
    after a sync only the keys it touched are read again."""

    def __init__(self, store: Store, binding_id: str) -> None:
        self.store = store
        self.binding_id = binding_id
        self.recorded: dict[ResourceKey, Recorded] | None = None
        self.live: dict[ResourceKey, Live] = {}
        # Keys read again since the last `take_dirty()`; None after a full reload.
        self.dirty: set[ResourceKey] | None = None
        # Keys not deleted and not in a terminal phase: what a status refresh reads.
        self.unfinished: set[ResourceKey] = set()

    def _load(self, desired: Mapping[ResourceKey, Desired]) -> None:
        self.recorded, self.live, self.dirty = {}, {}, None
        self.unfinished = set()
        for r in self.store.each_inventory(self.binding_id):
            d = desired.get(r.key)
            # a manifest applied as the tree has it is kept once, the tree's: a second
            # copy of every manifest would double what a large binding holds
            self._put(r, d.manifest if d is not None and d.manifest == r.manifest else None)

    def _put(self, r: InventoryRecord, manifest: dict | None = None) -> None:
        assert self.recorded is not None
        self.recorded[r.key] = Recorded(r.key, manifest if manifest is not None else r.manifest,
                                        r.spec_hash, r.source_file or "", r.phase)
        self.live[r.key] = Live(exists=not r.deleted, phase=r.phase, reason=r.reason)
        if r.deleted or is_terminal(r.phase):
            self.unfinished.discard(r.key)
        else:
            self.unfinished.add(r.key)

    def all_finished(self) -> bool:
        """Whether every resource of the binding is deleted or finished, as this view
        knows it (False before it has read the inventory)."""
        return self.recorded is not None and not self.unfinished

    def state(self, desired: Mapping[ResourceKey, Desired] | None = None,
              ) -> tuple[Collection[Recorded], dict[ResourceKey, Live]]:
        """What the plan reads; `desired` (the tree about to be planned) lends its
        manifests to the entries recorded as it has them when the view is read whole.
        The entries are the view's own, not a copy: an incremental plan reads a few of
        them, and copying 100,000 on every plan was a third of a 1-file change's time."""
        if self.recorded is None:
            self._load(desired or {})
        assert self.recorded is not None
        return self.recorded.values(), self.live

    def take_dirty(self) -> set[ResourceKey] | None:
        """The keys re-read since the last call (None: everything may have changed)."""
        dirty, self.dirty = self.dirty, set()
        return dirty

    def reload(self, keys: Iterable[ResourceKey] | None = None) -> None:
        """Read these keys again (all of them when None)."""
        keys = list(keys) if keys is not None else None
        if keys is None or self.recorded is None or len(keys) > 50:
            self.recorded = None  # many: one query for all beats one per key
            return
        if self.dirty is not None:
            self.dirty.update(keys)
        for key in keys:
            record = self.store.get_resource(key)
            if record is None:
                self.recorded.pop(key, None)
                self.live.pop(key, None)
                self.unfinished.discard(key)
            else:
                self._put(record)


class BindingSync:
    """Reconciles one repo binding; never runs two syncs at once (the caller's lock)."""

    def __init__(self, binding: Binding, store: Store, provider: Provider, *, instance: str,
                 source: GitSource, reporter: CommitReporter, backoff: Backoff | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.binding = binding
        self.store = store
        self.applier = Applier(store, provider)
        self.instance = instance
        self.source = source
        self.reporter = reporter  # the commit checks, built by the composition root
        self.backoff = backoff or Backoff(random.Random())
        self.clock = clock
        self.failures = 0
        self.retry_at = 0.0  # after a failed poll, not before this (clock) time
        self.open_runs: dict[str, set[ResourceKey]] = {}  # commit -> resources it started
        self.previewed: dict[str, str] = {}  # preview branch -> the last SHA planned
        self.tree: DesiredTree | None = None
        self.inventory = InventoryView(store, binding.id)
        self.last_plan: tuple[str, set[ResourceKey]] | None = None  # commit, keys with actions
        self.retry_commit = False  # the last apply failed transiently or crashed: again
        self.errors = 0  # syncs in a row that ended in an error (their backoff grows)
        self.judged_invalid: str | None = None  # the invalid tip judged last, not again
        # Whether the store knew the binding when this process started (None: not asked
        # yet); without that history, the first sync adopts what the backend holds.
        self.had_history: bool | None = None
        self.options = plan_options(binding)

    def forget_cached_state(self) -> None:
        """Drop what this process remembers of the binding (the parsed tree, the
        inventory view, the last plan): another replica may have moved it on."""
        self.tree = None
        self.inventory.reload()
        self.last_plan = None
        self.retry_commit = False
        self.judged_invalid = None

    def read_tree(self, commit: str) -> DesiredTree:
        """The commit's desired tree, re-reading only changed paths when possible."""
        path = self.binding.path
        if self.tree is not None and self.tree.commit == commit:
            return self.tree
        if self.tree is not None:
            try:
                changed = self.source.changed_paths(self.tree.commit, commit, path)
            except SourceError:
                changed = None  # the old commit is gone (force-push): read everything
            if changed is not None:
                paths = [*changed.added, *changed.modified]
                blobs = self.source.read_blobs(commit, paths)
                # Forgotten while it moves, so that a failure halfway leaves no tree that
                # is neither commit's; kept after, valid or not: it is that commit's tree.
                tree, self.tree = self.tree, None
                tree.advance(commit, blobs, list(changed.deleted))
                self.tree = tree
                return tree
        self.tree = DesiredTree.read(commit, self.binding.project,
                                     self.source.read_tree(commit, path))
        return self.tree

    def plan_commit(self, tree: DesiredTree) -> Plan:
        """The plan of `tree` against the inventory. After a first full plan, only the
        keys that can have a different answer are planned again: those of changed files,
        those whose inventory entry changed, and those the last plan had an action for.
        Every other key was in sync then and nothing about it changed since, so it still
        is (test_incremental_plan checks this against the full plan)."""
        inventory, observed = self.inventory.state(tree.index)
        dirty = self.inventory.take_dirty()
        last, self.last_plan = self.last_plan, None
        if (dirty is None or tree.touched is None or last is None or not tree.index
                or last[0] != tree.base):
            result = plan(tree.desired(), inventory, observed, self.options)
        else:
            keys = tree.touched | dirty | last[1]
            desired = [tree.index[k] for k in keys if k in tree.index]
            recorded = self.inventory.recorded or {}
            subset = plan(desired, [recorded[k] for k in keys if k in recorded], observed,
                          self.options, tree_size=len(tree.index))
            result = Plan(subset.actions, subset.unchanged + len(tree.index) - len(desired))
        self.last_plan = (tree.commit, {a.key for a in result.actions})
        return result

    def refresh(self, keys: Iterable[ResourceKey] | None = None) -> int:
        """Read live status of unfinished resources (or only `keys`) into the store and
        this view, and close the run checks of commits whose resources all finished."""
        if keys is None and not self.open_runs and self.inventory.all_finished():
            return 0  # nothing to read: the view holds every write made to the binding
        changed, missing = self.applier.refresh(self.binding.id, keys)
        if changed:
            self.inventory.reload(changed)
        if missing:
            self.retry_commit = True  # judge the tip again: it is no longer what runs
        for commit, keys in list(self.open_runs.items()):
            records = [r for k in sorted(keys) if (r := self.store.get_resource(k))]
            if all(is_terminal(r.phase) for r in records):
                del self.open_runs[commit]
                self.reporter.runs_finished(commit, records)
        return len(changed)

    def preview(self, ref: str, head_sha: str | None = None,
                number: int | None = None) -> tuple[Plan | None, list[Problem]]:
        """Plan a branch or pull request (`number`, when known) against this binding's
        recorded state; post the plan check on its head commit and, with `comments`, the
        plan comment on the pull request. Nothing is ever applied from it."""
        commit = self._preview_commit(ref, head_sha, number)
        if commit is None:
            log.warning("preview skipped: the pull request's head is not on the remote",
                        extra={"binding": self.binding.id, "ref": ref, "head": head_sha})
            return None, []
        tree = DesiredTree.read(commit, self.binding.project,
                                self.source.read_tree(commit, self.binding.path))
        problems = tree.problems
        inventory, observed = self.inventory.state(tree.index)
        result = None if problems else plan(tree.desired(), inventory, observed, self.options)
        self.reporter.planned(commit, result, problems, ref, number)
        return result, problems

    def plan_ref(self, ref: str | None) -> tuple[str, DesiredTree, Plan]:
        """What `plan` shows of `ref` (default: the branch's tip, fetched): the commit, its
        tree and its full plan against this binding's recorded state. Nothing is posted
        or applied, and the tree and plan this sync keeps for its next poll stay as they
        are."""
        commit = self.source.resolve(ref) if ref else self.source.fetch()
        tree = DesiredTree.read(commit, self.binding.project,
                                self.source.read_tree(commit, self.binding.path))
        inventory, observed = self.inventory.state(tree.index)
        return commit, tree, plan(tree.desired(), inventory, observed, self.options)

    def _preview_commit(self, ref: str, head_sha: str | None,
                        number: int | None) -> str | None:
        """The commit a preview plans: the pull request's own head. A fork's head is only
        on the base repository's `refs/pull/<n>/head` (GitHub, Gitea) or
        `refs/merge-requests/<n>/head` (GitLab), and its branch may share a name with a
        base branch (a fork's `main`): the branch name comes last, and never when it
        names another commit than the one the host said. None: not found, or the pull
        request's head moved on from the one the host said (the newer head's own
        delivery plans it)."""
        if head_sha and self.source.has(head_sha):
            return head_sha
        if number is not None:
            commit = self.source.fetch_pull_head(number)
            if commit is not None:
                return None if head_sha and commit != head_sha else commit
        commit = self.source.resolve(ref)
        return None if head_sha and commit != head_sha else commit

    def _preview_branches(self) -> None:
        if not self.binding.preview_branches:
            return
        try:
            heads = self.source.branches(self.binding.preview_branches)
        except SourceError as e:
            log.warning("preview branches unreadable", extra={"binding": self.binding.id,
                                                               "error": str(e)})
            return
        for branch, sha in sorted(heads.items()):
            if branch != self.binding.branch and self.previewed.get(branch) != sha:
                self.previewed[branch] = sha
                self.preview(branch)

    def reconcile_once(self, *, force: bool = False) -> SyncReport:
        report = SyncReport(self.binding.id)
        binding = self.store.get_binding(self.binding.id)
        last_seen = binding.last_seen_commit if binding else None
        last_applied = binding.last_applied_commit if binding else None
        if not force and self.clock() < self.retry_at:
            report.result, report.message = SyncResult.BACKOFF, "waiting before polling again"
            return report
        # 1. Ask the remote where the branch is; fetch only when it moved.
        started = time.perf_counter()
        try:
            head = self.source.fetch() if force or last_seen is None else (
                self.source.poll(last_seen) or last_seen)
        except SourceError as e:
            self.failures += 1
            self.retry_at = self.clock() + self.backoff.next_delay(self.failures)
            self.store.record_poll(self.binding.id, last_seen, str(e))
            log.warning("poll failed", extra={"binding": self.binding.id, "error": str(e),
                                              "failures": self.failures})
            report.message = str(e)
            return report
        metrics.observe_fetch(self.binding.id, time.perf_counter() - started)
        failpoints.reach("after-fetch")
        self.failures, self.retry_at = 0, 0.0
        report.commit = head
        self._preview_branches()
        # 2. Anything to judge? Not the applied tip, nor an invalid tip this process
        # already judged (it is not recorded or posted again), unless forced or retried.
        judge = force or self.retry_commit or head not in (last_applied, self.judged_invalid)
        if self.had_history is None:  # asked before this process records a sync
            self.had_history = self.store.has_history(self.binding.id)
            # What a stopped process was doing never finished: it reads as an error (its
            # commit was not marked applied, so it is judged again now).
            self.store.abandon_pending_syncs(self.binding.id, "the reconciler stopped "
                                             "before this sync finished")
        if not judge:
            try:
                self._recover()
            except Exception as e:
                report.message = self._failure_text(e, head)
                self._back_off()
                self.store.record_poll(self.binding.id, head, report.message)
                return report
            self.errors = 0
            # 3. Nothing new: done (live status is refreshed on its own schedule).
            if head == last_applied:
                self.store.record_poll(self.binding.id, head, None)
            else:
                self.store.touch_poll(self.binding.id)
            report.result = SyncResult.UNCHANGED
            return report
        with self.store.batch():  # one durable commit for both
            self.store.record_poll(self.binding.id, head, None)
            sync_id = self.store.start_sync(self.binding.id, head)
        self.reporter.sync_started(head)
        try:
            self._recover()
            self._sync_commit(head, sync_id, report)
        except Exception as e:  # recorded and posted as an error, retried after a backoff
            report.result = SyncResult.ERROR
            report.message = self._failure_text(e, head)
        finally:
            self._finish(head, sync_id, report, started)
        return report

    def _recover(self) -> None:
        """Before anything new: finish what a killed process left half done, and on a
        store with no history of the binding (new, or lost) take back what the backend
        holds with this instance's marks, so nothing is created a second time."""
        if self.applier.resolve_pending(self.binding.id):
            self.inventory.reload()
        if not self.had_history:
            try:
                adopted = adopt_owned(self.store, self.applier.provider, self.binding,
                                      self.instance, history=False)
            except ProviderError as e:  # never plan on top of a backend it could not read
                raise ProviderError(f"cannot list the backend to adopt what it holds: {e}") \
                    from e
            self.had_history = True
            if adopted:
                self.inventory.reload()

    def _back_off(self) -> None:
        """Poll again only after a delay that grows with each error in a row: an error
        that repeats never spins."""
        self.errors += 1
        self.retry_at = self.clock() + self.backoff.next_delay(self.errors)

    def _failure_text(self, exc: Exception, head: str) -> str:
        """What a failed step says: a backend's own error as it is; anything else is a
        bug, logged with its traceback and named as the reconciler's failure."""
        if isinstance(exc, ProviderError):
            log.warning("sync failed", extra={"binding": self.binding.id, "commit": head,
                                              "error": str(exc)})
            return str(exc)
        log.exception("sync crashed", extra={"binding": self.binding.id, "commit": head})
        return f"the reconciler failed on this commit: {_one_line(exc)}"

    def _sync_commit(self, head: str, sync_id: int, report: SyncReport) -> None:
        """Steps 4 and 5: read and validate the commit, then plan and apply it. Sets
        `report.result` only to what it proved; returning early leaves ERROR."""
        # 4. Read and validate the commit: any problem and nothing of it applies.
        try:
            tree = self.read_tree(head)
        except SourceError as e:
            report.message = str(e)
            return
        report.problems = tree.problems
        if report.problems:
            self.judged_invalid, self.retry_commit = head, False
            report.result = SyncResult.INVALID
            count = len(report.problems)
            report.message = f"{count} problem{'s' if count != 1 else ''}; nothing applied"
            return
        self.judged_invalid = None
        # 5. Plan against the recorded inventory, then apply.
        report.plan = self.plan_commit(tree)
        failpoints.reach("after-plan")
        ctx = ApplyContext(self.binding.id, self.binding.project, self.instance,
                           self.binding.url, head, sync_id)
        try:
            report.changes = self.applier.apply(report.plan, ctx)
        finally:
            self.inventory.reload(a.key for a in report.plan.actions
                                  if a.action != ActionType.NOOP or a.record)
        self.retry_commit = any(o.transient for o in report.changes.failed)
        report.result = _result(report.plan, report.changes)
        report.message = counts_text(report.changes.summary())
        launched = {o.action.key for o in report.changes.outcomes if o.ok and o.action.action
                    in RUNS}
        if self.binding.check_workloads and launched:
            self.open_runs[head] = launched
            self.reporter.runs_started(head, len(launched))

    def _finish(self, head: str, sync_id: int, report: SyncReport, started: float) -> None:
        """Record the sync's result, the binding's error and applied commit, count it and
        post its check: all from what happened, whatever step it ended at."""
        if report.result == SyncResult.ERROR:
            self.retry_commit = True
            self._back_off()
        else:
            self.errors = 0
        # A commit is done with when its plan was carried out as far as it can be: not
        # after an error, nor while transient failures are retried; not when invalid
        # (the previous state stays, and the same invalid tip is not judged again).
        applied = report.changes is not None and not self.retry_commit
        problems = [p.as_dict() for p in report.problems]
        plan_json = report.plan.to_dict(head, problems, quiet_noops=True) if report.plan \
            else {"commit": head, "actions": [], "problems": problems}
        summary = report.changes.summary() if report.changes else {}
        with self.store.batch():
            if applied:
                self.store.mark_applied(self.binding.id, head)
            if report.result == SyncResult.ERROR:
                self.store.record_poll(self.binding.id, head, report.message)
            self.store.finish_sync(sync_id, report.result, report.message, plan_json, summary)
        metrics.observe_sync(self.binding.id, report.result, time.perf_counter() - started)
        self.reporter.sync_finished(head, report.result, report.message, report.problems,
                                    report.plan, summary)
        # What the sync did, as recorded: its counts (those above 0) and its message
        # (the counts, the problems, or the error), for the log's outcome line.
        log.info("sync finished", extra={"binding": self.binding.id, "commit": head,
                                         "result": report.result.value,
                                         "counts": {k: n for k, n in summary.items() if n},
                                         "summary": report.message})


def plan_options(binding: Binding) -> PlanOptions:
    """The plan's guards as `binding` sets them."""
    return PlanOptions(binding.allow_empty, binding.max_deletions, binding.self_heal)


def _result(plan: Plan, changes: ChangeSet) -> SyncResult:
    """What applying `plan` achieved: applied or noop only when nothing failed or was
    refused."""
    if changes.failed:
        return SyncResult.PARTIAL
    if plan.blocked:
        return SyncResult.BLOCKED
    return SyncResult.APPLIED if plan.has_changes else SyncResult.NOOP


def _one_line(exc: BaseException) -> str:
    """An exception as one line a person can read: its type and the first line of it."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
