"""The dashboard in a real browser: Debian's Chromium driven by Playwright (no browser
download). Each main page is opened against a seeded store; screenshots land in
tests/web/artifacts/. Skipped only when /usr/bin/chromium is missing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = [
    pytest.mark.skipif(not CHROMIUM.exists(),
                       reason="browser tests need Debian's chromium: apt-get install chromium"),
    # pytest-playwright's own base_url fallback fixture trips a pytest deprecation.
    pytest.mark.filterwarnings("ignore:Session-scoped fixtures defined as instance methods"),
]
sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
pytest.importorskip("pytest_playwright", reason="pip install pytest-playwright")

from nodus_gitops.floor.identity import ResourceKey  # noqa: E402

from tests.web.conftest import serve  # noqa: E402
from tests.web.seed import BAD_NAME, PROJECT, XSS_IMG, XSS_SCRIPT, Seeded, seed  # noqa: E402

expect = sync_api.expect
ARTIFACTS = Path(__file__).parent / "artifacts"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--disable-quic"]


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    return {**browser_type_launch_args, "executable_path": str(CHROMIUM), "args": CHROMIUM_ARGS}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Seeded]]:
    s = seed(tmp_path_factory.mktemp("dashboard") / "state")
    url, stop = serve(s)
    yield url, s
    stop()  # type: ignore[operator]
    s.store.close()


@pytest.fixture
def site_page(site: tuple[str, Seeded], page: Any) -> Iterator[Any]:
    """A page that records dialogs and console errors; the test fails on either."""
    page.dialogs, page.errors = [], []
    page.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))
    page.on("console", lambda m: page.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    page.set_default_timeout(8000)
    yield page
    assert page.dialogs == []
    assert page.errors == []


def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_overview_shows_the_bindings(site: tuple[str, Seeded], site_page: Any) -> None:
    url, _ = site
    site_page.goto(url + "/")
    card = site_page.locator('section[data-binding="ml-team"]')
    expect(card).to_be_visible()
    expect(card.locator("h2")).to_have_text("ml-team")
    expect(site_page.locator("section.card.problem")).to_have_count(2)
    expect(site_page.locator("#live")).to_have_class("live ok", timeout=5000)
    shot(site_page, "overview")


def test_resources_table_filters_and_sorts(site: tuple[str, Seeded], site_page: Any) -> None:
    url, _ = site
    site_page.goto(url + "/resources")
    expect(site_page.locator("table.resources tbody tr")).to_have_count(6)
    shot(site_page, "resources")
    site_page.select_option("select[name=kind]", "Sweep")  # submits itself
    site_page.wait_for_url("**/resources?*kind=Sweep*")
    expect(site_page.locator("table.resources tbody tr")).to_have_count(1)
    site_page.select_option("select[name=kind]", "")
    site_page.wait_for_url(lambda u: "kind=Sweep" not in u)
    site_page.get_by_role("link", name="Cost").click()
    site_page.wait_for_url("**sort=cost*")
    first = site_page.locator("table.resources tbody tr").first
    expect(first.locator("td").nth(6)).to_have_text("$0.00")


def test_pipeline_graph_has_a_node_per_stage(site: tuple[str, Seeded], site_page: Any) -> None:
    url, _ = site
    site_page.goto(f"{url}/resources/Pipeline/{PROJECT}/train-eval")
    nodes = site_page.locator("svg.pipeline-graph g.node")
    expect(nodes).to_have_count(4)
    expect(site_page.locator("svg.pipeline-graph path.edge")).to_have_count(3)
    expect(site_page.locator('g.node[data-stage="report"]')).to_have_class("node phase-failed")
    box = site_page.locator("svg.pipeline-graph").bounding_box()
    assert box and box["width"] > 300 and box["height"] > 100
    shot(site_page, "pipeline")


def test_sweep_marks_best_cells_and_draws_the_chart(site: tuple[str, Seeded],
                                                    site_page: Any) -> None:
    url, _ = site
    site_page.goto(f"{url}/resources/Sweep/{PROJECT}/batch-size")
    expect(site_page.locator("svg.sweep-chart circle")).to_have_count(5)
    expect(site_page.locator("svg.sweep-chart circle.best-cost")).to_have_count(1)
    expect(site_page.locator("svg.sweep-chart circle.best-throughput")).to_have_count(1)
    expect(site_page.locator("table.cells tr.best")).to_have_count(2)
    expect(site_page.locator('tr[data-cell="2"] .mark')).to_have_text("best cost")
    shot(site_page, "sweep")


def test_planted_markup_is_text_and_never_runs(site: tuple[str, Seeded], site_page: Any) -> None:
    url, _ = site
    site_page.goto(f"{url}/resources/Job/{PROJECT}/hello")
    expect(site_page.locator("pre.log").first).to_contain_text(XSS_SCRIPT)
    expect(site_page.locator("pre.log").nth(1)).to_contain_text(XSS_IMG)
    expect(site_page.locator("ol.timeline")).to_contain_text(f"index 1 failed: {XSS_SCRIPT}")
    expect(site_page.locator("pre.yaml").first).to_contain_text(XSS_SCRIPT)
    shot(site_page, "job")
    site_page.goto(f"{url}/resources/Job/{PROJECT}/{quote(BAD_NAME, safe='')}")
    expect(site_page.locator("h1")).to_have_text(f"Job {BAD_NAME}")
    for path in ("/", "/resources", "/history"):
        site_page.goto(url + path)
        assert site_page.locator("main img").count() == 0
        assert site_page.locator("main script").count() == 0
    shot(site_page, "history")
    site_page.wait_for_timeout(300)  # any alert would have fired by now


def test_live_updates_without_reload(site: tuple[str, Seeded], site_page: Any) -> None:
    url, s = site
    site_page.goto(f"{url}/resources?kind=Job")
    site_page.evaluate("window.__notReloaded = true")
    badge = site_page.locator(f'tr[data-key="Job/{PROJECT}/hello"] [data-field="phase"]')
    expect(badge).to_have_text("Running")
    s.store.update_status(ResourceKey("Job", PROJECT, "hello"), "Failed", "OOMKilled", "oom",
                          "more memory", {"completedIndexes": "0-1"}, "0.5")
    expect(badge).to_have_text("Failed", timeout=6000)
    expect(badge).to_have_class("phase phase-failed")
    row = site_page.locator(f'tr[data-key="Job/{PROJECT}/hello"]')
    expect(row.locator('[data-field="reason"]')).to_have_text("OOMKilled")
    expect(row.locator('[data-field="cost"]')).to_have_text("$0.50")
    assert site_page.evaluate("window.__notReloaded") is True

    site_page.goto(f"{url}/resources/Pipeline/{PROJECT}/train-eval")
    site_page.evaluate("window.__notReloaded = true")
    status = s.store.get_resource(ResourceKey("Pipeline", PROJECT, "train-eval")).status
    stages = [dict(st, phase="Succeeded") if st["name"] == "train" else st
              for st in status["stages"]]
    s.store.update_status(ResourceKey("Pipeline", PROJECT, "train-eval"), "Running", None,
                          None, None, {**status, "stages": stages}, "0.05")
    expect(site_page.locator('g.node[data-stage="train"]')).to_have_class(
        "node phase-succeeded", timeout=6000)
    expect(site_page.locator('tr[data-stage="train"] [data-field="phase"]')).to_have_text(
        "Succeeded")
    assert site_page.evaluate("window.__notReloaded") is True


def test_the_page_says_when_its_data_is_stale(site: tuple[str, Seeded],
                                              site_page: Any) -> None:
    url, _ = site
    site_page.goto(url + "/")
    live = site_page.locator("#live")
    expect(live).to_have_class("live ok", timeout=5000)
    site_page.route("**/api/v1/**", lambda route: route.abort())
    expect(live).to_have_class("live stale", timeout=10000)
    expect(live).to_contain_text("stale: last updated")
    site_page.errors.clear()  # the aborted requests log network errors
