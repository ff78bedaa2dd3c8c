"""`/metrics` as Prometheus reads it: the text parsed by prometheus_client's own parser,
each series of the declared type, and the counters moving when a real sync (a served Git
repository, a SQLite store, the fake provider) happens."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from nodus_gitops.config import Binding, Settings
from nodus_gitops.providers.base import FakeProvider
from nodus_gitops.service import Service
from nodus_gitops.state.store import Store
from nodus_gitops.web.server import start_server
from nodus_gitops.wiring import build_service
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

from tests.fixtures_git import ManifestRepo
from tests.reconciler.test_reconcile import job

BINDING = "metrics-team"

# Every series /metrics exposes: the family name (as the parser names it) and its type.
TYPES = {
    "nodus_gitops_syncs": "counter",
    "nodus_gitops_sync_duration_seconds": "histogram",
    "nodus_gitops_git_fetch_duration_seconds": "histogram",
    "nodus_gitops_provider_requests": "counter",
    "nodus_gitops_provider_errors": "counter",
    "nodus_gitops_resources": "gauge",
    "nodus_gitops_cost_usd": "gauge",
}

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture
def served(manifest_repo: ManifestRepo, tmp_path: Path) -> Iterator[tuple[Service, str]]:
    store = Store.open(state_dir=tmp_path / "state")
    binding = Binding(id=BINDING, url=manifest_repo.push_url, path="manifests",
                      project="team-m")
    settings = Settings(state_dir=tmp_path / "state", instance="test", bindings=(binding,))
    provider = FakeProvider()
    service = build_service(settings, store, provider_factory=lambda _name: provider)
    service.follow_up = False
    stop = start_server(service, "127.0.0.1:0")
    host, port = stop.address  # type: ignore[attr-defined]
    try:
        yield service, f"http://{host}:{port}"
    finally:
        stop()  # type: ignore[operator]
        store.close()


def scrape(url: str) -> tuple[dict[str, str], Samples]:
    """The families' types and every sample's value, by (sample name, sorted labels)."""
    response = httpx.get(f"{url}/metrics", timeout=10)
    assert response.status_code == 200
    assert response.headers["Content-Type"] == CONTENT_TYPE_LATEST
    types: dict[str, str] = {}
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        assert family.name not in types, f"{family.name} exposed twice"
        types[family.name] = family.type
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return types, samples


def test_each_series_has_its_type_and_counters_move_with_a_sync(
        served: tuple[Service, str], manifest_repo: ManifestRepo) -> None:
    service, url = served
    manifest_repo.write("manifests/a.yaml", job("a"))
    manifest_repo.commit("a job")
    manifest_repo.push()

    _types, before = scrape(url)
    report = service.reconcile(BINDING)
    assert report is not None and report.result == "applied", report
    types, after = scrape(url)

    assert {name: types.get(name) for name in TYPES} == TYPES
    assert all(not name.endswith("_total") for name, t in types.items() if t == "gauge")
    assert all(not name.endswith("_created") for name in types)

    def moved(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert moved("nodus_gitops_syncs_total", binding=BINDING, result="applied") == 1
    assert moved("nodus_gitops_sync_duration_seconds_count", binding=BINDING) == 1
    assert moved("nodus_gitops_sync_duration_seconds_bucket", binding=BINDING, le="+Inf") == 1
    assert moved("nodus_gitops_sync_duration_seconds_sum", binding=BINDING) > 0
    assert moved("nodus_gitops_git_fetch_duration_seconds_count", binding=BINDING) >= 1
    assert moved("nodus_gitops_provider_requests_total", provider="fake",
                 operation="create") == 1
    # Histogram buckets are cumulative, up to +Inf which is the count.
    buckets = sorted(((float(dict(labels)["le"]), value) for (name, labels), value in after.items()
                      if name == "nodus_gitops_sync_duration_seconds_bucket"
                      and dict(labels)["binding"] == BINDING))
    assert [v for _le, v in buckets] == sorted(v for _le, v in buckets)
    assert buckets[-1] == (float("inf"),
                           after[("nodus_gitops_sync_duration_seconds_count",
                                  (("binding", BINDING),))])
    # The gauges are read from the store at scrape time: the Job now counts, by phase.
    jobs = {dict(labels)["phase"]: value for (name, labels), value in after.items()
            if name == "nodus_gitops_resources" and dict(labels)["kind"] == "Job"}
    assert sum(jobs.values()) == 1, jobs
    assert after[("nodus_gitops_cost_usd", (("binding", BINDING),))] == 0
