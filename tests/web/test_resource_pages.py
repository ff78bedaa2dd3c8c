"""A resource's page over real HTTP, as a user reads it: how long it waited, ran and took;
a Pipeline's stage graph whose boxes link to the stage Jobs with their phase, duration and
cost; a Sweep's chart as wide as the page with a table of the same points, and costs
below a cent shown as what they are; the manifest as the file's own text at its commit
(masked), and said to be the stored copy when the file cannot be read."""

from __future__ import annotations

import re
from collections import Counter

import httpx
from nodus_gitops.floor.identity import ResourceKey

from tests.web.seed import PROJECT, SHA1, Seeded, sweep_status

PIPELINE = f"/resources/Pipeline/{PROJECT}/train-eval"
SWEEP = f"/resources/Sweep/{PROJECT}/batch-size"


def rows(html: str, table_class: str) -> list[str]:
    body = html.split(f'class="{table_class}"', 1)[1].split("</table>", 1)[0]
    return re.findall(r"<tr[ >].*?</tr>", body.split("<tbody>", 1)[1], re.S)


def cells(row: str) -> list[str]:
    """The text of each cell of a table row, its markup removed."""
    return [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]


def fact(html: str, name: str) -> str:
    found = re.search(rf"<dt>{name}</dt><dd>(.*?)</dd>", html, re.S)
    assert found, name
    return re.sub(r"<[^>]+>", "", found[1])


def test_the_stage_graph_links_each_started_stage_with_its_phase_duration_and_cost(
        client: httpx.Client) -> None:
    html = client.get(PIPELINE).text
    svg = html.split('<svg', 1)[1].split("</svg>", 1)[0]
    links = re.findall(r'<a href="([^"]+)" class="node-link"[^>]*><g class="node [^"]+" '
                       r'data-stage="(\w+)"', svg)
    assert links == [(f"/resources/Job/{PROJECT}/train-eval-prepare", "prepare"),
                     (f"/resources/Job/{PROJECT}/train-eval-train", "train"),
                     (f"/resources/Job/{PROJECT}/train-eval-report", "report")]
    assert 'data-stage="eval"' in svg  # pending: no Job yet, so no link
    node = svg.split('data-stage="prepare"', 1)[1].split("</g>", 1)[0]
    assert 'data-field="phase">Succeeded<' in node
    assert 'data-field="duration">1m 00s<' in node  # 03:04:05 to 03:05:05
    assert 'data-field="cost" text-anchor="end">$0.01<' in node
    report = svg.split('data-stage="report"', 1)[1].split("</g>", 1)[0]
    assert 'data-field="cost" text-anchor="end">$0.001<' in report  # not $0.00
    # Each link reaches the stage Job's page.
    for href, _ in links:
        assert client.get(href).status_code == 200


def test_the_stage_table_says_how_long_each_stage_waited_ran_and_took(
        client: httpx.Client) -> None:
    html = client.get(PIPELINE).text
    headers = re.findall(r"<th(?: [^>]*)?>(.*?)</th>",
                         html.split('class="stages"', 1)[1].split("</thead>", 1)[0])
    assert headers == ["Stage", "Job", "Phase", "Cost", "Started", "Finished", "Queued",
                       "Running", "Total", "Reason"]
    by_stage = {cells(r)[0]: cells(r) for r in rows(html, "stages")}
    prepare, train, pending = by_stage["prepare"], by_stage["train"], by_stage["eval"]
    assert prepare[4].startswith("2025-01-02 03:04:05") and prepare[5].startswith(
        "2025-01-02 03:05:05")
    assert prepare[7] == "1m 00s"
    # train was ready when prepare ended (03:05:05) and started a second later; it runs.
    assert train[6] == "1s" and train[5] == "-"
    assert re.search(r'data-field="running"><span class="duration" data-running>',
                     rows(html, "stages")[1])
    assert pending[4:9] == ["-", "-", "-", "-", "-"]  # waiting on train: nothing to count
    assert by_stage["report"][3] == "$0.001"


def test_every_resource_page_has_its_durations(client: httpx.Client,
                                               seeded: Seeded) -> None:
    job = client.get(f"/resources/Job/{PROJECT}/hello").text
    # Started 2025-01-02 03:04:05 by its backend, recorded later (so its wait is unknown).
    assert fact(job, "Queued") == "-"
    assert re.match(r"\d+d \d+h$", fact(job, "Running"))
    assert fact(job, "Total") == fact(job, "Running")
    assert '<time datetime="2025-01-02T03:04:05+00:00">2025-01-02 03:04:05' in job
    key = ResourceKey("Job", PROJECT, "hello")
    record = seeded.store.get_resource(key)
    assert record is not None
    seeded.store.update_status(key, "Succeeded", None, None, None, {
        **record.status, "createdTime": "2025-01-02T03:00:00Z",
        "completionTime": "2025-01-02T03:14:05Z"}, "0.02")
    job = client.get(f"/resources/Job/{PROJECT}/hello").text
    assert (fact(job, "Queued"), fact(job, "Running"), fact(job, "Total")) == (
        "4m 05s", "10m 00s", "14m 05s")
    pipeline = client.get(PIPELINE).text
    assert fact(pipeline, "Running") != "-"  # from its first stage's start
    assert fact(client.get(SWEEP).text, "Queued") == "-"  # no cell says when it started


def test_the_sweep_chart_is_as_wide_as_the_page_with_its_points_in_a_table(
        client: httpx.Client) -> None:
    html = client.get(SWEEP).text
    svg = re.search(r'<svg [^>]*class="sweep-chart"[^>]*>', html)
    assert svg and 'width="100%"' in svg[0] and 'viewBox="0 0 ' in svg[0]
    assert "height=" not in svg[0]  # it follows from the viewBox's ratio
    chart = html.split('class="sweep-chart"', 1)[1].split("</svg>", 1)[0]
    assert ">units per second<" in chart and ">cost (USD)<" in chart
    points = re.findall(r'<circle [^>]*data-cell="(\d+)"', chart)
    table_rows = rows(html, "chart-data")
    assert [cells(r)[0] for r in table_rows] == points == ["0", "1", "2", "3", "5"]
    assert cells(table_rows[0]) == ["0", "410.0", "$0.04"]


def test_costs_below_a_cent_show_their_digits_on_the_axis_and_in_the_tables(
        client: httpx.Client, seeded: Seeded) -> None:
    status = sweep_status()
    for i, c in enumerate(status["cells"]):
        c["costUSD"] = f"0.00000{i + 1}"
    seeded.store.update_status(ResourceKey("Sweep", PROJECT, "batch-size"), "Succeeded",
                               None, None, None, status, "0.000021")
    html = client.get(SWEEP).text
    chart = html.split('class="sweep-chart"', 1)[1].split("</svg>", 1)[0]
    ticks = re.findall(r'class="tick" text-anchor="end">([^<]+)<', chart)
    assert ticks == ["$0", "$0.000002", "$0.000004", "$0.000006", "$0.000008"]
    assert not re.search(r"\de-\d", html)  # no exponent form anywhere
    assert [cells(r)[6] for r in rows(html, "cells")] == [
        "$0.000001", "$0.000002", "$0.000003", "$0.000004", "$0.000005", "$0.000006"]
    assert [cells(r)[2] for r in rows(html, "chart-data")][:2] == ["$0.000001", "$0.000002"]
    assert fact(html, "Cost") == "$0.000021"


def test_the_manifest_is_the_file_as_written_at_its_commit(client: httpx.Client) -> None:
    html = client.get(f"/resources/Job/{PROJECT}/hello").text
    source = html.split('<pre class="source"', 1)[1].split("</pre>", 1)[0]
    lines = re.findall(r'<span id="L(\d+)" class="(line[^"]*)">.*?<span class="code">(.*?)'
                       r"</span>", source)
    assert lines[0] == ("1", "line", "# Says hello from each of its two indexes, then counts.")
    text = [t for _, _, t in lines]
    assert "    - |" in text and "      for step in $(seq 0 299); do" in text
    assert "    API_KEY: ********" in text and "    DB_PASSWORD: ********" in text
    assert "    LOG_LEVEL: debug" in text
    assert "sk-live-123" not in html and "hunter2" not in html
    assert Counter(c for _, c, _ in lines) == {"line": 1, "line own": len(lines) - 1}
    assert f'href="/repos/ml-team/files/{SHA1}/jobs/hello.yaml#L2"' in html
    assert "secret-looking values masked on 2 lines" in html
    assert "re-serialised" not in html


def test_a_stage_job_shows_its_pipeline_s_file_with_the_pipeline_marked(
        client: httpx.Client) -> None:
    html = client.get(f"/resources/Job/{PROJECT}/train-eval-train").text
    assert 'data-file="jobs/train-eval.yaml"' in html
    assert "HF_TOKEN: ********" in html and "hf_supersecret" not in html
    assert 'id="L1" class="line own"' in html


def test_a_manifest_whose_file_cannot_be_read_is_shown_as_stored_and_said_so(
        client: httpx.Client) -> None:
    html = client.get("/resources/Job/ops/nightly").text  # the ops mirror holds nothing
    assert "The file cannot be read (" in html and "not in the mirror" in html
    assert "the manifest as stored, re-serialised, not the file&#x27;s own text" in html
    assert '<pre class="yaml">' in html and '<pre class="source"' not in html


def test_the_lists_that_change_are_marked_live_once_each(client: httpx.Client) -> None:
    common = {"facts", "conditions", "events", "status"}
    for page, expected in ((PIPELINE, {"stage-graph", "stages", *common}),
                           (SWEEP, {"cells", "sweep-chart", "sweep-chart-data", *common}),
                           (f"/resources/Job/{PROJECT}/hello",
                            {"runs", "outputs", "logs", *common}),
                           (f"{PIPELINE}/logs?job=train-eval-train", {"logs"})):
        ids = re.findall(r'data-live="([^"]+)"', client.get(page).text)
        assert len(ids) == len(set(ids)) and set(ids) >= expected, ids
