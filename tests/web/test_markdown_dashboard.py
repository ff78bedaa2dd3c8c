"""The dashboard's rendered check summaries (the History page and a sync's page) show a
manifest's text as text: the checks the reconciler composed from hostile names, values,
file names and messages render with the elements of the same checks composed from benign
text, no more (no link, image, emphasis or raw HTML planted), and every character as
written. The attack a reviewer wrote (a file ``jobs/x` **bold** `.yaml`` whose timeout is a
Markdown link and a team mention) shows neither a link nor bold text on either page."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nodus_gitops.checks import compose
from nodus_gitops.config import Binding, Settings
from nodus_gitops.state.store import Store
from nodus_gitops.validation import validate_file
from nodus_gitops.web.history import history
from nodus_gitops.web.sync_page import sync_page

from tests.checks.test_markdown_attack import FILE, MANIFEST, VALUE
from tests.checks.test_markdown_host import View, read_html, words
from tests.checks.test_markdown_sinks import FIELDS, assert_text_only, benign, hostile, sinks

URL = "https://github.com/acme/gpu-jobs.git"
_commits = itertools.count(1)

# The checks a commit gets, as the reconciler composed them: (context, target, sink).
CHECKS = (("nodus/ci/sync", "github", "sync check of an invalid commit"),
          ("nodus/ci/sync", "gitnotes", "sync check of an error"),
          ("nodus/ci/run", "github", "run check"),
          ("nodus/ci/plan", "github", "plan check of changes"),
          ("nodus/ci/plan", "gitnotes", "plan check of problems"))


@dataclass
class Dashboard:
    service: Any  # what the pages read: the store, the settings, the bindings' syncs
    store: Store

    def record(self, t: dict[str, str]) -> tuple[int, str]:
        """A sync of a new commit with the problem of `t`, and the checks composed from
        `t` posted for that commit; the sync's id and commit."""
        commit = f"{next(_commits):040x}"
        docs = sinks(t)
        sync_id = self.store.start_sync("team-a", commit)
        # The sync's own record of the problem, as the page lists it beside the checks;
        # a lone surrogate there (a file name that is not UTF-8) is not this test's matter.
        problem = {k: _utf8(t[k]) for k in ("file", "kind", "name", "path", "message")}
        problem["line"] = 3
        self.store.finish_sync(sync_id, "invalid", "1 problems; nothing applied",
                               {"commit": commit, "actions": [], "problems": [problem]}, {})
        for context, target, sink in CHECKS:
            self.store.record_check("team-a", commit, context, "failure", docs[sink], target)
        return sync_id, commit

    def pages(self, sync_id: int, commit: str) -> dict[str, View]:
        status, page = sync_page(self.service, str(sync_id))
        assert status == 200
        listed = history(self.service, {"commit": [commit]})
        assert isinstance(listed, bytes)
        return {"the sync's page": read_html(page.decode()),
                "the History page": read_html(listed.decode())}


def _utf8(text: str) -> str:
    return re.sub("[\ud800-\udfff]", "\ufffd", text)


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    state = Path(tmp_path_factory.mktemp("state"))
    store = Store.open(state_dir=state)
    store.upsert_binding("team-a", URL, "main", "", "training")
    config = Settings(state_dir=state, instance="ci",
                      bindings=(Binding("team-a", URL, project="training"),))
    yield Dashboard(SimpleNamespace(store=store, settings=config, syncs={}), store)
    store.close()


def _check(dashboard: Dashboard, t: dict[str, str]) -> None:
    hostile_pages = dashboard.pages(*dashboard.record(t))
    benign_pages = dashboard.pages(*dashboard.record(benign(t)))
    texts = [t[f] for f in ("file", "kind", "name", "path", "message", "reason", "fix",
                            "phase", "cell")]
    for where, view in hostile_pages.items():
        # The dashboard links nothing in text by itself: what counts is its elements.
        assert_text_only(view, benign_pages[where], texts, where, on_a_host=False)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.fixed_dictionaries({f: hostile for f in FIELDS}))
def test_no_manifest_text_becomes_markup_on_the_dashboard(dashboard: Dashboard,
                                                          t: dict[str, str]) -> None:
    _check(dashboard, t)


def test_the_attack_shows_no_link_and_no_bold_text(dashboard: Dashboard) -> None:
    _, problems = validate_file(FILE, MANIFEST)
    (problem,) = problems
    run = compose.sync_check("team-a", URL, "f" * 40, "ci", "invalid", "", problems, None, {})
    sync_id = dashboard.store.start_sync("team-a", "f" * 40)
    dashboard.store.finish_sync(sync_id, "invalid", "1 problems; nothing applied",
                                {"commit": "f" * 40, "actions": [],
                                 "problems": [problem.as_dict()]}, {})
    dashboard.store.record_check("team-a", "f" * 40, "nodus/ci/sync", "failure", run.summary,
                                 "github")
    for where, view in dashboard.pages(sync_id, "f" * 40).items():
        summaries = view.text[view.text.index("Checks posted for this commit"):]
        assert FILE in words(summaries) and VALUE in words(summaries), where
        assert view.tags["strong"] == 1, where  # the check's context: the page's own
    for page in (sync_page(dashboard.service, str(sync_id))[1],
                 history(dashboard.service, {"commit": ["f" * 40]})):
        assert isinstance(page, bytes)
        links = re.findall(rb'<a [^>]*href="([^"]*)"', page)
        assert links and not [link for link in links if b"evil" in link], links
        assert b"<strong>bold</strong>" not in page
