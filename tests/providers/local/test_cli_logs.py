"""`nodus-gitops logs` and `cp` read a local Job through its backend's capabilities
(`HasLogs`, `HasOutputs`), with the backend built from the config's settings."""

from __future__ import annotations

from pathlib import Path

from nodus_gitops.cli import main
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.providers.base import Workload

from tests.providers.local.conftest import manifest

CODE = """
import os
print("line one", flush=True)
print("index", os.environ["NODUS_INDEX"])
open(os.environ["NODUS_OUTPUTS_DIR"] + "/r.txt", "w").write("out")
"""


def test_logs_and_cp_of_a_local_job_through_the_cli(local, tmp_path, capsys) -> None:
    key = ResourceKey("Job", "default", "cli-logs")  # the CLI's project without inventory
    local.keys.append(key)
    local.provider.create(Workload(key, manifest("cli-logs", CODE, outputs=[
        {"name": "r", "path": "/nodus/outputs/r.txt"}]), "h"), "cli-logs-1")
    assert local.wait(key).phase == "Succeeded"
    config = tmp_path / "config.yaml"
    config.write_text(f"providers:\n  local:\n    type: local\n    root: {local.root}\n"
                      "    sandbox: none\n")
    args = ["--config", str(config), "--state-dir", str(tmp_path / "state")]
    assert main(["logs", "job/cli-logs", *args]) == 0
    assert capsys.readouterr().out == "line one\nindex 0\n"
    assert main(["logs", "job/cli-logs", "-f", *args]) == 0  # finished: ends at once
    assert capsys.readouterr().out == "line one\nindex 0\n"
    assert main(["cp", "job/cli-logs:outputs/r", str(tmp_path / "copy.txt"), *args]) == 0
    assert (tmp_path / "copy.txt").read_text() == "out"
    assert main(["logs", "job/never-ran", *args]) == 1
    assert "Job/never-ran has not run on this machine" in capsys.readouterr().err


def test_logs_of_a_job_that_never_ran_is_one_clear_message(tmp_path: Path, capsys) -> None:
    code = main(["logs", "job/nope", "--state-dir", str(tmp_path / "state")])
    err = capsys.readouterr().err
    assert code == 1 and "nope has not run on this machine" in err and "Traceback" not in err
