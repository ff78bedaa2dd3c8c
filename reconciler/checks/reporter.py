"""The commit checks and plan comments of one binding, as the sync ladder's reporter
(`outcomes.CommitReporter`): each outcome composed into a check run and posted."""

from __future__ import annotations

from collections.abc import Sequence

from nodus_gitops.checks import compose
from nodus_gitops.checks.poster import CheckPoster
from nodus_gitops.checks.review import review_of
from nodus_gitops.config import Binding
from nodus_gitops.floor.problems import Problem
from nodus_gitops.floor.results import SyncResult
from nodus_gitops.plan import Plan
from nodus_gitops.providers.base import Provider
from nodus_gitops.state.records import InventoryRecord
from nodus_gitops.state.store import Store


class CheckReporter:
    def __init__(self, binding: Binding, instance: str, poster: CheckPoster,
                 provider: Provider, store: Store) -> None:
        self.binding = binding
        self.instance = instance
        self.poster = poster
        self.provider = provider  # prices a preview's plan when it can estimate
        self.store = store  # the project's spend so far, for the budget left

    def sync_started(self, commit: str) -> None:
        self.poster.post(compose.pending(self.binding.id, self.binding.url, commit,
                                         self.instance, "sync", "planning and applying"))

    def runs_started(self, commit: str, count: int) -> None:
        self.poster.post(compose.pending(self.binding.id, self.binding.url, commit,
                                         self.instance, "run", f"{count} resources running"))

    def sync_finished(self, commit: str, result: SyncResult, message: str,
                      problems: Sequence[Problem], plan: Plan | None,
                      summary: dict[str, int]) -> None:
        self.poster.post(compose.sync_check(self.binding.id, self.binding.url, commit,
                                            self.instance, result, message, list(problems),
                                            plan, summary))

    def runs_finished(self, commit: str, records: Sequence[InventoryRecord]) -> None:
        self.poster.post(compose.run_check(self.binding.id, self.binding.url, commit,
                                           self.instance, list(records)))

    def planned(self, commit: str, plan: Plan | None, problems: Sequence[Problem],
                ref: str, number: int | None) -> None:
        review = review_of(self.binding, self.instance, commit, plan, list(problems),
                           self.provider, self.store)
        self.poster.post(compose.plan_check(review))
        self.poster.comment(review, ref, number)
