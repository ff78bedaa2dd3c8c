"""The HTML pages over real HTTP: what each shows, links, filters, paging, and that
nothing planted in manifests, logs, Git or events is ever markup."""

from __future__ import annotations

import re
from urllib.parse import quote

import httpx
import pytest
from nodus_gitops.state.records import InventoryRecord

from tests.web.seed import BAD_NAME, OPS_SHA, PROJECT, SHA1, XSS_SCRIPT, Seeded

PAGES = ["/", "/resources", "/history", f"/resources/Job/{PROJECT}/hello",
         f"/resources/Pipeline/{PROJECT}/train-eval", f"/resources/Sweep/{PROJECT}/batch-size",
         f"/resources/Job/{PROJECT}/{quote(BAD_NAME, safe='')}",
         f"/resources/Pipeline/{PROJECT}/train-eval/logs?job=train-eval-train",
         "/resources?kind=Job&sort=-cost"]


def rows(html: str, table_class: str) -> list[str]:
    body = html.split(f'class="{table_class}"', 1)[1].split("</table>", 1)[0]
    return re.findall(r"<tr[ >].*?</tr>", re.split(r"<tbody[^>]*>", body, maxsplit=1)[1], re.S)


@pytest.mark.parametrize("path", PAGES)
def test_pages_are_safe(client: httpx.Client, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "text/html; charset=utf-8"
    assert response.headers["Content-Security-Policy"].startswith("default-src 'self'")
    html = response.text
    assert XSS_SCRIPT not in html and "<img" not in html
    # Scripts come from /static only; no inline handlers or style attributes.
    assert re.findall(r"<script[^>]*>", html) == ['<script src="/static/app.js" defer>']
    assert not re.search(r"\son[a-z]+\s*=", html.replace(" onerror=alert(1)&gt;", ""))
    assert " style=" not in html


def test_planted_strings_show_as_text(client: httpx.Client) -> None:
    job = client.get(f"/resources/Job/{PROJECT}/hello").text
    script, img = "&lt;script&gt;alert(1)&lt;/script&gt;", "&quot;&gt;&lt;img src=x onerror"
    assert job.count(script) >= 3  # label in the manifest, log line, event, condition
    assert img in job  # the annotation and the log of index 1
    bad = client.get(f"/resources/Job/{PROJECT}/{quote(BAD_NAME, safe='')}").text
    assert f"<h1>Job evil{img}=alert(1)&gt;</h1>" in bad
    assert script in client.get("/").text  # the binding's last error
    assert img in client.get("/history").text and script in client.get("/history").text


def test_overview_shows_each_binding(client: httpx.Client) -> None:
    html = client.get("/").text
    assert 'data-binding="ml-team"' in html and 'data-binding="ops"' in html
    # ml-team reads a repository on disk: its commits are named, with no host to link to.
    assert f'<code title="{SHA1}">{SHA1[:12]}</code>' in html
    assert f'href="https://gitlab.com/acme/ops/-/commit/{OPS_SHA}"' in html
    assert "s3cret" not in html
    assert 'data-field="syncStatus">Blocked<' in html  # the head is not applied
    # A failed sync, a poll error and failed resources stand out.
    assert html.count('class="card problem"') == 2
    assert 'class="phase phase-invalid bad"' in html
    assert "$0.3133" in html and "$1.5<" in html  # spend, to the digit that is not zero


def test_resources_table_filters_and_sorts(client: httpx.Client) -> None:
    html = client.get("/resources").text
    assert len(rows(html, "resources")) == 6
    assert "6 resources · page 1 of 1" in html
    only = client.get("/resources?kind=Sweep").text
    assert len(rows(only, "resources")) == 1 and "batch-size" in only
    assert '<option value="Sweep" selected>' in only
    by_cost = rows(client.get("/resources?sort=-cost").text, "resources")
    assert "nightly" in by_cost[0]
    # The active column links to the other direction; the filters stay in the links.
    assert 'href="/resources?kind=Sweep&amp;sort=-kind"' in only
    assert client.get("/resources?page=0").status_code == 400


def test_resources_table_pages_by_fifty(client: httpx.Client, seeded: Seeded) -> None:
    from nodus_gitops.floor.identity import ResourceKey

    for i in range(60):
        seeded.store.upsert_resource(InventoryRecord(
            ResourceKey("Job", PROJECT, f"bulk-{i:03}"), "ml-team", {}, "h", phase="Queued"))
    first = client.get("/resources?kind=Job").text
    assert len(rows(first, "resources")) == 50
    assert "64 resources · page 1 of 2" in first and 'rel="next"' in first
    second = client.get("/resources?kind=Job&page=2").text
    assert len(rows(second, "resources")) == 14 and 'rel="prev"' in second


def test_job_page(client: httpx.Client) -> None:
    html = client.get(f"/resources/Job/{PROJECT}/hello").text
    assert "API_KEY: ********" in html  # masked in the file's own text
    assert "sk-live-123" not in html and "hunter2" not in html
    assert "LOG_LEVEL: debug" in html
    assert "4f1c0e9a2b7d" + "0" * 52 in html and "214 B" in html
    assert "jobs/hello.yaml" in html and f'<code title="{SHA1}">' in html
    logs = re.findall(r'<pre class="log" data-logs="([^"]+)">', html)
    assert logs == [f"/api/v1/resources/Job/{PROJECT}/hello/logs?index=0&amp;tail=200",
                    f"/api/v1/resources/Job/{PROJECT}/hello/logs?index=1&amp;tail=200"]
    assert "hello · index 0 · attempt 2" in html
    assert "step 299" in html and "first attempt" not in html
    assert "<td>Running</td><td>True</td><td>Started</td>" in html  # the condition


def test_pipeline_page_draws_the_stage_graph(client: httpx.Client) -> None:
    html = client.get(f"/resources/Pipeline/{PROJECT}/train-eval").text
    svg = html.split('<svg', 1)[1].split("</svg>", 1)[0]
    nodes = re.findall(r'<g class="node (phase-\w+)" data-stage="([^"]+)"', svg)
    assert nodes == [("phase-succeeded", "prepare"), ("phase-running", "train"),
                     ("phase-pending", "eval"), ("phase-failed", "report")]
    edges = re.findall(r'data-from="(\w+)" data-to="(\w+)"', svg)
    assert edges == [("prepare", "train"), ("train", "eval"), ("prepare", "report")]
    assert re.findall(r'class="edge-label"[^>]*>(\w+)<', svg) == ["data", "model"]
    stages = rows(html, "stages")
    assert len(stages) == 4 and "BackoffLimitExceeded" in stages[3]
    assert 'href="/resources/Pipeline/ml/train-eval/logs?job=train-eval-train"' in html
    assert "hf_supersecret" not in html


def test_sweep_page_marks_the_best_cells_and_charts_them(client: httpx.Client) -> None:
    html = client.get(f"/resources/Sweep/{PROJECT}/batch-size").text
    cells = rows(html, "cells")
    assert len(cells) == 6
    assert "best cost" in cells[2] and "best throughput" in cells[5]
    assert sum("best" in c for c in cells) == 2
    chart = html.split('class="sweep-chart"', 1)[1].split("</svg>", 1)[0]
    circles = re.findall(r'<circle [^>]*class="([^"]+)" data-cell="(\d+)"', chart)
    assert len(circles) == 5  # cell 4 failed without throughput
    marked = {cell: cls for cls, cell in circles}
    assert "best-cost" in marked["2"] and "best-throughput" in marked["5"]
    assert "1 cells without cost or throughput are not plotted" in html


def test_history_lists_syncs_with_plans_and_checks(client: httpx.Client) -> None:
    html = client.get("/history").text
    syncs = re.findall(r'<section class="([^"]+)" data-sync="(\d+)"', html)
    assert [c for c, _ in syncs] == ["sync card problem", "sync card"]
    assert "jobs/bad.yaml:3</a>" in html and "unknown field" in html
    assert "nodus-gitops/plan" in html and "gitnotes" in html
    assert "1 created, 1 patched" in html and "created: 1" not in html
    assert client.get("/history?repo=ops").text.count("data-sync=") == 0


def test_missing_resource_page_is_404(client: httpx.Client) -> None:
    assert client.get(f"/resources/Job/{PROJECT}/nope").status_code == 404
    assert client.get(f"/resources/Job/{PROJECT}/hello/logs?job=other").status_code == 404
    assert client.get("/nope").status_code == 404
