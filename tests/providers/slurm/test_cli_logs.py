"""`nodus-gitops logs` and `cp` of a Job that ran on the Slurm cluster: the CLI builds the
slurm backend from the config and reads the Job's log (what the wrapper sent to
`logs/<index>-<attempt>.log`) and its stored output from the shared directory."""

from __future__ import annotations

import json

import pytest
from nodus_gitops.cli import main
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.providers.base import Workload

from tests.providers.slurm.conftest import manifest

pytestmark = pytest.mark.slurm

CODE = """
import os
print("hello from slurm", os.environ["NODUS_INDEX"], flush=True)
open(os.environ["NODUS_OUTPUTS_DIR"] + "/r.txt", "w").write("out")
"""


def test_logs_and_cp_of_a_slurm_job_through_the_cli(slurm, tmp_path, capsys) -> None:
    key = ResourceKey("Job", "default", "cli-logs")  # the CLI's project without inventory
    slurm.keys.append(key)
    slurm.provider.create(Workload(key, manifest("cli-logs", CODE, outputs=[
        {"name": "r", "path": "/nodus/outputs/r.txt"}]), "h"), "cli-logs-1")
    assert slurm.wait(key, timeout=120).phase == "Succeeded"
    settings = slurm.cluster.settings(slurm.root)
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps({"providers": {"hpc": settings}}))  # JSON is YAML
    args = ["--config", str(config), "--state-dir", str(tmp_path / "state")]
    assert main(["logs", "job/cli-logs", *args]) == 0
    assert capsys.readouterr().out == "hello from slurm 0\n"
    assert main(["logs", "job/cli-logs", "--follow", *args]) == 0  # finished: ends
    assert capsys.readouterr().out == "hello from slurm 0\n"
    assert main(["cp", "job/cli-logs:outputs/r", str(tmp_path / "copy.txt"), *args]) == 0
    assert (tmp_path / "copy.txt").read_text() == "out"
    assert main(["logs", "job/never-ran", *args]) == 1
    assert "has not run on this slurm backend" in capsys.readouterr().err
