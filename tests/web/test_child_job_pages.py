"""The dashboard and the JSON API on real runs: a Pipeline's stage Jobs and a Sweep's cell
Jobs have pages and documents of their own, with their parent shown, and a Job run with
no sandbox says so on its page."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from nodus_gitops.backends import build_backend
from nodus_gitops.config import Binding, Settings
from nodus_gitops.service import Service
from nodus_gitops.wiring import build_service

from tests.fixtures_git import ManifestRepo
from tests.support.local_runs import stop_local_runs
from tests.web.conftest import serve
from tests.workloads.test_workloads_local import Cluster

PIPELINE = """\
apiVersion: nodus.dev/v1
kind: Pipeline
metadata:
  name: te
spec:
  stages:
    - name: prep
      template:
        command: [python3, -c, "print('prep out')"]
    - name: train
      dependsOn: [prep]
      template:
        command: [python3, -c, "import sys; print('train out'); sys.exit(3)"]
"""
SWEEP = """\
apiVersion: nodus.dev/v1
kind: Sweep
metadata:
  name: sw
spec:
  matrix:
    params:
      BS: ["1", "2"]
  template:
    kind: Job
    spec:
      command: [python3, -c, "import os; print('cell', os.environ['NODUS_PARAM_BS'])"]
"""
JOB = """\
apiVersion: nodus.dev/v1
kind: Job
metadata:
  name: solo
spec:
  command: [python3, -c, "print('solo')"]
"""


class Uncontained(Cluster):
    """The workloads' cluster on a local backend configured with `sandbox: none`."""

    def _service(self) -> Service:
        settings = {"type": "local", "prestartSupervisor": False, "sandbox": "none"}
        state = self.tmp / "state"
        return build_service(
            Settings(state_dir=state, bindings=(Binding(id="w", url=self.repo.push_url,
                                                        project="p"),)),
            self.store, provider_factory=lambda name: build_backend(name, settings, state))


@pytest.fixture
def client(manifest_repo: ManifestRepo, tmp_path: Path) -> Iterator[httpx.Client]:
    cluster = Uncontained(manifest_repo, tmp_path)
    try:
        cluster.push({"pipeline.yaml": PIPELINE, "sweep.yaml": SWEEP, "job.yaml": JOB})
        for kind, name in (("Pipeline", "te"), ("Sweep", "sw"), ("Job", "solo")):
            cluster.wait(kind, name)
        url, stop = serve(Seededish(cluster.service))
        try:
            with httpx.Client(base_url=url, timeout=30) as c:
                yield c
        finally:
            stop()  # type: ignore[operator]
    finally:
        stop_local_runs(tmp_path / "state" / "local")


class Seededish:
    """What `serve` reads of a seeded dashboard: its service."""

    def __init__(self, service: Service) -> None:
        self.service = service


def test_a_stage_job_has_a_document_with_its_parent(client: httpx.Client) -> None:
    doc = client.get("/api/v1/resources/Job/p/te-train")
    assert doc.status_code == 200, doc.text
    body = doc.json()
    assert (body["kind"], body["name"], body["phase"], body["reason"]) == (
        "Job", "te-train", "Failed", "BackoffLimitExceeded")
    assert body["parent"] == {"kind": "Pipeline", "project": "p", "name": "te",
                              "stage": "train"}
    assert body["binding"] == "w" and body["manifest"]["metadata"]["name"] == "te-train"
    assert any(e["reason"] == "Started" for e in body["events"])  # the backend's own
    logs = client.get("/api/v1/resources/Job/p/te-train/logs")
    assert logs.status_code == 200 and logs.json()["lines"] == ["train out"]
    # What Git declares has no parent; what nobody created has no document.
    assert client.get("/api/v1/resources/Job/p/solo").json()["parent"] is None
    assert client.get("/api/v1/resources/Pipeline/p/te").json()["parent"] is None
    assert client.get("/api/v1/resources/Job/p/te-nope").status_code == 404


def test_a_cell_job_page_links_its_sweep_and_shows_its_logs(client: httpx.Client) -> None:
    page = client.get("/resources/Job/p/sw-1")
    assert page.status_code == 200, page.text
    html = page.text
    assert 'href="/resources/Sweep/p/sw"' in html and "(cell 1)" in html
    assert "cell 2" in html  # its log
    assert 'data-poll="/api/v1/resources/Job/p/sw-1"' in html
    assert client.get("/api/v1/resources/Job/p/sw-1").json()["parent"]["cell"] == "1"
    logs = client.get("/resources/Job/p/sw-1/logs")
    assert logs.status_code == 200 and "cell 2" in logs.text
    assert client.get("/resources/Job/p/sw-1/logs?job=sw-0").status_code == 404


def test_parent_pages_link_each_stage_and_cell_to_its_job(client: httpx.Client) -> None:
    html = client.get("/resources/Pipeline/p/te").text
    for job in ("te-prep", "te-train"):
        assert f'href="/resources/Job/p/{job}"' in html
        assert f'href="/resources/Pipeline/p/te/logs?job={job}"' in html
    html = client.get("/resources/Sweep/p/sw").text
    for job in ("sw-0", "sw-1"):
        assert f'href="/resources/Job/p/{job}"' in html


def test_a_job_run_without_a_sandbox_says_so_on_its_page(client: httpx.Client) -> None:
    for job in ("solo", "te-prep"):
        html = client.get(f"/resources/Job/p/{job}").text
        assert "Sandbox" in html
        assert ("none: the command runs as the reconciler&#x27;s own user and sees the whole "
                "machine") in html
        assert "NoSandbox" in html  # the backend's warning, among the events


def test_real_stages_show_their_durations_and_their_file(client: httpx.Client) -> None:
    html = client.get("/resources/Pipeline/p/te").text
    stages = html.split('class="stages"', 1)[1].split("</table>", 1)[0]
    for stage in ("prep", "train"):
        row = stages.split(f'<tr data-stage="{stage}">', 1)[1].split("</tr>", 1)[0]
        running = re.search(r'data-field="running"><span class="duration">(\d+s|\d+m \d+s)<',
                            row)
        assert running, row  # both ended: a fixed duration, from their own start and end
        assert re.search(r'data-field="queued"><span class="duration">\d+', row), row
    graph = html.split('class="pipeline-graph"', 1)[1].split("</svg>", 1)[0]
    assert '<a href="/resources/Job/p/te-train" class="node-link"' in graph
    # The manifest is the pushed file itself, the Pipeline's document marked.
    source = html.split('<pre class="source" data-file="pipeline.yaml">', 1)[1]
    lines = re.findall(r'<span id="L(\d+)" class="line own">', source.split("</pre>", 1)[0])
    assert len(lines) == PIPELINE.count("\n")
    assert 'command: [python3, -c, &quot;print(&#x27;prep out&#x27;)&quot;]' in source
    job = client.get("/resources/Job/p/te-train").text
    assert '<pre class="source" data-file="pipeline.yaml">' in job
    assert re.search(r'<dt>Running</dt><dd><span data-field="running"><span '
                     r'class="duration">\d+s<', job)
