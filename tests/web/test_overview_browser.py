"""The Overview and the resources search in a real browser (Debian's Chromium driven by
Playwright): each binding's status in words, its commits as Git has them, and a search
made with the keyboard alone, kept in the URL. Screenshots land in tests/web/artifacts/."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.state.records import InventoryRecord

from tests.web import test_browser as shared
from tests.web.conftest import serve
from tests.web.seed import PROJECT, SHA1, SHA2, XSS_SCRIPT, Seeded, seed

# The browser, its marks and Playwright's expect, shared with test_browser.py.
pytestmark = shared.pytestmark
browser_type_launch_args = shared.browser_type_launch_args
expect = shared.expect
ARTIFACTS = shared.ARTIFACTS


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Seeded]]:
    s = seed(tmp_path_factory.mktemp("overview") / "state")
    url, stop = serve(s)
    yield url, s
    stop()  # type: ignore[operator]
    s.store.close()


@pytest.fixture
def fresh_site(tmp_path: Path) -> Iterator[tuple[str, Seeded]]:
    """A site of its own, for a test that changes the store."""
    s = seed(tmp_path / "state")
    url, stop = serve(s)
    yield url, s
    stop()  # type: ignore[operator]
    s.store.close()


@pytest.fixture
def site_page(page: Any) -> Iterator[Any]:
    yield from shared.watch(page)


def test_each_binding_says_its_state_in_words(site: tuple[str, Seeded],
                                             site_page: Any) -> None:
    url, _ = site
    site_page.goto(url + "/")
    ml = site_page.locator('section[data-binding="ml-team"]')
    expect(ml.locator('[data-field="syncStatus"]')).to_have_text("Blocked")
    expect(ml.locator('[data-field="health"]')).to_have_text("Degraded")
    expect(ml.locator('[data-field="healthReason"]')).to_have_text("2 Failed of 4 resources")
    head = ml.locator('[data-field="headCommit"]')
    expect(head).to_contain_text(f"Add bad.yaml {XSS_SCRIPT}")  # as text, never markup
    expect(head).to_contain_text("Grace Hopper")
    expect(head.locator("code")).to_have_attribute("title", SHA2)
    expect(ml.locator('[data-field="appliedCommit"]')).to_contain_text("Ada Lovelace")
    expect(ml.locator('[data-field="budget"]')).to_contain_text("$4.6867 left of $5 per month")
    ops = site_page.locator('section[data-binding="ops"]')
    expect(ops.locator('[data-field="syncStatus"]')).to_have_text("OutOfSync")
    expect(ops.locator('[data-field="budget"]')).to_have_text("no budget")
    expect(ops.locator('[data-field="headCommit"] a')).to_have_attribute(
        "href", "https://gitlab.com/acme/ops/-/commit/fedcba9876543210fedcba9876543210fedcba98")
    expect(ml.get_by_role("link", name="ml-team")).to_have_attribute("href", "/repos/ml-team")
    ARTIFACTS.mkdir(exist_ok=True)
    site_page.screenshot(path=str(ARTIFACTS / "overview-status.png"), full_page=True)
    assert site_page.locator("main script, main img").count() == 0


def test_a_search_made_with_the_keyboard_alone(site: tuple[str, Seeded],
                                               site_page: Any) -> None:
    url, _ = site
    site_page.goto(url + "/resources")
    expect(site_page.locator("table.resources tbody tr")).to_have_count(6)
    for _ in range(20):  # Tab from the top of the page to the search box
        site_page.keyboard.press("Tab")
        if site_page.evaluate("document.activeElement.name") == "q":
            break
    else:
        pytest.fail("the search box is not reachable with Tab")
    site_page.keyboard.type("team=ml phase:Failed")
    site_page.keyboard.press("Enter")
    site_page.wait_for_url("**/resources?q=*")
    rows = site_page.locator("table.resources tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("batch-size")
    # The search stays: in the box as words, in the filters as fields, in the sort links.
    expect(site_page.locator("input[name=q]")).to_have_value("phase:Failed team=ml")
    expect(site_page.locator("input[name=label]")).to_have_value("team=ml")
    site_page.get_by_role("link", name="Name").click()
    site_page.wait_for_url("**sort=name*")
    assert "label=team%3Dml" in site_page.url and "phase=Failed" in site_page.url
    expect(site_page.locator("table.resources tbody tr")).to_have_count(1)
    site_page.reload()  # the URL alone holds the search
    expect(site_page.locator("input[name=q]")).to_have_value("phase:Failed team=ml")
    site_page.screenshot(path=str(ARTIFACTS / "resources-search.png"), full_page=True)


def test_cards_and_search_results_follow_the_store_without_reload(
        fresh_site: tuple[str, Seeded], site_page: Any) -> None:
    url, s = fresh_site
    site_page.goto(url + "/")
    site_page.evaluate("window.__notReloaded = true")
    status = site_page.locator('section[data-binding="ml-team"] [data-field="syncStatus"]')
    expect(status).to_have_text("Blocked")
    crash = s.store.start_sync("ml-team", SHA2)
    s.store.finish_sync(crash, "error", "the reconciler failed on this commit: boom", {}, {})
    expect(status).to_have_text("Failed", timeout=8000)
    assert site_page.evaluate("window.__notReloaded") is True

    site_page.goto(url + "/resources?q=team%3Dml")
    site_page.evaluate("window.__notReloaded = true")
    expect(site_page.locator("table.resources tbody tr")).to_have_count(2)
    s.store.upsert_resource(InventoryRecord(
        ResourceKey("Job", PROJECT, "arrived"), "ml-team",
        {"kind": "Job", "metadata": {"name": "arrived", "labels": {"team": "ml"}}}, "h",
        phase="Queued", source_commit=SHA1))
    expect(site_page.locator('tr[data-key="Job/ml/arrived"]')).to_be_visible(timeout=8000)
    expect(site_page.locator("[data-field=total]")).to_contain_text("3 resources")
    assert site_page.evaluate("window.__notReloaded") is True


def test_a_degraded_card_says_why_and_links_to_a_failed_resource(
        fresh_site: tuple[str, Seeded], site_page: Any) -> None:
    """The fresh machine's case: the head applied (Synced), every Job failed with
    SandboxUnavailable (Degraded). The card says why, whose problem it is, the fix, and
    links to one of them; the hostile message stays text."""
    from tests.web.test_overview_failures import HOSTILE_MESSAGE, SLIRP_FIX, fail_on_this_host

    url, s = fresh_site
    s.store.record_poll("ml-team", SHA1, None)  # the applied commit is the head: Synced
    fail_on_this_host(s)
    site_page.goto(url + "/")
    ml = site_page.locator('section[data-binding="ml-team"]')
    expect(ml.locator('[data-field="syncStatus"]')).to_have_text("Synced")
    expect(ml.locator('[data-field="health"]')).to_have_text("Degraded")
    expect(ml.locator("dt").first).to_have_text("Sync Git's head commit applied?")
    why = ml.locator('[data-field="failures"]')
    expect(why).to_contain_text("5 Failed, 3 of them SandboxUnavailable — " + HOSTILE_MESSAGE)
    expect(why).to_contain_text("A problem of the host that runs the local backend, "
                                "not of the manifests.")
    expect(why).to_contain_text("Fix: " + SLIRP_FIX)
    assert site_page.locator("main script, main img").count() == 0
    expect(why.locator("a")).to_have_count(1)  # the Markdown in the message is no link
    ARTIFACTS.mkdir(exist_ok=True)
    site_page.screenshot(path=str(ARTIFACTS / "overview-failure.png"), full_page=True)
    ml.screenshot(path=str(ARTIFACTS / "overview-failure-card.png"))
    why.get_by_role("link", name="job/sandboxed-0").click()
    site_page.wait_for_url(f"**/resources/Job/{PROJECT}/sandboxed-0")
    expect(site_page.locator('[data-field="reason"]').first).to_have_text("SandboxUnavailable")
