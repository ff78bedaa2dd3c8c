"""The dashboard in Chromium against a real `nodus-gitops serve` that reconciles
examples-repo on the local backend: the Resources page, opened before the first sync
recorded anything, gains the examples' rows and sees them reach Succeeded without a
reload; the Pipeline draws every stage, the Sweep marks its best cells and draws its
chart. Screenshots of the main pages go to tests/web/artifacts/."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.test_quickstart import clone_with_examples, free_port
from tests.web.test_browser import (  # noqa: F401 (fixtures and marks, shared)
    CHROMIUM,
    browser_type_launch_args,
    pytestmark,
    shot,
    sync_api,
)

expect = sync_api.expect


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("live")
    clone = clone_with_examples(tmp)
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-P", "-m", "nodus_gitops.cli", "serve", "--repo", ".", "--path",
         "examples-repo", "--listen", f"127.0.0.1:{port}", "--interval", "1s"],
        cwd=clone, env={**os.environ, "NODUS_GITOPS_HOME": str(tmp / "state")},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)


def test_examples_reach_succeeded_live(served: str, page: Any) -> None:
    page.set_default_timeout(10_000)
    deadline = time.monotonic() + 60
    while True:  # until the server answers: the first sync may not have recorded anything
        try:
            if httpx.get(f"{served}/api/v1/resources", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "the server never answered"
        time.sleep(0.1)
    page.goto(f"{served}/resources")
    page.evaluate("window.__notReloaded = true")
    for key in ("Job/default/hello", "Job/default/indexed-outputs",
                "Pipeline/default/train-eval", "Sweep/default/batch-size"):
        expect(page.locator(f'tr[data-key="{key}"] [data-field="phase"]')).to_have_text(
            "Succeeded", timeout=90_000)
    expect(page.locator("table.resources tbody tr")).to_have_count(4)
    assert page.evaluate("window.__notReloaded") is True  # updated in place
    shot(page, "live-resources")

    page.goto(f"{served}/resources/Pipeline/default/train-eval")
    expect(page.locator("svg.pipeline-graph g.node")).to_have_count(3)
    for stage in ("prepare", "train", "eval"):
        expect(page.locator(f'g.node[data-stage="{stage}"]')).to_have_class(
            "node phase-succeeded")
    shot(page, "live-pipeline")

    page.goto(f"{served}/resources/Sweep/default/batch-size")
    expect(page.locator("svg.sweep-chart circle")).to_have_count(6)
    expect(page.locator("svg.sweep-chart circle.best-cost")).to_have_count(1)
    expect(page.locator("svg.sweep-chart circle.best-throughput")).to_have_count(1)
    shot(page, "live-sweep")

    page.goto(f"{served}/resources/Job/default/hello")
    expect(page.get_by_text("report.json").first).to_be_visible()
    shot(page, "live-job")
