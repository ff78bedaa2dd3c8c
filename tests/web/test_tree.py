"""The binding page, /repos/<binding>: the binding's resources as a tree, its Pipelines with
their stage Jobs, its Sweeps with their cell Jobs, then its plain Jobs; each node a link
with its phase, duration and cost; read a page at a time."""

from __future__ import annotations

import re
import time

import httpx
import pytest
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.state.records import InventoryRecord
from nodus_gitops.web.tree import binding_page

from tests.web.seed import BAD_NAME, PROJECT, XSS_IMG, XSS_SCRIPT, Seeded


def page(seeded: Seeded, binding: str = "ml-team", **params: str) -> tuple[int, str]:
    status, body = binding_page(seeded.service, binding, {k: [v] for k, v in params.items()})
    return status, body.decode()


def nodes(html: str) -> list[tuple[str, str, str, str, str]]:
    """(key, link, phase, duration, cost) of every node, in page order."""
    found = []
    for item in html.split("<li ")[1:]:
        line = item.split('class="node-line">', 1)[1].split("</span><ul", 1)[0]
        link = re.search(r'<a href="([^"]+)">', line)
        found.append((re.match(r'data-key="([^"]+)"', item)[1],  # type: ignore[index]
                      link[1] if link else "",
                      re.search(r'data-field="phase">([^<]*)<', line)[1],  # type: ignore[index]
                      re.sub(r"<[^>]+>", "", line.split('data-field="took">', 1)[1]
                             .split('</span> <span class="num"', 1)[0]),
                      re.search(r'data-field="cost">([^<]*)<', line)[1]))  # type: ignore[index]
    return found


def test_the_tree_puts_stage_and_cell_jobs_under_their_parent(seeded: Seeded) -> None:
    status, html = page(seeded)
    assert status == 200
    found = nodes(html)
    keys = [k for k, *_ in found]
    assert keys == [
        f"Pipeline/{PROJECT}/train-eval",
        *(f"Job/{PROJECT}/train-eval-{s}" for s in ("prepare", "train", "eval", "report")),
        f"Sweep/{PROJECT}/batch-size", *(f"Job/{PROJECT}/batch-size-{i}" for i in range(6)),
        f"Job/{PROJECT}/{BAD_NAME}".replace('"', "&quot;").replace(">", "&gt;")
        .replace("<", "&lt;"), f"Job/{PROJECT}/hello"]
    by_key = {k: rest for k, *rest in found}
    assert by_key[f"Job/{PROJECT}/train-eval-prepare"] == [
        f"/resources/Job/{PROJECT}/train-eval-prepare", "Succeeded", "1m 00s", "$0.01"]
    assert by_key[f"Job/{PROJECT}/train-eval-eval"] == ["", "Pending", "-", "$0.00"]
    assert by_key[f"Job/{PROJECT}/train-eval-report"][3] == "$0.001"
    assert by_key[f"Pipeline/{PROJECT}/train-eval"][:2] == [
        f"/resources/Pipeline/{PROJECT}/train-eval", "Running"]
    assert by_key[f"Sweep/{PROJECT}/batch-size"][3] == "$0.27"
    # The children are nested in their parent's node, the plain Jobs are not.
    pipeline = html.split(f'data-key="Pipeline/{PROJECT}/train-eval"', 1)[1].split(
        'data-key="Sweep/', 1)[0]
    assert pipeline.count('class="child"') == 4
    assert "stage train" in pipeline
    assert "cell 3" in html
    assert "ops" not in [k.split("/")[1] for k in keys]  # only this binding's
    assert XSS_SCRIPT not in html and "<img" not in html and XSS_IMG not in html


def test_each_kind_has_a_count_and_the_tree_is_marked_live(seeded: Seeded) -> None:
    _, html = page(seeded)
    assert re.findall(r"<h2>(\w+ \(\d+\))</h2>", html) == [
        "Pipelines (1)", "Sweeps (1)", "Jobs (2)"]
    ids = re.findall(r'data-live="([^"]+)"', html)
    assert ids.count("tree") == 1 and len(ids) == len(set(ids))
    _, ops = page(seeded, "ops")
    assert re.findall(r"<h2>(\w+ \(\d+\))</h2>", ops) == [
        "Pipelines (0)", "Sweeps (0)", "Jobs (2)"]


def test_a_kind_pages_by_fifty(seeded: Seeded) -> None:
    for i in range(120):
        seeded.store.upsert_resource(InventoryRecord(
            ResourceKey("Job", PROJECT, f"bulk-{i:03}"), "ml-team", {}, "h", phase="Queued"))
    _, first = page(seeded)
    jobs = first.split('data-kind="Job"', 1)[1]
    assert len(re.findall(r'<li data-key="Job/', jobs)) == 50
    assert "Jobs (122)" in first and "Pipelines (1)" in first
    assert 'rel="next" href="/repos/ml-team?kind=Job&amp;after=ml%2Fbulk-049"' in first
    _, second = page(seeded, kind="Job", after="ml/bulk-049")
    keys = re.findall(r'<li data-key="Job/ml/([^"]+)"', second)
    assert keys == [f"bulk-{i:03}" for i in range(50, 100)]
    assert 'data-kind="Pipeline"' not in second and 'rel="first"' in second
    _, third = page(seeded, kind="Job", after="ml/bulk-099")
    keys = re.findall(r'<li data-key="Job/ml/([^"]+)"', third)
    assert keys[:20] == [f"bulk-{i:03}" for i in range(100, 120)] and len(keys) == 22
    assert keys[-1] == "hello" and 'rel="next"' not in third
    assert "Jobs (122)" in third


def test_bad_parameters_and_unknown_bindings(seeded: Seeded) -> None:
    assert page(seeded, "nope")[0] == 404
    assert page(seeded, kind="Secret")[0] == 400
    assert page(seeded, kind="Job", after="no-slash")[0] == 400
    assert page(seeded, after="ml/hello")[0] == 400  # after what kind


@pytest.mark.parametrize("size", [100_000])
def test_a_large_binding_costs_a_page(seeded: Seeded, size: int) -> None:
    """100,000 resources in one binding: the page reads a page of them."""
    from nodus_gitops.state.models import InventoryItem
    from sqlalchemy import insert

    table = InventoryItem.__table__  # type: ignore[attr-defined]
    record = seeded.store.get_resource(ResourceKey("Job", PROJECT, "hello"))
    assert record is not None
    rows = [dict(kind="Job", project=PROJECT, name=f"bulk-{i:06}", binding_id="ml-team",
                 manifest=record.manifest, spec_hash="h", status=record.status,
                 cost_usd="0.01", phase="Running", created_at=record.created_at,
                 updated_at=record.updated_at, deleted=False)
            for i in range(size)]
    with seeded.store._engine.begin() as conn:
        conn.execute(insert(table), rows)
    best = min(_timed(lambda: page(seeded)) for _ in range(3))
    deep = min(_timed(lambda: page(seeded, kind="Job", after=f"{PROJECT}/bulk-090000"))
               for _ in range(3))
    print(f"binding page at {size} resources: first {best * 1000:.0f} ms, "
          f"after 90,000 {deep * 1000:.0f} ms")
    assert "Jobs (more than 1000)" in page(seeded)[1]
    keys = re.findall(r'<li data-key="Job/ml/([^"]+)"',
                      page(seeded, kind="Job", after=f"{PROJECT}/bulk-090000")[1])
    assert keys == [f"bulk-{i:06}" for i in range(90001, 90051)]


def _timed(call: object) -> float:
    start = time.perf_counter()
    call()  # type: ignore[operator]
    return time.perf_counter() - start


def test_the_page_over_http(client: httpx.Client) -> None:
    response = client.get("/repos/ml-team")
    if response.status_code == 404 and "no such endpoint" in response.text:
        pytest.skip("the route /repos/<binding> is not in routes.py yet")
    assert response.status_code == 200
    assert f'href="/resources/Job/{PROJECT}/train-eval-train"' in response.text
    assert client.get("/repos/nope").status_code == 404
