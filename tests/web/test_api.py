"""The JSON API, health, metrics, method rules, webhooks and auth, over real HTTP against
the real server and a seeded SQLite store."""

from __future__ import annotations

import re
import socket
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from nodus_gitops import metrics
from nodus_gitops.floor.errors import ConfigError
from nodus_gitops.output import resource_object
from nodus_gitops.state.store import Store
from nodus_gitops.web import server
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from tests.web.conftest import serve
from tests.web.seed import BAD_NAME, PROJECT, SHA1, SHA2, Seeded, seed

KEYS = {
    "kind", "name", "project", "phase", "reason", "message", "fix", "costUSD", "sourceCommit",
    "file", "specHash", "createdAt", "finishedAt", "status", "parent"}


def test_repos_say_where_each_binding_stands(client: httpx.Client) -> None:
    repos = {r["id"]: r for r in client.get("/api/v1/repos").json()}
    assert list(repos) == ["ml-team", "ops"]
    ml = repos["ml-team"]
    assert (ml["branch"], ml["path"], ml["project"]) == ("main", "jobs", PROJECT)
    assert (ml["lastSeenCommit"], ml["lastAppliedCommit"]) == (SHA2, SHA1)
    assert ml["lastSync"]["result"] == "invalid"
    assert ml["phases"] == {"Failed": 2, "Running": 2}
    assert ml["costUSD"] == "0.31"
    ops = repos["ops"]
    assert ops["url"] == "https://gitlab.com/acme/ops.git"  # the password never leaves
    assert ops["phases"] == {"Succeeded": 1, "Unknown": 1}
    assert "fetch failed" in ops["lastError"]


def test_resources_are_the_objects_get_prints(client: httpx.Client, seeded: Seeded) -> None:
    response = client.get("/api/v1/resources")
    expected = [resource_object(r) for r in seeded.store.list_inventory()]
    assert response.json() == expected
    assert set(expected[0]) == KEYS
    assert response.headers["X-Total-Count"] == "6"


@pytest.mark.parametrize(("query", "names"), [
    ("kind=Job", {"hello", BAD_NAME, "nightly", "waiting"}),
    ("repo=ops", {"nightly", "waiting"}),
    ("phase=Failed", {"batch-size", BAD_NAME}),
    ("phase=Unknown", {"waiting"}),
    ("phase=Running,Succeeded", {"hello", "train-eval", "nightly"}),
    ("kind=Job&repo=ml-team&phase=Running", {"hello"}),
    ("name=ell", {"hello"}),
    ("project=ops&kind=Sweep", set()),
])
def test_resource_filters(client: httpx.Client, query: str, names: set[str]) -> None:
    response = client.get(f"/api/v1/resources?{query}")
    assert {r["name"] for r in response.json()} == names
    assert response.headers["X-Total-Count"] == str(len(names))


def test_resource_paging_covers_everything_once(client: httpx.Client) -> None:
    seen, links = [], []
    for page in (1, 2, 3):
        response = client.get(f"/api/v1/resources?pageSize=2&page={page}")
        assert response.headers["X-Total-Count"] == "6"
        seen += [(r["kind"], r["project"], r["name"]) for r in response.json()]
        links.append(response.headers.get("Link", ""))
    assert len(seen) == len(set(seen)) == 6
    assert 'rel="next"' in links[0] and 'rel="prev"' not in links[0]
    assert "page=2" in links[0] and "pageSize=2" in links[0]
    assert 'rel="prev"' in links[2] and 'rel="next"' not in links[2]
    assert client.get("/api/v1/resources?pageSize=2&page=4").json() == []


def test_resource_sorting(client: httpx.Client) -> None:
    costs = [float(r["costUSD"]) for r in client.get("/api/v1/resources?sort=-cost").json()]
    assert costs == sorted(costs, reverse=True) and costs[0] == 1.5
    names = [r["name"] for r in client.get("/api/v1/resources?sort=name").json()]
    assert names == sorted(names)


@pytest.mark.parametrize("query", ["page=0", "pageSize=501", "sort=bogus", "page=x"])
def test_bad_resource_parameters_are_400(client: httpx.Client, query: str) -> None:
    response = client.get(f"/api/v1/resources?{query}")
    assert response.status_code == 400
    assert response.json()["error"]


def test_resource_detail_masks_secret_environment(client: httpx.Client) -> None:
    body = client.get(f"/api/v1/resources/Job/{PROJECT}/hello").json()
    env = body["manifest"]["spec"]["env"]
    assert env == {"API_KEY": "********", "LOG_LEVEL": "debug", "DB_PASSWORD": "********"}
    assert [e["reason"] for e in body["events"]] == ["Retried", "Created"]
    assert body["status"]["outputs"]["report"]["size"] == 214
    pipeline = client.get(f"/api/v1/resources/Pipeline/{PROJECT}/train-eval").json()
    assert pipeline["manifest"]["spec"]["stages"][1]["template"]["env"] == {
        "HF_TOKEN": "********"}
    assert client.get(f"/api/v1/resources/Job/{PROJECT}/nope").status_code == 404


def test_resource_with_hostile_name_is_addressable(client: httpx.Client) -> None:
    quoted = httpx.URL(f"/api/v1/resources/Job/{PROJECT}/").join(
        BAD_NAME.replace("/", "%2F")).raw_path.decode()
    body = client.get(quoted).json()
    assert body["name"] == BAD_NAME


def test_logs_tail_the_latest_attempt_of_an_index(client: httpx.Client) -> None:
    base = f"/api/v1/resources/Job/{PROJECT}/hello/logs"
    tail = client.get(f"{base}?index=0&tail=3").json()
    assert tail["lines"] == ["step 298", "step 299", "<script>alert(1)</script>"]
    assert (tail["attempt"], tail["attempts"], tail["indexes"]) == (2, [1, 2], 2)
    assert tail["truncated"] is True
    assert client.get(f"{base}?index=1").json()["lines"][0] == "index one"
    assert len(client.get(base).json()["lines"]) == 200
    assert client.get(f"{base}?tail=x").status_code == 400
    stage = client.get(f"/api/v1/resources/Pipeline/{PROJECT}/train-eval/logs"
                       "?job=train-eval-train").json()
    assert stage["lines"] == ["epoch 1 loss 0.7", "epoch 2 loss 0.5"]
    # Only the composite's own Jobs: no reading other runs through it.
    assert client.get(f"/api/v1/resources/Pipeline/{PROJECT}/train-eval/logs"
                      "?job=hello").status_code == 404
    # Known to the pipeline, but never run here.
    assert client.get(f"/api/v1/resources/Pipeline/{PROJECT}/train-eval/logs"
                      "?job=train-eval-eval").status_code == 404


def test_events_newest_first_and_by_resource(client: httpx.Client) -> None:
    events = client.get("/api/v1/events").json()
    assert [e["reason"] for e in events] == ["Failed", "Retried", "Created"]
    mine = client.get(f"/api/v1/events?kind=Job&project={PROJECT}&name=hello").json()
    assert {e["name"] for e in mine} == {"hello"} and len(mine) == 2
    assert client.get("/api/v1/events?kind=Job").status_code == 400
    assert len(client.get("/api/v1/events?limit=1").json()) == 1


def test_syncs_and_one_sync_with_plan_and_checks(client: httpx.Client) -> None:
    syncs = client.get("/api/v1/syncs").json()
    assert [(s["commit"], s["result"]) for s in syncs] == [(SHA2, "invalid"), (SHA1, "applied")]
    assert client.get("/api/v1/syncs?repo=ops").json() == []
    one = client.get(f"/api/v1/syncs/{syncs[1]['id']}").json()
    assert [a["action"] for a in one["plan"]["actions"]] == ["create", "patch"]
    assert [(c["context"], c["state"]) for c in one["checks"]] == [
        ("nodus-gitops/plan", "success")]
    assert client.get("/api/v1/syncs/999").status_code == 404


def test_openapi_describes_every_route(client: httpx.Client) -> None:
    spec = client.get("/api/v1/openapi.json").json()
    assert spec["openapi"] == "3.1.0"
    for p in ("/api/v1/repos", "/api/v1/syncs", "/api/v1/syncs/{id}", "/api/v1/resources",
              "/api/v1/resources/{kind}/{project}/{name}", "/api/v1/events",
              "/api/v1/resources/{kind}/{project}/{name}/logs", "/api/v1/repos/{id}/refresh"):
        assert p in spec["paths"]
    refs = re.findall(r'"\$ref": "#/components/(\w+)/(\w+)"', str(spec).replace("'", '"'))
    for section, name in refs:
        assert name in spec["components"][section]


def test_health_and_readiness(client: httpx.Client, seeded: Seeded) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    # ops was polled just now, ml-team too: ready.
    assert client.get("/readyz").status_code == 200
    old = datetime.now(UTC) - timedelta(minutes=5)
    with Store.open(state_dir=seeded.state_dir, clock=lambda: old) as past:
        past.record_poll("ops", None, None)
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["reasons"][0].startswith("ops: last polled 300s ago")


def test_readiness_fails_when_the_store_does_not_answer(
        client: httpx.Client, seeded: Seeded, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> None:
        raise OSError("database is gone")

    monkeypatch.setattr(seeded.store, "list_bindings", broken)
    response = client.get("/readyz")
    assert response.status_code == 503 and "database is gone" in response.json()["error"]


_SAMPLE = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_]\w*="(\\.|[^"\\])*",?)*\})? '
                     r'(-?[0-9.]+(e[+-]?[0-9]+)?|\+Inf|NaN)$')


def test_metrics_text_parses(client: httpx.Client) -> None:
    metrics.observe_sync("ml-team", "applied", 1.2)
    metrics.observe_fetch("ml-team", 0.03)
    metrics.count_provider("local", "create")
    metrics.count_provider("local", "get", error_kind="transient")
    response = client.get("/metrics")
    assert response.headers["Content-Type"] == CONTENT_TYPE_LATEST
    lines = [line for line in response.text.splitlines() if line and not line.startswith("#")]
    for line in lines:
        assert _SAMPLE.match(line), line
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(response.text)
               for s in family.samples}
    assert samples[("nodus_gitops_syncs_total",
                    (("binding", "ml-team"), ("result", "applied")))] >= 1
    assert ("nodus_gitops_sync_duration_seconds_bucket",
            (("binding", "ml-team"), ("le", "2.5"))) in samples
    assert ("nodus_gitops_git_fetch_duration_seconds_count", (("binding", "ml-team"),)) in samples
    assert samples[("nodus_gitops_provider_errors_total",
                    (("kind", "transient"), ("operation", "get"), ("provider", "local")))] >= 1
    assert samples[("nodus_gitops_resources", (("kind", "Sweep"), ("phase", "Failed")))] == 1
    assert samples[("nodus_gitops_cost_usd", (("binding", "ops"),))] == 1.5
    assert "nodus_gitops_cost_usd_total" not in response.text  # a gauge, not a counter
    assert "_created" not in response.text


def test_histogram_buckets_are_cumulative() -> None:
    registry = CollectorRegistry()
    own = metrics.Metrics(registry)
    for seconds in (0.02, 0.3, 7.0, 1000.0):
        own.sync_seconds.labels(binding="b").observe(seconds)

    def bucket(le: str) -> float | None:
        return registry.get_sample_value("nodus_gitops_sync_duration_seconds_bucket",
                                         {"binding": "b", "le": le})

    assert (bucket("0.05"), bucket("10.0"), bucket("+Inf")) == (1, 3, 4)
    assert registry.get_sample_value("nodus_gitops_sync_duration_seconds_count",
                                     {"binding": "b"}) == 4
    assert metrics.REGISTRY.get_sample_value("nodus_gitops_sync_duration_seconds_count",
                                             {"binding": "b"}) is None  # registries apart
    with pytest.raises(ValueError):
        own.syncs.labels(binding="b")  # a label missing


@pytest.mark.parametrize(("method", "path"), [
    ("POST", "/api/v1/resources"), ("PUT", "/"), ("DELETE", "/api/v1/repos"),
    ("PATCH", "/api/v1/resources/Job/ml/hello"), ("OPTIONS", "/resources"),
    ("DELETE", "/api/v1/repos/ml-team/refresh"), ("PUT", "/hooks/github"), ("FOO", "/"),
    ("POST", "/metrics"), ("POST", "/hooks/bitbucket"),
])
def test_everything_else_is_read_only(client: httpx.Client, method: str, path: str) -> None:
    response = client.request(method, path, content=b"{}")
    assert response.status_code == 405
    assert response.headers["Allow"] == "GET, HEAD"


def test_get_on_a_post_path_is_405(client: httpx.Client) -> None:
    response = client.get("/api/v1/repos/ml-team/refresh")
    assert response.status_code == 405 and response.headers["Allow"] == "POST"


def test_refresh_asks_the_service_for_a_sync(client: httpx.Client, seeded: Seeded,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []
    monkeypatch.setattr(seeded.service, "trigger",
                        lambda b: asked.append(b) or b in seeded.service.syncs)
    assert client.post("/api/v1/repos/ml-team/refresh").status_code == 202
    assert client.post("/api/v1/repos/nope/refresh").status_code == 404
    assert asked == ["ml-team", "nope"]


def test_hooks_go_to_the_hooks_module(client: httpx.Client,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from nodus_gitops.web import hooks

    calls = []

    def handle(service, host, headers, body, secrets):  # type: ignore[no-untyped-def]
        calls.append((host, headers.get("x-github-event"), body, secrets))
        return 202, {"status": "sync requested"}

    monkeypatch.setattr(hooks, "handle", handle)
    response = client.post("/hooks/github", content=b'{"ref": "refs/heads/main"}',
                           headers={"X-GitHub-Event": "push"})
    assert (response.status_code, response.json()) == (202, {"status": "sync requested"})
    assert calls == [("github", "push", b'{"ref": "refs/heads/main"}',
                      {"github": "hook-secret"})]


def _raw(base_url: str, request: bytes) -> bytes:
    url = httpx.URL(base_url)
    with socket.create_connection((url.host, url.port), timeout=5) as sock:
        sock.sendall(request)
        return sock.recv(4096)


def test_an_oversized_hook_is_refused_before_its_body_is_read(server_url: str) -> None:
    # The body is never sent: a server that tried to read it would time out instead.
    head = _raw(server_url, b"POST /hooks/github HTTP/1.1\r\nHost: x\r\n"
                          b"Content-Length: 2000000\r\nContent-Type: application/json\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413 ")
    missing = _raw(server_url, b"POST /hooks/gitlab HTTP/1.1\r\nHost: x\r\n\r\n")
    assert missing.startswith(b"HTTP/1.1 411 ")


def test_security_headers_and_head(client: httpx.Client) -> None:
    for path in ("/", "/api/v1/repos", "/resources"):
        response = client.get(path)
        assert response.headers["Content-Security-Policy"] == server.CSP
        assert response.headers["X-Content-Type-Options"] == "nosniff"
    head = client.head("/api/v1/repos")
    assert head.status_code == 200 and head.content == b""
    assert int(head.headers["Content-Length"]) > 0


def test_static_files(client: httpx.Client) -> None:
    js = client.get("/static/app.js")
    assert js.headers["Content-Type"].startswith("text/javascript") and "poll" in js.text
    assert client.get("/static/app.css").headers["Content-Type"].startswith("text/css")
    assert client.get("/static/../server.py").status_code == 404
    assert client.get("/static/nope.js").status_code == 404


@pytest.fixture
def guarded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("DASH_TOKEN", "t0ken")
    monkeypatch.setenv("DASH_PW", "pw")
    s = seed(tmp_path / "state", dashboard={
        "tokenEnv": "DASH_TOKEN", "basicAuth": {"user": "ann", "passwordEnv": "DASH_PW"}})
    url, stop = serve(s)
    with httpx.Client(base_url=url, timeout=10) as c:
        yield c
    stop()  # type: ignore[operator]
    s.store.close()


def test_auth_when_configured(guarded: httpx.Client) -> None:
    for path in ("/", "/api/v1/resources", "/metrics", "/static/app.js"):
        response = guarded.get(path)
        assert response.status_code == 401, path
        assert response.headers["WWW-Authenticate"].startswith("Basic")
    assert guarded.post("/api/v1/repos/ml-team/refresh").status_code == 401
    assert guarded.get("/healthz").status_code == 200
    assert guarded.get("/", headers={"Authorization": "Bearer t0ken"}).status_code == 200
    assert guarded.get("/", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert guarded.get("/", auth=("ann", "pw")).status_code == 200
    assert guarded.get("/", auth=("ann", "wrong")).status_code == 401
    assert guarded.get("/", auth=("anyone", "t0ken")).status_code == 200
    assert guarded.get("/", headers={"Authorization": "Basic !!"}).status_code == 401


def test_auth_with_an_unset_variable_refuses_to_start(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DASH_NOPE", raising=False)
    s = seed(tmp_path / "state", dashboard={"tokenEnv": "DASH_NOPE"})
    with pytest.raises(ConfigError, match="DASH_NOPE"):
        serve(s)
    s.store.close()
