"""The README's pictures of the dashboard: the overview, a Pipeline and a Sweep of the
seeded site, taken in Chromium at 1280 px wide. Every run takes them (into a temporary
folder); with NODUS_GITOPS_SCREENSHOTS=1 they are written to docs/screenshots/, which is
how the README's copies are made, so that a test run leaves the checkout as it was."""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

import pytest

from tests.web import test_browser as shared
from tests.web.seed import PROJECT

# The browser, the marks and the seeded site, shared with test_browser.py.
browser_type_launch_args = shared.browser_type_launch_args
pytestmark = shared.pytestmark
site = shared.site
expect = shared.expect

SCREENSHOTS = Path(__file__).parents[2] / "docs" / "screenshots"
WIDTH = 1280
PAGES = {"overview": "/", "pipeline": f"/resources/Pipeline/{PROJECT}/train-eval",
         "sweep": f"/resources/Sweep/{PROJECT}/batch-size"}


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's header; fails on anything that is not a PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


@pytest.fixture
def desktop(browser: Any) -> Any:
    context = browser.new_context(viewport={"width": WIDTH, "height": 900})
    page = context.new_page()
    page.set_default_timeout(8000)
    yield page
    context.close()


@pytest.mark.parametrize("name", PAGES)
def test_screenshot(site: Any, desktop: Any, name: str, tmp_path: Path) -> None:
    url, _ = site
    desktop.goto(url + PAGES[name])
    expect(desktop.locator("#live")).to_have_class("live ok")  # read once more, times local
    folder = SCREENSHOTS if os.environ.get("NODUS_GITOPS_SCREENSHOTS") == "1" else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{name}.png"
    desktop.screenshot(path=str(target), full_page=True)
    width, height = png_size(target.read_bytes())
    assert width == WIDTH and height >= 400
    assert target.stat().st_size > 20_000  # a page, not a blank
