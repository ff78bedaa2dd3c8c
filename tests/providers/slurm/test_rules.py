"""The slurm backend's pure rules, without a cluster: Slurm states to phases and
reasons, the submission (GRES, array, time limit, partition), the settings, and how
slurmrestd's answers become transient or permanent errors."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import httpx
import pytest
from nodus_gitops.floor.errors import ConfigError, PermanentError, TransientError
from nodus_gitops.floor.phases import Phase, Reason
from nodus_gitops.providers.local.spec import parse_job
from nodus_gitops.providers.slurm.client import SlurmClient
from nodus_gitops.providers.slurm.config import SlurmConfig
from nodus_gitops.providers.slurm.runs import expand
from nodus_gitops.providers.slurm.status import LOST, Run, decide
from nodus_gitops.providers.slurm.submit import Unplaceable, array_spec, gres, job_body, partition


def spec(**fields):
    return parse_job({"metadata": {"name": "j"}, "spec": {"command": ["true"], **fields}})


def step(s, runs, desired="Running", active=None, capped=False, cancelled=False):
    return decide(s, runs, desired=desired, now=1000.0, active_seconds=active, capped=capped,
                  cancel_requested=cancelled)


@pytest.mark.parametrize(("state", "phase"), [
    ("PENDING", Phase.QUEUED), ("CONFIGURING", Phase.PROVISIONING),
    ("RUNNING", Phase.RUNNING), ("COMPLETING", Phase.RUNNING),
])
def test_live_states_map_to_phases(state, phase):
    assert step(spec(), [Run(0, 0, 1, state)]).phase == phase


@pytest.mark.parametrize(("state", "exit_code", "phase", "reason"), [
    ("COMPLETED", 0, Phase.SUCCEEDED, None),
    ("TIMEOUT", 0, Phase.FAILED, Reason.DEADLINE_EXCEEDED),
    ("DEADLINE", 0, Phase.FAILED, Reason.DEADLINE_EXCEEDED),
    ("OUT_OF_MEMORY", 0, Phase.FAILED, Reason.OOM_KILLED),
    ("CANCELLED", 0, Phase.CANCELLED, None),
])
def test_finished_states_map_to_phases_and_reasons(state, exit_code, phase, reason):
    d = step(spec(backoffLimit=0), [Run(0, 0, 1, state, exit_code)])
    assert (d.phase, d.reason) == (phase, reason)


def test_failed_runs_are_resubmitted_until_backoff_limit():
    s = spec(completions=2, backoffLimit=1)
    first = [Run(0, 0, 1, "COMPLETED"), Run(1, 0, 2, "FAILED", 3 << 8)]
    d = step(s, first)
    assert d.phase == Phase.RUNNING and d.resubmit == [1] and d.completed == [0]
    d = step(s, first + [Run(1, 1, 3, "FAILED", 3 << 8)])
    assert d.phase == Phase.FAILED and d.reason == Reason.BACKOFF_LIMIT_EXCEEDED
    assert "2 runs failed" in d.message and "exited with code 3" in d.message


def test_a_failure_cancels_the_running_indexes_before_the_job_fails():
    d = step(spec(completions=2, backoffLimit=0),
             [Run(0, 0, 1, "FAILED", 1 << 8), Run(1, 0, 2, "RUNNING")])
    assert d.cancel and not d.terminal


@pytest.mark.parametrize(("state", "recovery", "phase", "reason"), [
    ("NODE_FAIL", {}, Phase.RECOVERING, None),
    ("PREEMPTED", {"continuity": "Restartable"}, Phase.RECOVERING, None),
    (LOST, {}, Phase.RECOVERING, None),
    ("NODE_FAIL", {"continuity": "Ephemeral"}, Phase.FAILED, Reason.RECOVERY_LIMIT_EXCEEDED),
    ("NODE_FAIL", {"onInterruption": "Fail"}, Phase.FAILED, Reason.RECOVERY_LIMIT_EXCEEDED),
    ("NODE_FAIL", {"maxAttempts": 0}, Phase.FAILED, Reason.RECOVERY_LIMIT_EXCEEDED),
])
def test_lost_capacity_follows_recovery(state, recovery, phase, reason):
    d = step(spec(recovery=recovery), [Run(0, 0, 1, state)])
    assert (d.phase, d.reason) == (phase, reason)
    if phase == Phase.RECOVERING:
        assert d.resubmit == [0] and d.recovered == [0] and d.failures == 0


def test_timeout_counts_active_time_and_cancels():
    d = step(spec(timeout="10s"), [Run(0, 0, 1, "RUNNING", start=980)], active=11.0)
    assert d.cancel
    d = step(spec(timeout="10s"), [Run(0, 0, 1, "CANCELLED", start=980)], active=11.0,
             cancelled=True)
    assert d.phase == Phase.FAILED and d.reason == Reason.DEADLINE_EXCEEDED


def test_suspend_holds_pending_and_suspends_running_then_resume_undoes_it():
    runs = [Run(0, 0, 11, "RUNNING", array_job_id=10),
            Run(1, 0, 10, "PENDING", array_job_id=10, pending_part=True)]
    d = step(spec(completions=2), runs, desired="Suspended")
    assert d.phase == Phase.SUSPENDING and d.suspend == ["10_0"] and d.hold == [10]
    held = [Run(0, 0, 11, "SUSPENDED", array_job_id=10),
            Run(1, 0, 10, "PENDING", reason="JobHeldUser", array_job_id=10, pending_part=True)]
    assert step(spec(completions=2), held, desired="Suspended").phase == Phase.SUSPENDED
    d = step(spec(completions=2), held)
    assert d.resume == ["10_0"] and d.release == [10]
    capped = step(spec(completions=2), runs, capped=True)
    assert capped.reason == Reason.MAX_COST_REACHED and capped.suspend == ["10_0"]


def test_cancel_requested():
    d = step(spec(), [Run(0, 0, 1, "RUNNING")], desired="Cancelled")
    assert d.phase == Phase.CANCELLING and d.cancel
    d = step(spec(), [Run(0, 0, 1, "CANCELLED")], desired="Cancelled", cancelled=True)
    assert d.phase == Phase.CANCELLED


def test_submission_mapping():
    assert gres(spec(resources={"gpu": "L4"})) == "gpu:L4:1"
    assert gres(spec(resources={"gpu": "H100:8"})) == "gpu:H100:8"
    assert gres(spec(resources={"gpu": {"minMemory": "24Gi"}})) == "gpu:1"
    assert array_spec([0, 1, 2, 3], 2) == "0-3%2" and array_spec([1, 3], 4) == "1,3"
    assert expand("0-3%2") == [0, 1, 2, 3] and expand("1,4-5") == [1, 4, 5]
    assert partition({"placement": {"regions": ["eu", "us"]}}, {"us": "a", "eu": "b"},
                     None) == "b,a"
    with pytest.raises(Unplaceable, match="'mars'"):
        partition({"placement": {"regions": ["mars"]}}, {"us": "a"}, None)
    s = spec(completions=4, parallelism=2, timeout="90s", resources={"cpu": "1500m",
             "memory": "1Gi"}, env={"A": "b"})
    body = job_body(s, {}, name="n", note="c", job_dir=Path("/r/j"), shim=Path("/r/shim"),
                    attempt=1, indexes=[0, 1, 2, 3], partitions={}, default_partition="p",
                    time_limit=s.timeout)
    assert body["array"] == "0-3%2" and body["time_limit"] == 2 and body["cpus_per_task"] == 2
    assert body["memory_per_node"] == 1024 and body["partition"] == "p"
    assert body["environment"]["A"] == "b" and body["environment"]["NODUS_ATTEMPT"] == "1"
    assert "/r/shim" in body["environment"]["PYTHONPATH"]


def test_settings_refuse_unknown_keys_and_versions():
    with pytest.raises(ConfigError, match="'tokn'"):
        SlurmConfig.from_settings("hpc", {"type": "slurm", "root": "/x", "tokn": "a"})
    with pytest.raises(ConfigError, match="apiVersion"):
        SlurmConfig.from_settings("hpc", {"type": "slurm", "root": "/x", "apiVersion": "v0.0.40"})
    with pytest.raises(ConfigError, match="root"):
        SlurmConfig.from_settings("hpc", {"type": "slurm"})
    cfg = SlurmConfig.from_settings("hpc", {"type": "slurm", "root": "/x", "user": "u",
                                "rates": {"gpuHour": {"L4": 2.0}}})
    assert cfg.rates.gpu_rate("L4") == 2.0 and cfg.job_user == "u"


def _jwt(exp: float) -> str:
    def enc(d):
        return base64.urlsafe_b64encode(json.dumps(d).encode()).decode().rstrip("=")
    return f"{enc({'alg': 'HS256'})}.{enc({'exp': int(exp), 'sun': 'u'})}.sig"


@pytest.fixture
def client(tmp_path):
    """A client over a handler function, its token (a valid-looking JWT by default) in a
    token file."""
    def make(handler, token: str | None = None) -> SlurmClient:
        path = tmp_path / f"token-{len(list(tmp_path.iterdir()))}"
        path.write_text(token or _jwt(time.time() + 3600))
        cfg = SlurmConfig.from_settings("hpc", {"type": "slurm", "root": "/x", "user": "u",
                                    "tokenEnv": "NODUS_RULES_UNSET", "tokenFile": str(path)})
        return SlurmClient(cfg, transport=httpx.MockTransport(handler))
    return make


def _answer(status: int, *errors: dict) -> httpx.Response:
    return httpx.Response(status, json={"errors": list(errors), "jobs": []})


def test_error_mapping(client):
    auth = client(lambda r: _answer(500, {"error_number": -1, "error": "Unspecified error"}))
    with pytest.raises(PermanentError, match="authentication failed.*scontrol token"):
        auth.jobs()
    down = client(lambda r: _answer(500, {"error_code": 1800, "error": "connect failure"}))
    with pytest.raises(TransientError, match="unreachable"):
        down.submit("#!/bin/bash", {})

    def refuse(request):
        raise httpx.ConnectError("refused", request=request)
    with pytest.raises(TransientError):
        client(refuse).ping()
    gone = client(lambda r: _answer(500, {"error_number": 2017, "error": "Invalid job id"}))
    assert gone.job(5) is None
    gone.cancel(5)  # already gone is success
    expired = client(lambda r: _answer(200), token=_jwt(time.time() - 10))
    with pytest.raises(PermanentError, match="expired"):
        expired.ping()
    seen = {}

    def ok(request):
        seen.update(request.headers)
        return httpx.Response(200, json={"errors": [], "job_id": 42})
    assert client(ok).submit("#!/bin/bash", {}) == 42
    assert seen["x-slurm-user-name"] == "u" and seen["x-slurm-user-token"].endswith(".sig")
