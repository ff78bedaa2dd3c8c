"""`logs` of an Indexed Job, as kubectl users meet several containers: with no `--index`
it shows index 0 and says so on stderr (and how to pick another); an index the Job does
not have is one line naming those it has, exit 1. A real local Job of three indexes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from nodus_gitops.cli import main
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.providers.base import Workload

from tests.providers.local.conftest import Local, local_config, manifest

PRINT_INDEX = "import os; print('index', os.environ['NODUS_INDEX'])"


@pytest.fixture
def local(tmp_path: Path) -> Iterator[Local]:
    made = Local(tmp_path / "root", local_config())
    yield made
    made.cleanup()


def _ran(local: Local, tmp_path: Path, name: str, **spec) -> list[str]:
    """A finished local Job `name`; the CLI arguments that reach its backend."""
    key = ResourceKey("Job", "default", name)  # the CLI's project without inventory
    local.keys.append(key)
    local.provider.create(Workload(key, manifest(name, PRINT_INDEX, **spec), "h"), f"{name}-1")
    assert local.wait(key, timeout=60).phase == "Succeeded"
    config = tmp_path / "config.yaml"
    config.write_text(f"providers:\n  local:\n    type: local\n    root: {local.root}\n"
                      "    sandbox: none\n")
    return ["--config", str(config), "--state-dir", str(tmp_path / "state")]


def test_an_index_the_job_lacks_is_one_line_naming_those_it_has(local, tmp_path,
                                                               capsys) -> None:
    args = _ran(local, tmp_path, "three", completions=3, parallelism=3)
    for missing in ("9", "3", "-1"):
        assert main(["logs", "job/three", "--index", missing, *args]) == 1
        out, err = capsys.readouterr()
        assert out == ""
        [line] = err.splitlines()
        assert f"no index {missing}" in line and "0-2" in line and "--index" in line, line
    assert main(["logs", "job/three", "--index", "2", *args]) == 0
    out, err = capsys.readouterr()
    assert out == "index 2\n" and err == ""


def test_without_index_it_shows_index_0_and_says_how_to_pick_another(local, tmp_path,
                                                                     capsys) -> None:
    args = _ran(local, tmp_path, "three", completions=3, parallelism=3)
    assert main(["logs", "job/three", *args]) == 0
    out, err = capsys.readouterr()
    assert out == "index 0\n"  # stdout stays the log alone, for a pipe
    [note] = err.splitlines()
    assert "index 0" in note and "0-2" in note and "--index" in note, note


def test_a_job_of_one_index_needs_no_note(local, tmp_path, capsys) -> None:
    args = _ran(local, tmp_path, "one")
    assert main(["logs", "job/one", *args]) == 0
    assert capsys.readouterr() == ("index 0\n", "")
    assert main(["logs", "job/one", "--index", "1", *args]) == 1
    assert "no index 1" in capsys.readouterr().err
