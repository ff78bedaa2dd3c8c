"""`nodus-gitops doctor` on the remote backends: the Nodus API (respx, answering in the
API's documented shapes: lists and `Status` objects) and slurmrestd (the real test
cluster of tests/providers/slurm/start.sh; a closed port needs no cluster). Reachable is
a pass; an unreachable backend or a refused key fails with the setting to change, and
the key itself never shows."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import httpx
import pytest
import respx
from nodus_gitops.cli import main

from tests.providers.slurm.conftest import slurm_cluster  # noqa: F401 (the fixture)
from tests.reconciler.test_doctor import _closed_port, lines_of, pushed

TESTDATA = Path(__file__).resolve().parents[1] / "testdata" / "nodus"
API = "https://nodus.test"
KEY = "nk_doctor_0123456789abcdef"
LISTS = {"jobs": "JobList", "pipelines": "PipelineList", "sweeps": "SweepList"}



def _config(path: Path, repo_url: str, provider: str, section: str) -> Path:
    path.write_text(f"stateDir: {path.parent / 'state'}\n"
                    f"providers:\n  {provider}:\n{section}"
                    f"repos:\n  - id: team-a\n    url: {repo_url}\n    project: team-a\n"
                    f"    provider: {provider}\n")
    return path


def _nodus_config(isolated: Path, repo_url: str) -> Path:
    return _config(isolated / "config.yaml", repo_url, "nodus",
                   f"    type: nodus\n    url: {API}\n    apiKeyEnv: DOCTOR_NODUS_KEY\n")


def _lists(router: respx.MockRouter, status: int = 200, body: dict | None = None) -> list:
    routes = []
    for plural, kind in LISTS.items():
        answer = body or {"apiVersion": "nodus.dev/v1", "kind": kind, "metadata": {},
                          "items": []}
        routes.append(router.get(f"{API}/apis/nodus.dev/v1/namespaces/team-a/{plural}")
                      .mock(return_value=httpx.Response(status, json=answer)))
    return routes


def test_a_reachable_nodus_api_passes_and_no_local_check_runs(
        manifest_repo, isolated, capsys, monkeypatch) -> None:
    monkeypatch.setenv("DOCTOR_NODUS_KEY", KEY)
    config = _nodus_config(isolated, pushed(manifest_repo).push_url)
    with respx.mock(assert_all_mocked=True) as router:
        routes = _lists(router)
        assert main(["doctor", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    line, _ = lines_of(out)["Nodus API reachable"]
    assert line.startswith("ok   ") and API in line, out
    sent = routes[0].calls.last.request
    assert sent.headers["Authorization"] == f"Bearer {KEY}"
    assert "bubblewrap" not in lines_of(out), "no binding uses the local backend"
    assert KEY not in out


def test_a_refused_nodus_key_fails_naming_where_the_key_comes_from(
        manifest_repo, isolated, capsys, monkeypatch) -> None:
    monkeypatch.setenv("DOCTOR_NODUS_KEY", KEY)
    config = _nodus_config(isolated, pushed(manifest_repo).push_url)
    refused = json.loads((TESTDATA / "status-unauthorized.json").read_text())
    with respx.mock(assert_all_mocked=True, assert_all_called=False) as router:
        _lists(router, 401, refused)
        assert main(["doctor", "--config", str(config), "-o", "json"]) == 1
    out = capsys.readouterr().out
    report = json.loads(out)
    [check] = [c for c in report["checks"] if c["name"] == "Nodus API reachable"]
    assert check["ok"] is False and "rejected the API key" in check["problem"], check
    assert "DOCTOR_NODUS_KEY" in check["problem"] + check["fix"], check
    assert report["ok"] is False and KEY not in out


def test_an_unset_nodus_key_fails_naming_the_variable(manifest_repo, isolated, capsys,
                                                      monkeypatch) -> None:
    monkeypatch.delenv("DOCTOR_NODUS_KEY", raising=False)
    config = _nodus_config(isolated, pushed(manifest_repo).push_url)
    with respx.mock(assert_all_mocked=True, assert_all_called=False):
        assert main(["doctor", "--config", str(config)]) == 1
    line, fix = lines_of(capsys.readouterr().out)["Nodus API reachable"]
    assert line.startswith("FAIL ") and "DOCTOR_NODUS_KEY is not set" in line, line
    assert fix is not None


def _fake_jwt() -> str:
    part = base64.urlsafe_b64encode(json.dumps({"sun": "root"}).encode()).decode().rstrip("=")
    return f"{part}.{part}.doctor-signature-not-shown"


def test_slurmrestd_at_a_closed_port_fails_with_the_url_setting(manifest_repo, isolated,
                                                                capsys, monkeypatch) -> None:
    token = _fake_jwt()
    monkeypatch.setenv("DOCTOR_SLURM_JWT", token)
    url = f"http://127.0.0.1:{_closed_port()}"
    config = _config(isolated / "config.yaml", pushed(manifest_repo).push_url, "slurm",
                     f"    type: slurm\n    url: {url}\n    tokenEnv: DOCTOR_SLURM_JWT\n"
                     f"    user: root\n    root: {isolated / 'shared'}\n")
    assert main(["doctor", "--config", str(config)]) == 1
    out = capsys.readouterr().out
    line, fix = lines_of(out)["slurmrestd reachable"]
    assert line.startswith("FAIL ") and "unreachable" in line and url in line, line
    assert fix and "providers.slurm.url" in fix, fix
    assert token not in out and not (isolated / "shared").exists()


@pytest.mark.slurm
def test_the_test_clusters_slurmrestd_is_reachable(slurm_cluster, manifest_repo,  # noqa: F811
                                                   isolated, capsys) -> None:
    env = slurm_cluster.env
    config = _config(isolated / "config.yaml", pushed(manifest_repo).push_url, "slurm",
                     f"    type: slurm\n    url: {env['SLURM_URL']}\n"
                     f"    tokenEnv: DOCTOR_UNSET_TOKEN\n"
                     f"    tokenFile: {env['NODUS_SLURM_TOKEN_FILE']}\n"
                     f"    user: {env['SLURM_USER']}\n    root: {slurm_cluster.session_root}\n")
    assert main(["doctor", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    line, _ = lines_of(out)["slurmrestd reachable"]
    assert line.startswith("ok   ") and f"{env['SLURM_URL']}/slurm/" in line, line
    assert Path(env["NODUS_SLURM_TOKEN_FILE"]).read_text().strip() not in out
