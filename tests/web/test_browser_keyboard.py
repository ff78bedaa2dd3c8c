"""The dashboard with a keyboard only: a skip link first, a visible focus ring on every
control, every control reached by Tab in reading order, and the Resources filters and
sortable headers used without a pointer."""

from __future__ import annotations

from typing import Any

from tests.web import test_browser as shared
from tests.web.seed import PROJECT

# The browser, the marks and the seeded site, shared with test_browser.py.
browser_type_launch_args = shared.browser_type_launch_args
pytestmark = shared.pytestmark
site = shared.site
site_page = shared.site_page
expect = shared.expect

FOCUSABLE = ("a[href], button, input:not([type=hidden]), select, textarea, summary, "
             "[tabindex]:not([tabindex='-1'])")
# What the focused element is and where: its tag, text or name, box, and its focus ring.
DESCRIBE = """() => {
  const e = document.activeElement, r = e.getBoundingClientRect(), s = getComputedStyle(e);
  return {tag: e.tagName, name: e.getAttribute('name') || e.textContent.trim(),
          href: e.getAttribute('href'), x: r.left + window.scrollX, y: r.top + window.scrollY,
          w: r.width, h: r.height, ring: s.outlineStyle !== 'none' ?
          parseFloat(s.outlineWidth) : 0, inHeader: !!e.closest('header'),
          card: [...document.querySelectorAll('section')].indexOf(e.closest('section'))};
}"""


def tab_until(page: Any, selector: str, text: str | None = None, most: int = 60) -> None:
    """Press Tab until the focused element matches `selector` (and has `text`)."""
    for _ in range(most):
        page.keyboard.press("Tab")
        if page.evaluate("([s, t]) => document.activeElement.matches(s) && (t === null || "
                         "document.activeElement.textContent.trim() === t)", [selector, text]):
            return
    raise AssertionError(f"Tab never reached {selector} {text or ''}")


def test_skip_link_comes_first_and_jumps_to_the_content(site: Any, site_page: Any) -> None:
    url, _ = site
    site_page.goto(url + "/resources")
    site_page.keyboard.press("Tab")
    skip = site_page.evaluate(DESCRIBE)
    assert skip["name"] == "Skip to content" and skip["ring"] >= 2
    assert skip["y"] >= 0 and skip["h"] > 0  # on screen while focused
    site_page.keyboard.press("Enter")
    assert site_page.evaluate("document.activeElement.id") == "main"
    site_page.keyboard.press("Tab")  # the first control of the page, not the header
    assert site_page.evaluate("s => document.activeElement === document.querySelector(s)",
                              f"main :is({FOCUSABLE})")


def _tab_through(page: Any) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    for _ in range(200):
        page.keyboard.press("Tab")
        here = page.evaluate(DESCRIBE)
        if seen and here["tag"] == "A" and here["name"] == "Skip to content":
            return seen  # around once
        if here["tag"] != "BODY":
            seen.append(here)
    raise AssertionError("Tab never came back around to the skip link")


def test_every_control_is_reached_in_reading_order(site: Any, site_page: Any) -> None:
    url, _ = site
    for where in ("/resources", "/", f"/resources/Sweep/{PROJECT}/batch-size", "/history",
                  f"/resources/Pipeline/{PROJECT}/train-eval", "/repos/ml-team", "/syncs/1"):
        site_page.goto(url + where)
        expected = site_page.locator(FOCUSABLE).evaluate_all(
            "els => els.filter(e => e.getClientRects().length).length")
        seen = _tab_through(site_page)
        assert len(seen) == expected, where  # every visible control, and each once
        assert all(s["ring"] >= 2 for s in seen), [s for s in seen if s["ring"] < 2]
        assert seen[0]["name"] == "Skip to content"
        header = [s for s in seen if s["inHeader"]]
        assert seen[1:1 + len(header)] == header  # the header's, together, after the skip link
        body = seen[1 + len(header):]
        for before, after in zip(body, body[1:], strict=False):
            if before["card"] != after["card"]:
                continue  # cards side by side are read one after the other
            # Down the page; along a line from left to right.
            same_line = abs((after["y"] + after["h"] / 2) - (before["y"] + before["h"] / 2)) < 12
            assert (after["x"] > before["x"]) if same_line else after["y"] > before["y"], (
                where, before, after)


def test_filter_and_sort_from_the_keyboard(site: Any, site_page: Any) -> None:
    url, _ = site
    site_page.goto(url + "/resources")
    rows = site_page.locator("table.resources tbody tr")
    expect(rows).to_have_count(6)

    tab_until(site_page, "input[name=name]")
    site_page.keyboard.type("hello")
    site_page.keyboard.press("Enter")
    site_page.wait_for_url("**/resources?*name=hello*")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-key", f"Job/{PROJECT}/hello")

    tab_until(site_page, "a.sort", "Cost")
    site_page.keyboard.press("Enter")
    site_page.wait_for_url("**sort=cost*")
    assert "name=hello" in site_page.url  # the filter is kept in the URL

    # A select moves with the arrows without leaving the page; Enter applies it.
    site_page.goto(url + "/resources")
    tab_until(site_page, "select[name=kind]")
    site_page.keyboard.press("ArrowDown")
    site_page.keyboard.press("ArrowDown")  # any -> Job -> Pipeline
    assert site_page.evaluate("document.activeElement.value") == "Pipeline"
    site_page.keyboard.press("Enter")
    site_page.wait_for_url("**/resources?*kind=Pipeline*")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-key", f"Pipeline/{PROJECT}/train-eval")
