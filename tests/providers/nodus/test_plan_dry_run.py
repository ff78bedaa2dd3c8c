"""`plan` on a binding that uses the Nodus API runs the server-side dry run for each
create and shows what the server defaulted (the GPU memory floor, the estimate) or
rejected (its causes, as problems on the manifest)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import respx
from nodus_gitops.cli import main

from tests.fixtures_git import ManifestRepo

TESTDATA = Path(__file__).resolve().parents[2] / "testdata" / "nodus"
JOB = """\
apiVersion: nodus.dev/v1
kind: Job
metadata:
  name: hello
  annotations:
    nodus.dev/model: meta-llama/Llama-3.1-8B
spec:
  command: [python, -c, "print('hello')"]
  timeout: 10m
"""


def config(tmp: Path, repo: ManifestRepo) -> Path:
    path = tmp / "config.yaml"
    path.write_text(json.dumps({
        "stateDir": str(tmp / "state"),
        "providers": {"cloud": {"type": "nodus", "url": "https://nodus.test",
                                "apiKeyEnv": "TEST_NODUS_KEY"}},
        "repos": [{"id": "team", "url": repo.push_url, "project": "team-a",
                   "provider": "cloud"}]}))
    return path


def test_plan_shows_the_server_defaults(manifest_repo: ManifestRepo, tmp_path: Path,
                                        monkeypatch, capsys) -> None:
    monkeypatch.setenv("TEST_NODUS_KEY", "nk_test")
    manifest_repo.write("job.yaml", JOB)
    manifest_repo.commit("hello")
    manifest_repo.push()
    defaulted = json.loads((TESTDATA / "job-dry-run.json").read_text())
    with respx.mock(assert_all_called=True) as api:
        route = api.post("https://nodus.test/apis/nodus.dev/v1/namespaces/team-a/jobs",
                         params={"dryRun": "All"}).mock(
            return_value=httpx.Response(201, json=defaulted))
        code = main(["plan", "--config", str(config(tmp_path, manifest_repo)), "-o", "json"])
    assert code == 2  # changes pending
    out = json.loads(capsys.readouterr().out)
    [action] = out["actions"]
    assert action["action"] == "create"
    assert action["server"]["minMemory"] == "24Gi" and action["server"]["estimateUSD"] == "0.18"
    assert route.calls[0].request.headers["Authorization"] == "Bearer nk_test"


def test_plan_shows_what_the_server_rejects(manifest_repo: ManifestRepo, tmp_path: Path,
                                            monkeypatch, capsys) -> None:
    monkeypatch.setenv("TEST_NODUS_KEY", "nk_test")
    manifest_repo.write("job.yaml", JOB)
    manifest_repo.commit("hello")
    manifest_repo.push()
    invalid = json.loads((TESTDATA / "status-invalid-job.json").read_text()
                         .replace("$PLURAL", "jobs").replace("$NAME", "hello"))
    with respx.mock() as api:
        api.post("https://nodus.test/apis/nodus.dev/v1/namespaces/team-a/jobs",
                 params={"dryRun": "All"}).mock(return_value=httpx.Response(422, json=invalid))
        code = main(["plan", "--config", str(config(tmp_path, manifest_repo))])
    assert code == 1
    out = capsys.readouterr().out
    cause = invalid["details"]["causes"][0]
    assert "job.yaml:" in out and cause["message"] in out
