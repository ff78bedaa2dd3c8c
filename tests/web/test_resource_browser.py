"""Resource pages in a real browser (Debian's Chromium through Playwright), as a user uses
them: a Pipeline's stage boxes are links to the stage Jobs, the Sweep chart fills the
page's width at a desktop and a phone's width with its table beside it, a manifest line
is a link of its own, and the binding's tree leads to a stage Job. Screenshots land in
tests/web/artifacts/. Skipped only when /usr/bin/chromium is missing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from nodus_gitops.floor.identity import ResourceKey

from tests.web import test_browser as shared
from tests.web.conftest import serve
from tests.web.seed import PROJECT, SHA1, Seeded, seed

# The browser, its marks and Playwright's expect, shared with test_browser.py.
pytestmark = shared.pytestmark
browser_type_launch_args = shared.browser_type_launch_args
expect = shared.expect
ARTIFACTS = shared.ARTIFACTS

PIPELINE = f"/resources/Pipeline/{PROJECT}/train-eval"
SWEEP = f"/resources/Sweep/{PROJECT}/batch-size"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Seeded]]:
    s = seed(tmp_path_factory.mktemp("resources") / "state")
    url, stop = serve(s)
    yield url, s
    stop()  # type: ignore[operator]
    s.store.close()


@pytest.fixture
def site_page(page: Any) -> Iterator[Any]:
    yield from shared.watch(page)


def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def routed(url: str, path: str) -> bool:
    response = httpx.get(url + path, timeout=10)
    return not (response.status_code == 404 and "no such endpoint" in response.text)


def test_a_stage_box_leads_to_its_job(site: tuple[str, Seeded], site_page: Any) -> None:
    url, _ = site
    site_page.goto(url + PIPELINE)
    box = site_page.locator('svg.pipeline-graph a.node-link:has(g[data-stage="prepare"])')
    expect(box.locator(".node-duration")).to_have_text("1m 00s")
    expect(box.locator(".node-cost")).to_have_text("$0.01")
    expect(site_page.locator('svg.pipeline-graph a.node-link')).to_have_count(3)
    row = site_page.locator('table.stages tr[data-stage="prepare"]')
    expect(row.locator('[data-field="running"]')).to_have_text("1m 00s")
    shot(site_page, "pipeline-stages")
    site_page.locator('svg.pipeline-graph g[data-stage="train"]').click()
    site_page.wait_for_url(f"**/resources/Job/{PROJECT}/train-eval-train")
    expect(site_page.locator("h1")).to_have_text("Job train-eval-train")
    expect(site_page.locator("a.parent")).to_have_text("Pipeline train-eval")


@pytest.mark.parametrize(("width", "name"), [(1280, "sweep-chart"), (390, "sweep-chart-phone")])
def test_the_sweep_chart_fills_the_page_width_beside_its_table(
        site: tuple[str, Seeded], site_page: Any, width: int, name: str) -> None:
    url, _ = site
    site_page.set_viewport_size({"width": width, "height": 900})
    site_page.goto(url + SWEEP)
    chart = site_page.locator("svg.sweep-chart")
    expect(chart.locator("circle")).to_have_count(5)
    figure = site_page.locator("figure.chart").bounding_box()
    box = chart.bounding_box()
    assert box and figure and box["width"] >= figure["width"] * 0.95
    assert box["width"] > 360 or width < 500  # the old chart's fixed 360 px
    assert box["height"] == pytest.approx(box["width"] * 340 / 720, rel=0.05)
    expect(site_page.locator("table.chart-data tbody tr")).to_have_count(5)
    expect(site_page.locator('table.chart-data tr[data-cell="5"] td').nth(2)).to_have_text(
        "$0.07")
    expect(chart.locator("text.axis-label")).to_have_text(["units per second", "cost (USD)"])
    # The page itself never scrolls sideways.
    assert site_page.evaluate("document.documentElement.scrollWidth") <= width + 1
    shot(site_page, name)


def test_a_stage_s_progress_shows_without_a_reload(tmp_path: Path, site_page: Any) -> None:
    s = seed(tmp_path / "state")
    url, stop = serve(s)
    try:
        site_page.goto(url + PIPELINE)
        site_page.evaluate("window.__notReloaded = true")
        row = site_page.locator('table.stages tr[data-stage="train"]')
        expect(row.locator('[data-field="phase"]')).to_have_text("Running")
        expect(row.locator('[data-field="running"] .duration[data-running]')).to_have_count(1)
        key = ResourceKey("Pipeline", PROJECT, "train-eval")
        record = s.store.get_resource(key)
        assert record is not None
        stages = [dict(st, phase="Succeeded", completionTime="2025-01-02T03:15:06Z",
                       costUSD="0.004") if st["name"] == "train" else st
                  for st in record.status["stages"]]
        s.store.update_status(key, "Running", None, None, None,
                              {**record.status, "stages": stages}, "0.05")
        expect(row.locator('[data-field="running"]')).to_have_text("10m 00s", timeout=8000)
        expect(row.locator('[data-field="phase"]')).to_have_text("Succeeded")
        node = site_page.locator('svg.pipeline-graph g[data-stage="train"]')
        expect(node).to_have_class("node phase-succeeded")
        expect(node.locator(".node-cost")).to_have_text("$0.004")
        expect(site_page.locator('[data-live="facts"] [data-field="cost"]')).to_have_text(
            "$0.05")
        assert site_page.evaluate("window.__notReloaded") is True
    finally:
        stop()  # type: ignore[operator]
        s.store.close()


def test_a_manifest_line_is_a_link_of_its_own(site: tuple[str, Seeded],
                                             site_page: Any) -> None:
    url, _ = site
    site_page.goto(f"{url}/resources/Job/{PROJECT}/hello")
    line = site_page.locator("pre.source #L17")
    expect(line.locator(".code")).to_have_text("    DB_PASSWORD: ********")
    line.locator("a.ln").click()
    site_page.wait_for_url("**#L17")
    assert site_page.evaluate("document.querySelector(':target').id") == "L17"
    expect(site_page.locator("pre.source")).not_to_contain_text("sk-live-123")
    shot(site_page, "manifest")
    if routed(url, f"/repos/ml-team/files/{SHA1}/jobs/hello.yaml"):
        site_page.get_by_role("link", name="the file").click()
        site_page.wait_for_url(f"**/repos/ml-team/files/{SHA1}/jobs/hello.yaml#L2")
        assert site_page.evaluate("document.querySelector(':target').id") == "L2"


def test_the_tree_leads_from_the_binding_to_a_stage_job(site: tuple[str, Seeded],
                                                       site_page: Any) -> None:
    url, _ = site
    if not routed(url, "/repos/ml-team"):
        pytest.skip("the route /repos/<binding> is not in routes.py yet")
    site_page.goto(url + "/repos/ml-team")
    tree = site_page.locator('[data-live="tree"]')
    pipeline = tree.locator(f'li[data-key="Pipeline/{PROJECT}/train-eval"]')
    expect(pipeline.locator("li.child")).to_have_count(4)
    expect(tree.locator(f'li[data-key="Sweep/{PROJECT}/batch-size"] li.child')).to_have_count(6)
    shot(site_page, "tree")
    pipeline.get_by_role("link", name="train-eval-prepare").click()
    site_page.wait_for_url(f"**/resources/Job/{PROJECT}/train-eval-prepare")
    expect(site_page.locator("h1")).to_have_text("Job train-eval-prepare")
