"""History and a sync's page in a real browser (Debian's Chromium driven by Playwright):
paging through syncs, filtering them, opening one, and its plan's diff; planted markup
never runs. Screenshots land in tests/web/artifacts/. Skipped only when /usr/bin/chromium
is missing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.web import test_browser as shared
from tests.web.conftest import serve
from tests.web.seed import SHA2, XSS_IMG, XSS_SCRIPT, Seeded, seed
from tests.web.test_browser import shot
from tests.web.test_sync_page import scripted_sync

# The browser, its marks and Playwright's expect, shared with test_browser.py.
pytestmark = shared.pytestmark
browser_type_launch_args = shared.browser_type_launch_args
expect = shared.expect


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Seeded, int]]:
    s = seed(tmp_path_factory.mktemp("history") / "state")
    for i in range(60):
        sync_id = s.store.start_sync("ops", f"0badc0de{i:032x}")
        s.store.finish_sync(sync_id, "error", f"fetch failed {i}",
                            {"commit": "x", "actions": [], "problems": []}, {})
    scripted = scripted_sync(s)
    url, stop = serve(s)
    yield url, s, scripted
    stop()  # type: ignore[operator]
    s.store.close()


@pytest.fixture
def site_page(page: Any) -> Iterator[Any]:
    yield from shared.watch(page)


def test_history_pages_filters_and_opens_a_sync(site: tuple[str, Seeded, int],
                                                site_page: Any) -> None:
    url, _, scripted = site
    rows = site_page.locator('[data-live="history-rows"] section.sync')
    site_page.goto(url + "/history")
    expect(rows).to_have_count(50)
    expect(site_page.locator('[data-field="total"]').first).to_have_text(
        "63 syncs · page 1 of 2")
    expect(rows.first).to_have_attribute("data-sync", str(scripted))
    shot(site_page, "history-paged")

    site_page.locator('a[rel="next"]').first.click()
    site_page.wait_for_url("**/history?page=2")
    expect(rows).to_have_count(13)
    site_page.locator('a[rel="prev"]').first.click()
    site_page.wait_for_url(lambda u: u.endswith("/history"))
    expect(rows).to_have_count(50)

    site_page.select_option("select[name=result]", "invalid")  # submits itself
    site_page.wait_for_url("**/history?*result=invalid*")
    expect(rows).to_have_count(1)
    expect(site_page.locator("select[name=result]")).to_have_value("invalid")
    problem = rows.first.locator("li.problem a")
    expect(problem).to_have_text("jobs/bad.yaml:3")
    expect(problem).to_have_attribute("href", f"/repos/ml-team/files/{SHA2}/jobs/bad.yaml#L3")
    expect(rows.first.locator("li.problem")).to_contain_text(f"unknown field {XSS_IMG}")
    expect(rows.first.locator(".markdown")).to_contain_text(f"1 problem {XSS_SCRIPT}")

    site_page.select_option("select[name=result]", "")
    site_page.wait_for_url(lambda u: "result=" not in u or "result=&" in u
                           or u.endswith("result="))
    site_page.fill("input[name=commit]", "0BADC0DE" + "0" * 31 + "7")
    site_page.press("input[name=commit]", "Enter")
    site_page.wait_for_url("**commit=0BADC0DE*")  # as typed; the page reads it lowercased
    expect(rows).to_have_count(1)
    expect(site_page.locator("input[name=commit]")).to_have_value("0badc0de" + "0" * 31 + "7")
    expect(rows.first).to_contain_text("fetch failed 7")

    site_page.goto(url + "/history")
    rows.first.get_by_role("link", name=f"#{scripted}").click()
    site_page.wait_for_url(f"**/syncs/{scripted}")
    expect(site_page.locator("h1")).to_have_text(f"Sync #{scripted}")
    train = site_page.locator('[data-resource="Job/train"]')
    expect(train.locator(".line.del")).to_have_text("- python train.py --epochs 3\n")
    expect(train.locator(".line.ins")).to_have_text(
        f"+ python train.py --epochs 5 # {XSS_SCRIPT}\n")
    expect(site_page.locator("table.applied tbody tr")).to_have_count(4)
    expect(site_page.locator("table.applied tr.bad")).to_contain_text(
        f"quota exceeded {XSS_IMG}")
    assert site_page.locator("main img").count() == 0
    assert site_page.locator("main script").count() == 0
    shot(site_page, "sync")
