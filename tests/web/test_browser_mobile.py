"""The dashboard on a phone, 390 x 844 px: no page scrolls sideways (a wide table scrolls
inside its own wrapper) and the whole header is on the screen."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.web import test_browser as shared
from tests.web.seed import PROJECT, SHA1

# The browser, the marks and the seeded site, shared with test_browser.py.
browser_type_launch_args = shared.browser_type_launch_args
pytestmark = shared.pytestmark
site = shared.site
expect = shared.expect
WIDTH, HEIGHT = 390, 844
PAGES = {"overview": "/", "resources": "/resources", "job": f"/resources/Job/{PROJECT}/hello",
         "pipeline": f"/resources/Pipeline/{PROJECT}/train-eval",
         "sweep": f"/resources/Sweep/{PROJECT}/batch-size", "history": "/history",
         "logs": f"/resources/Pipeline/{PROJECT}/train-eval/logs?job=train-eval-train",
         "tree": "/repos/ml-team", "sync": "/syncs/1", "blocked-sync": "/syncs/2",
         "file": f"/repos/ml-team/files/{SHA1}/jobs/batch-size.yaml"}


@pytest.fixture
def phone(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT},
                                  device_scale_factor=3, is_mobile=True, has_touch=True)
    page = context.new_page()
    page.set_default_timeout(8000)
    yield page
    context.close()


@pytest.mark.parametrize("name", PAGES)
def test_no_page_is_wider_than_a_phone(site: Any, phone: Any, name: str) -> None:
    url, _ = site
    phone.goto(url + PAGES[name])
    expect(phone.locator("main h1")).to_be_visible()
    width = phone.evaluate("document.scrollingElement.scrollWidth")
    assert width <= WIDTH, f"{name} is {width} px wide"
    for link in phone.locator("header a").all():  # the header is not cut
        box = link.bounding_box()
        assert box and 0 <= box["x"] and box["x"] + box["width"] <= WIDTH, (name, box)
    shared.shot(phone, f"mobile-{name}")


def test_a_wide_table_scrolls_inside_its_own_box(site: Any, phone: Any) -> None:
    url, _ = site
    phone.goto(url + "/resources")
    wrapper = phone.locator("table.resources").evaluate_handle(  # the box that scrolls it
        "t => t.closest('.table-wrap') || t")
    sizes = wrapper.evaluate("w => [w.scrollWidth, w.clientWidth]")
    assert sizes[0] > sizes[1]  # the table is wider than the screen ...
    wrapper.evaluate("w => { w.scrollLeft = w.scrollWidth; }")
    assert wrapper.evaluate("w => w.scrollLeft") > 0  # ... and scrolls in its wrapper
    assert phone.evaluate("document.scrollingElement.scrollWidth") <= WIDTH
