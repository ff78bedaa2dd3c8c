"""What goes wrong between the reconciler and the cluster: a rejected token is a clear
permanent error, slurmrestd restarting during a create is transient and never gives a
second job, and a submission whose answer was lost is found again by name."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from nodus_gitops.floor.errors import PermanentError, TransientError
from nodus_gitops.floor.phases import Phase
from nodus_gitops.providers.base import Workload
from nodus_gitops.providers.slurm import SlurmConfig, SlurmProvider

from tests.providers.slurm.conftest import HERE, manifest

pytestmark = pytest.mark.slurm


def _slurm_jobs(cluster, doc: dict) -> list[str]:
    """The Slurm jobs of one Job record (its name, and its uid in the comment)."""
    out = cluster.run("squeue", "-h", "-t", "all", "--name", doc["name"], "-o", "%i|%k")
    return [line.split("|")[0] for line in out.splitlines() if f"uid={doc['uid']}" in line]


def _doc(slurm, name: str) -> dict:
    return json.loads((slurm.root / "team-a" / name / "job.json").read_text())


def test_a_wrong_token_is_an_authentication_error_that_says_how_to_fix_it(slurm, tmp_path):
    good = Path(slurm.config.token_file).read_text().strip()
    bad_file = tmp_path / "token"
    bad_file.write_text(good[:-4] + ("AAAA" if not good.endswith("AAAA") else "BBBB"))
    settings = slurm.cluster.settings(slurm.root, tokenFile=str(bad_file))
    provider = SlurmProvider(SlurmConfig.from_settings("slurm", settings))
    k = slurm.key("denied")
    started = time.monotonic()
    with pytest.raises(PermanentError) as err:
        provider.create(Workload(k, manifest("denied"), "h"), "denied-1")
    message = str(err.value)
    assert "authentication failed" in message and "scontrol token username=" in message
    assert good[:20] not in message  # the token never appears in a message
    assert time.monotonic() - started < 5
    assert _slurm_jobs(slurm.cluster, _doc(slurm, "denied")) == []
    bad_file.write_text("not-a-jwt")
    with pytest.raises(PermanentError, match="not a JWT"):
        provider.get(k)


def test_token_from_the_environment(slurm, monkeypatch):
    token = Path(slurm.config.token_file).read_text().strip()
    monkeypatch.setenv("NODUS_TEST_SLURM_TOKEN", token)
    settings = slurm.cluster.settings(slurm.root, tokenEnv="NODUS_TEST_SLURM_TOKEN")
    settings.pop("tokenFile")
    provider = SlurmProvider(SlurmConfig.from_settings("slurm", settings))
    assert provider.client.ping()["errors"] == []


def _restart_rest(cluster) -> None:
    subprocess.run([str(HERE / "start.sh")], capture_output=True, check=True, timeout=120)


def test_slurmrestd_restart_during_a_create_is_transient_and_makes_one_job(slurm):
    state = Path(slurm.cluster.env["NODUS_SLURM_ROOT"]).parent
    pid = int((state / "run" / "slurmrestd.pid").read_text())
    os.kill(pid, signal.SIGTERM)
    for _ in range(50):
        try:
            os.kill(pid, 0)
            time.sleep(0.1)
        except ProcessLookupError:
            break
    k = slurm.key("restarted")
    w = Workload(k, manifest("restarted", "import time; time.sleep(1)"), "h")
    with pytest.raises(TransientError):
        slurm.provider.create(w, "restarted-1")
    restarter = threading.Thread(target=_restart_rest, args=(slurm.cluster,))
    restarter.start()
    errors, observed = 0, None
    deadline = time.monotonic() + 60
    while observed is None and time.monotonic() < deadline:
        try:
            observed = slurm.provider.create(w, "restarted-1")
        except TransientError:
            errors += 1
            time.sleep(0.2)
    restarter.join()
    assert observed is not None and errors >= 1
    assert slurm.wait(k).phase == Phase.SUCCEEDED
    assert len(_slurm_jobs(slurm.cluster, _doc(slurm, "restarted"))) == 1


def test_a_submission_whose_answer_was_lost_is_found_by_name(slurm):
    k = slurm.create("lost-answer", "import time; time.sleep(1)")
    path = slurm.root / "team-a" / "lost-answer" / "job.json"
    doc = json.loads(path.read_text())
    sub = doc["submissions"].pop()
    doc["intent"] = {"attempt": sub["attempt"], "indexes": sub["indexes"], "tried": True}
    path.write_text(json.dumps(doc))  # as if the reconciler died before recording the id
    o = slurm.provider.create(Workload(k, doc["manifest"], "h"), "lost-answer-1")
    assert o.provider_id == f"slurm:{sub['jobId']}"
    assert slurm.wait(k).phase == Phase.SUCCEEDED
    assert _slurm_jobs(slurm.cluster, doc) == [str(sub["jobId"])]
