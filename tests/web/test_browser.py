"""The dashboard in a real browser: Debian's Chromium driven by Playwright (no browser
download). Each main page is opened against a seeded store; screenshots land in
tests/web/artifacts/. Skipped only when /usr/bin/chromium is missing."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote
from zoneinfo import ZoneInfo

import httpx
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
from nodus_gitops.state.records import InventoryRecord  # noqa: E402

from tests.test_quickstart import free_port  # noqa: E402
from tests.web.conftest import serve  # noqa: E402
from tests.web.seed import (  # noqa: E402
    BAD_NAME,
    PROJECT,
    SHA1,
    XSS_IMG,
    XSS_SCRIPT,
    Seeded,
    seed,
)

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


def watch(page: Any) -> Iterator[Any]:
    """`page`, recording dialogs and console errors; the test fails on either (for a
    fixture to `yield from`)."""
    page.dialogs, page.errors = [], []
    page.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))
    page.on("console", lambda m: page.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    page.set_default_timeout(8000)
    yield page
    assert page.dialogs == []
    assert page.errors == []


@pytest.fixture
def site_page(site: tuple[str, Seeded], page: Any) -> Iterator[Any]:
    yield from watch(page)


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


def _fresh_site(tmp_path: Path) -> tuple[str, Seeded, Any]:
    s = seed(tmp_path / "state")
    url, stop = serve(s)
    return url, s, stop


@pytest.fixture
def fresh_site(tmp_path: Path) -> Iterator[tuple[str, Seeded]]:
    """A site of its own, for a test that changes the store."""
    url, s, stop = _fresh_site(tmp_path)
    yield url, s
    stop()  # type: ignore[operator]
    s.store.close()


def _add_job(s: Seeded, name: str) -> None:
    s.store.upsert_resource(InventoryRecord(
        key=ResourceKey("Job", PROJECT, name), binding_id="ml-team",
        manifest={"kind": "Job", "metadata": {"name": name}, "spec": {}}, spec_hash="h",
        source_commit=SHA1, source_file=f"jobs/{name}.yaml", provider="local",
        phase="Queued", status={}, cost_usd="0"))


def test_a_new_resource_appears_without_reload(fresh_site: tuple[str, Seeded],
                                               site_page: Any) -> None:
    url, s = fresh_site
    site_page.goto(f"{url}/resources")
    site_page.evaluate("window.__notReloaded = true")
    rows = site_page.locator("table.resources tbody tr")
    expect(rows).to_have_count(6)
    hello = site_page.locator(f'tr[data-key="Job/{PROJECT}/hello"] a').first
    hello.focus()  # a reader on a row: the refresh must leave them there

    _add_job(s, "arrived-later")
    expect(site_page.locator(f'tr[data-key="Job/{PROJECT}/arrived-later"]')).to_be_visible(
        timeout=8000)
    expect(rows).to_have_count(7)
    assert site_page.locator("tr.arrived").evaluate_all("rs => rs.map(r => r.dataset.key)") == [
        f"Job/{PROJECT}/arrived-later"]  # marked as new, the others not
    expect(site_page.locator('[data-field="total"]')).to_contain_text("7 resources")
    assert site_page.evaluate("document.activeElement.textContent") == "hello"

    s.store.update_status(ResourceKey("Job", PROJECT, "hello"), "Failed", "OOMKilled", "oom",
                          "more memory", {"completedIndexes": "0-1"}, "0.5")
    row = site_page.locator(f'tr[data-key="Job/{PROJECT}/hello"]')
    expect(row.locator('[data-field="phase"]')).to_have_text("Failed", timeout=8000)
    expect(row.locator('[data-field="phase"]')).to_have_class("phase phase-failed")
    expect(row.locator('[data-field="reason"]')).to_have_text("OOMKilled")
    expect(row.locator('[data-field="cost"]')).to_have_text("$0.50")
    assert site_page.evaluate("window.__notReloaded") is True


def test_a_page_behind_basic_auth_stays_live(tmp_path: Path, browser: Any,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DASHBOARD_PASSWORD", "pw-for-the-test")
    s = seed(tmp_path / "state", dashboard={
        "basicAuth": {"user": "ops", "passwordEnv": "DASHBOARD_PASSWORD"}})
    url, stop = serve(s)
    assert httpx.get(url + "/resources").status_code == 401
    context = browser.new_context(http_credentials={"username": "ops",
                                                    "password": "pw-for-the-test"})
    page = context.new_page()
    try:
        page.goto(url + "/resources")
        expect(page.locator("#live")).to_have_class("live ok", timeout=8000)
        _add_job(s, "arrived-later")
        expect(page.locator(f'tr[data-key="Job/{PROJECT}/arrived-later"]')).to_be_visible(
            timeout=8000)
        expect(page.locator("#connection")).to_be_hidden()
    finally:
        context.close()
        stop()  # type: ignore[operator]
        s.store.close()


def test_the_overview_counts_follow_new_resources(fresh_site: tuple[str, Seeded],
                                                  site_page: Any) -> None:
    url, s = fresh_site
    site_page.goto(url + "/")
    site_page.evaluate("window.__notReloaded = true")
    counts = site_page.locator('section[data-binding="ml-team"] ul.counts')
    expect(counts).not_to_contain_text("Queued")
    _add_job(s, "arrived-later")  # Queued
    queued = counts.locator("li").filter(has_text="Queued")
    expect(queued.locator(".count")).to_have_text("1", timeout=8000)
    assert site_page.evaluate("window.__notReloaded") is True


def test_a_pipeline_page_follows_its_stages(fresh_site: tuple[str, Seeded],
                                            site_page: Any) -> None:
    url, s = fresh_site
    key = ResourceKey("Pipeline", PROJECT, "train-eval")
    site_page.goto(f"{url}/resources/Pipeline/{PROJECT}/train-eval")
    site_page.evaluate("window.__notReloaded = true")
    status = s.store.get_resource(key).status
    stages = [dict(st, phase="Succeeded", completionTime="2025-01-02T03:09:06Z")
              if st["name"] == "train" else st for st in status["stages"]]
    s.store.update_status(key, "Running", None, None, None, {**status, "stages": stages},
                          "0.05")
    expect(site_page.locator('g.node[data-stage="train"]')).to_have_class(
        "node phase-succeeded", timeout=8000)
    expect(site_page.locator('tr[data-stage="train"] [data-field="phase"]')).to_have_text(
        "Succeeded")
    assert site_page.evaluate("window.__notReloaded") is True


def test_a_refresh_keeps_the_readers_place(fresh_site: tuple[str, Seeded],
                                           site_page: Any) -> None:
    url, s = fresh_site
    site_page.set_viewport_size({"width": 1000, "height": 400})
    site_page.goto(url + "/history")
    reading = site_page.locator('section[data-sync="1"]')
    reading.evaluate("card => window.scrollTo(0, card.offsetTop - 40)")  # the oldest sync
    top = reading.evaluate("card => card.getBoundingClientRect().top")
    sync = s.store.start_sync("ml-team", SHA1)  # a newer one arrives above it
    s.store.finish_sync(sync, "applied", "arrived while reading", {"actions": []}, {})
    expect(site_page.locator(f'section[data-sync="{sync}"]')).to_be_attached(timeout=8000)
    assert abs(reading.evaluate("card => card.getBoundingClientRect().top") - top) < 1
    assert site_page.evaluate("window.scrollY") > 0


def test_a_refresh_keeps_what_the_reader_focused_and_opened(fresh_site: tuple[str, Seeded],
                                                            site_page: Any) -> None:
    url, s = fresh_site
    site_page.goto(url + "/history")
    card = site_page.locator("section[data-sync]").nth(1)
    reading = card.get_attribute("data-sync")
    link = card.locator("a[href]").last
    href = link.get_attribute("href")
    link.focus()  # the reader is on a link in the second sync's card
    sync = s.store.start_sync("ml-team", SHA1)  # and a sync above it arrives
    s.store.finish_sync(sync, "applied", "arrived while reading", {"actions": []}, {})
    expect(site_page.locator(f'section[data-sync="{sync}"]')).to_be_attached(timeout=8000)
    focused = """() => [document.activeElement.getAttribute('href'),
                        document.activeElement.closest('section[data-sync]').dataset.sync]"""
    assert site_page.evaluate(focused) == [href, reading]

    site_page.goto(f"{url}/resources/Job/{PROJECT}/hello")
    status = site_page.locator("details[data-live=status]")
    status.locator("summary").click()  # the reader opens the status
    s.store.update_status(ResourceKey("Job", PROJECT, "hello"), "Failed", "OOMKilled", "oom",
                          "more memory", {"completedIndexes": "0-1", "marker": "fresh"}, "0.5")
    expect(status).to_contain_text("marker: fresh", timeout=8000)
    assert status.evaluate("d => d.open") is True
    assert site_page.evaluate("document.activeElement.textContent") == "Status"


def test_a_log_tail_follows_its_end_unless_the_reader_scrolled_up(
        fresh_site: tuple[str, Seeded], site_page: Any) -> None:
    url, s = fresh_site
    logs = s.local_root / PROJECT / "hello" / "logs"
    site_page.goto(f"{url}/resources/Job/{PROJECT}/hello")
    long_tail, short_tail = site_page.locator("pre.log").nth(0), site_page.locator("pre.log").nth(1)
    at_end = "p => p.scrollTop + p.clientHeight >= p.scrollHeight - 4"
    assert long_tail.evaluate(at_end)  # a tail opens at its end
    long_tail.evaluate("p => { p.scrollTop = 100; }")  # the reader goes back up in one
    with (logs / "0-2.log").open("a") as log:
        log.write("one more step\n")
    with (logs / "1-1.log").open("a") as log:  # and the other grows past its box
        log.write("".join(f"index one, line {i}\n" for i in range(100)))
    expect(long_tail).to_contain_text("one more step", timeout=8000)
    expect(short_tail).to_contain_text("index one, line 99", timeout=8000)
    assert long_tail.evaluate("p => p.scrollTop") == 100
    assert short_tail.evaluate("p => p.scrollHeight > p.clientHeight")
    assert short_tail.evaluate(at_end)


LIVE_PAGES = ("/", "/resources", "/history", f"/resources/Job/{PROJECT}/hello",
              f"/resources/Pipeline/{PROJECT}/train-eval",
              f"/resources/Sweep/{PROJECT}/batch-size")


def test_each_live_element_is_named_once_per_page(site: tuple[str, Seeded],
                                                  site_page: Any) -> None:
    url, _ = site
    for where in LIVE_PAGES:
        site_page.goto(url + where)
        ids = site_page.locator("[data-live]").evaluate_all(
            "els => els.map(e => e.dataset.live)")
        assert "as-of" in ids and len(ids) > 1, (where, ids)  # the page's lists, and when
        assert len(ids) == len(set(ids)), (where, ids)  # a refresh could not tell two apart


def test_the_as_of_line_follows_each_refresh(site: tuple[str, Seeded], site_page: Any) -> None:
    url, _ = site
    site_page.goto(url + "/")
    site_page.evaluate("window.__notReloaded = true")
    as_of = site_page.locator('[data-live="as-of"] time')
    first = as_of.get_attribute("datetime")
    expect(as_of).not_to_have_attribute("datetime", first or "", timeout=8000)
    assert site_page.evaluate("window.__notReloaded") is True


# Playwright cannot hide a tab: the page is told it is hidden as a browser would tell it.
HIDE = """hidden => {
  Object.defineProperty(document, "hidden", {configurable: true, get: () => hidden});
  document.dispatchEvent(new Event("visibilitychange"));
}"""


def test_reading_pauses_while_the_tab_is_hidden(site: tuple[str, Seeded],
                                                site_page: Any) -> None:
    url, _ = site
    reads: list[str] = []
    site_page.on("request", lambda r: reads.append(r.url) if r.url == url + "/resources"
                 else None)
    site_page.goto(url + "/resources")
    live = site_page.locator("#live")
    expect(live).to_have_class("live ok", timeout=8000)
    site_page.evaluate(HIDE, True)
    expect(live).to_have_class("live paused", timeout=8000)  # no next read is scheduled
    paused_at = len(reads)
    site_page.evaluate(HIDE, False)
    expect(live).to_have_class("live ok", timeout=8000)  # only a read that answered says so
    assert len(reads) > paused_at  # shown again, it reads at once


# A seeded dashboard in a process of its own, so that stopping it closes its connections
# as a server going away does.
SERVE_SEEDED = """
import sys, threading
from tests.web.seed import seed
from nodus_gitops.web.server import start_server
start_server(seed(sys.argv[1]).service, "127.0.0.1:" + sys.argv[2])
threading.Event().wait()
"""


def _serve_in_process(state: Path, port: int) -> subprocess.Popen[bytes]:
    server = subprocess.Popen([sys.executable, "-c", SERVE_SEEDED, str(state), str(port)],
                              cwd=Path(__file__).parents[2])
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        assert server.poll() is None and time.monotonic() < deadline, "the server never came up"
        time.sleep(0.1)


def test_a_lost_connection_is_said_until_the_server_answers(tmp_path: Path,
                                                            site_page: Any) -> None:
    port = free_port()
    server = _serve_in_process(tmp_path / "first" / "state", port)
    try:
        site_page.goto(f"http://127.0.0.1:{port}/resources")
        expect(site_page.locator("#live")).to_have_class("live ok", timeout=8000)
        note = site_page.get_by_role("status").filter(has_text="connection lost, retrying")
        expect(note).to_have_count(0)
        server.kill()
        server.wait()
        expect(note).to_be_visible(timeout=8000)
        expect(site_page.locator("#live")).to_have_class("live lost")
        server = _serve_in_process(tmp_path / "second" / "state", port)  # the same seed
        expect(note).to_have_count(0, timeout=8000)
        expect(site_page.locator("#connection")).to_be_hidden()
        expect(site_page.locator("#live")).to_have_class("live ok")
    finally:
        server.kill()
        server.wait()
    site_page.errors.clear()  # the refused requests log network errors


def test_a_failing_read_is_said_until_one_succeeds(site: tuple[str, Seeded],
                                                   site_page: Any) -> None:
    url, _ = site
    site_page.goto(url + "/history")
    expect(site_page.locator("#live")).to_have_class("live ok", timeout=8000)
    site_page.route("**/history", lambda route: route.abort())
    note = site_page.get_by_role("status").filter(has_text="connection lost, retrying")
    expect(note).to_be_visible(timeout=8000)
    site_page.unroute("**/history")
    site_page.route("**/history", lambda route: route.fulfill(status=503, body="busy"))
    refused = site_page.get_by_role("status").filter(
        has_text="the server answered HTTP 503, retrying")
    expect(refused).to_be_visible(timeout=8000)
    site_page.unroute("**/history")
    expect(refused).to_have_count(0, timeout=8000)
    expect(site_page.locator("#connection")).to_be_hidden()
    site_page.errors.clear()  # the aborted requests log network errors


TIME_TEXT = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) (\S+) · "
                       r"(just now|\d+[smhd] ago|in \d+[smhd])$")


def test_times_are_in_the_viewers_zone_with_a_relative_hint(
        site: tuple[str, Seeded], browser: Any) -> None:
    url, _ = site
    context = browser.new_context(timezone_id="America/New_York", locale="en-US")
    page = context.new_page()
    try:
        for where in ("/", "/history", f"/resources/Job/{PROJECT}/hello"):
            page.goto(url + where)
            times = page.locator("time[datetime]")
            expect(times.first).to_have_text(TIME_TEXT)
            shown = times.evaluate_all(
                "els => els.map(e => [e.getAttribute('datetime'), e.textContent, e.title])")
            assert len(shown) >= 2, where
            for instant, text, title in shown:
                match = TIME_TEXT.match(text)
                assert match, (where, text)
                local = datetime.fromisoformat(instant).astimezone(ZoneInfo("America/New_York"))
                assert match[1] == f"{local:%Y-%m-%d %H:%M:%S}", (where, instant, text)
                assert match[2] == local.tzname()  # EST or EDT, as the date has it
                assert title == instant
    finally:
        context.close()


# Text nodes outside <time> (and outside files and logs, which are shown as they are)
# that look like a moment: a date and a time of day.
LOOSE_DATES = r"""() => {
  const walk = document.createTreeWalker(document.querySelector('main'), NodeFilter.SHOW_TEXT);
  const loose = [];
  while (walk.nextNode()) {
    const node = walk.currentNode;
    const moment = /\d{4}-\d\d-\d\d[T ]\d\d:\d\d/.test(node.textContent);
    if (moment && !node.parentElement.closest('time, pre')) loose.push(node.textContent);
  }
  return loose;
}"""


def test_every_page_writes_times_one_way(site: tuple[str, Seeded], browser: Any) -> None:
    url, _ = site
    context = browser.new_context(timezone_id="Asia/Kolkata", locale="en-US")
    page = context.new_page()
    try:
        for where in (*LIVE_PAGES, "/repos/ml-team", "/syncs/1", "/syncs/2"):
            page.goto(url + where)
            assert page.evaluate(LOOSE_DATES) == [], where
            texts = page.locator("main time[datetime]").all_text_contents()
            assert all(TIME_TEXT.match(t) for t in texts), (where, texts)
            assert all(" GMT+5:30 · " in t for t in texts), (where, texts)
    finally:
        context.close()


BAD_CLASSES = ("phase-failed", "phase-error", "phase-invalid", "phase-blocked",
               "phase-partial", "phase-failure")


def test_colour_is_never_the_only_signal(site: tuple[str, Seeded], site_page: Any) -> None:
    url, _ = site
    before = "(els) => els.map(e => getComputedStyle(e, '::before').content)"
    for where in ("/", "/resources", "/history", f"/resources/Sweep/{PROJECT}/batch-size",
                  f"/resources/Pipeline/{PROJECT}/train-eval"):
        site_page.goto(url + where)
        badges = site_page.locator(".phase")
        words = badges.evaluate_all("els => els.map(e => e.textContent.trim())")
        assert words and all(w for w in words), (where, words)  # every badge says its state
        bad = site_page.locator(", ".join(f".phase.{c}" for c in BAD_CLASSES))
        assert bad.count() > 0, where
        assert all("✕" in mark for mark in bad.evaluate_all(before)), where
        problems = site_page.locator("section.card.problem > h2, tr.bad > td:first-child")
        assert all("⚠" in mark for mark in problems.evaluate_all(before)), where
    site_page.goto(url + "/")
    assert site_page.locator("section.card.problem > h2").count() == 2
    site_page.goto(url + "/resources")
    assert site_page.locator("tr.bad > td:first-child").count() >= 1
