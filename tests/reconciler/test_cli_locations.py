"""Where the command line looks, as kubectl finds its kubeconfig: the config file from
--config, else NODUS_GITOPS_CONFIG, else ~/.config/nodus-gitops/config.yaml; the state
from --state-dir, else NODUS_GITOPS_HOME, else the config's stateDir, else
./.nodus-gitops. A read with no state says each place it looked, in order, and how to
point it elsewhere; it makes nothing. Real processes with their own HOME and cwd."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.state.records import InventoryRecord
from nodus_gitops.state.store import Store


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("NODUS_GITOPS_") and k != "XDG_CONFIG_HOME"}
    return {**env, "HOME": str(home), **extra}


def cli(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nodus_gitops.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def _state_with(state: Path, name: str) -> Path:
    store = Store.open(None, state)
    store.upsert_binding("b", "https://github.com/acme/ml.git", "main", "", "p")
    store.upsert_resource(InventoryRecord(ResourceKey("Job", "p", name), "b",
                                          {"kind": "Job", "spec": {}}, "h", phase="Running"))
    store.close()
    return state


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "home").mkdir()
    (tmp_path / "work").mkdir()
    return tmp_path / "home"


def _names(done: subprocess.CompletedProcess) -> list[str]:
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_the_user_config_in_home_is_read_by_default(home: Path, tmp_path: Path) -> None:
    _state_with(tmp_path / "from-home", "home-job")
    user_config = home / ".config" / "nodus-gitops" / "config.yaml"
    user_config.parent.mkdir(parents=True)
    user_config.write_text(f"stateDir: {tmp_path / 'from-home'}\n")
    work = tmp_path / "work"
    assert _names(cli("get", "-o", "name", cwd=work, env=_env(home))) == ["job/home-job"]
    # XDG_CONFIG_HOME moves that folder, as every XDG program's
    xdg = tmp_path / "xdg" / "nodus-gitops"
    xdg.mkdir(parents=True)
    _state_with(tmp_path / "from-xdg", "xdg-job")
    (xdg / "config.yaml").write_text(f"stateDir: {tmp_path / 'from-xdg'}\n")
    done = cli("get", "-o", "name", cwd=work, env=_env(home, XDG_CONFIG_HOME=str(xdg.parent)))
    assert _names(done) == ["job/xdg-job"]


def test_flag_then_environment_then_default(home: Path, tmp_path: Path) -> None:
    for name in ("flag", "env", "home"):
        _state_with(tmp_path / name, f"{name}-job")
        (tmp_path / f"{name}.yaml").write_text(f"stateDir: {tmp_path / name}\n")
    user_config = home / ".config" / "nodus-gitops" / "config.yaml"
    user_config.parent.mkdir(parents=True)
    user_config.write_text(f"stateDir: {tmp_path / 'home'}\n")
    work = tmp_path / "work"
    env = _env(home, NODUS_GITOPS_CONFIG=str(tmp_path / "env.yaml"))
    assert _names(cli("get", "-o", "name", cwd=work, env=env)) == ["job/env-job"]
    done = cli("get", "-o", "name", "--config", str(tmp_path / "flag.yaml"), cwd=work, env=env)
    assert _names(done) == ["job/flag-job"]
    # the state directory's own flag and variable come before any config's stateDir
    done = cli("get", "-o", "name", cwd=work, env={**env, "NODUS_GITOPS_HOME": str(
        tmp_path / "home")})
    assert _names(done) == ["job/home-job"]
    done = cli("get", "-o", "name", "--state-dir", str(tmp_path / "flag"), cwd=work,
               env={**env, "NODUS_GITOPS_HOME": str(tmp_path / "home")})
    assert _names(done) == ["job/flag-job"]
    # ./.nodus-gitops when nothing names another
    _state_with(work / ".nodus-gitops", "here-job")
    assert _names(cli("get", "-o", "name", cwd=work, env=_env(home / "none"))) == ["job/here-job"]


def test_a_config_named_by_the_environment_must_exist(home: Path, tmp_path: Path) -> None:
    done = cli("get", cwd=tmp_path / "work",
               env=_env(home, NODUS_GITOPS_CONFIG=str(tmp_path / "missing.yaml")))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "NODUS_GITOPS_CONFIG" in done.stderr and "missing.yaml" in done.stderr


@pytest.mark.parametrize("command", [["get"], ["describe", "job/x"], ["get", "jobs"]])
def test_no_state_says_each_place_looked_in_order(home: Path, tmp_path: Path,
                                                  command: list[str]) -> None:
    work = tmp_path / "work"
    done = cli(*command, cwd=work, env=_env(home))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    err = done.stderr
    looked = _numbered(err)
    assert [line.split()[1] for line in looked] == [
        "--state-dir:", "NODUS_GITOPS_HOME:", "stateDir", "./.nodus-gitops:"], err
    assert str(home / ".config" / "nodus-gitops" / "config.yaml") in err  # the config looked for
    assert f"no state database at {work / '.nodus-gitops' / 'state.db'}" in err
    assert "--state URL" in err and "reconcile" in err  # how to point elsewhere, or make it
    assert list(tmp_path.joinpath("work").iterdir()) == [] and list(home.iterdir()) == []


def test_the_place_that_named_a_missing_state_is_the_last_one_listed(home: Path,
                                                                     tmp_path: Path) -> None:
    work = tmp_path / "work"
    done = cli("get", cwd=work, env=_env(home, NODUS_GITOPS_HOME=str(tmp_path / "nowhere")))
    assert done.returncode == 1
    looked = _numbered(done.stderr)
    assert looked[0] == "1. --state-dir: not given", done.stderr
    assert looked[1:] == [f"2. NODUS_GITOPS_HOME={tmp_path / 'nowhere'}: no state.db there"]
    assert not (tmp_path / "nowhere").exists()
    config = tmp_path / "c.yaml"
    config.write_text(f"stateDir: {tmp_path / 'there'}\n")
    done = cli("get", "--config", str(config), cwd=work, env=_env(home))
    assert done.returncode == 1
    assert _numbered(done.stderr)[2] == (f"3. stateDir {tmp_path / 'there'} in {config} "
                                         "(--config): no state.db there"), done.stderr
    assert not (tmp_path / "there").exists()


def _numbered(err: str) -> list[str]:
    return [line.strip() for line in err.splitlines() if line.strip()[:2] in ("1.", "2.", "3.",
                                                                              "4.")]


def test_the_default_state_dir_and_file_are_the_ones_the_settings_and_store_use() -> None:
    from nodus_gitops import config, locations
    from nodus_gitops.state import engine

    assert locations.DEFAULT_STATE_DIR == config.DEFAULT_STATE_DIR
    assert locations.STATE_FILE == engine.STATE_FILE
