"""Colour on a terminal only: `get` and `describe` colour phases and `reconcile` and
`validate` their results when stdout is a TTY (a real pseudo-terminal), never into a pipe
or a file, never for JSON or YAML, and never when NO_COLOR is set (no-color.org)."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.state.records import InventoryRecord
from nodus_gitops.state.store import Store

ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
GREEN, RED = "\x1b[32m", "\x1b[31m"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM")}
    return {**env, "TERM": "xterm-256color", **extra}


def on_a_terminal(*args: str, env: dict[str, str]) -> tuple[int, str]:
    """The command with its stdout and stderr a pseudo-terminal, as a user runs it."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "nodus_gitops.cli", *args], stdout=follower,
                            stderr=follower, stdin=subprocess.DEVNULL, env=env)
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal closed: the command ended
            break
        if not chunk:
            break
        out += chunk
    os.close(leader)
    return proc.wait(timeout=60), out.decode().replace("\r\n", "\n")


def into_a_pipe(*args: str, env: dict[str, str]) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-m", "nodus_gitops.cli", *args], env=env,
                          capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout + done.stderr


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    state = tmp_path_factory.mktemp("colour") / "state"
    created = datetime(2026, 1, 1, tzinfo=UTC)  # an AGE in days: the same in both runs
    store = Store.open(None, state, clock=lambda: created)
    store.upsert_binding("b", "https://github.com/acme/ml.git", "main", "", "p")
    for name, phase in (("good", "Succeeded"), ("bad", "Failed")):
        store.upsert_resource(InventoryRecord(ResourceKey("Job", "p", name), "b",
                                              {"kind": "Job", "spec": {}}, "h", phase=phase))
    store.close()
    return state


def test_get_colours_phases_on_a_terminal_and_keeps_the_columns(state: Path) -> None:
    code, shown = on_a_terminal("get", "jobs", "--state-dir", str(state), env=_env())
    assert code == 0, shown
    assert f"{GREEN}Succeeded" in shown and f"{RED}Failed" in shown, repr(shown)
    code, piped = into_a_pipe("get", "jobs", "--state-dir", str(state), env=_env())
    assert code == 0 and not ESCAPE.search(piped)
    assert ESCAPE.sub("", shown) == piped  # the same table, aligned the same


@pytest.mark.parametrize("no_color", ["1", "yes"])
def test_no_color_turns_it_off(state: Path, no_color: str) -> None:
    code, shown = on_a_terminal("get", "jobs", "--state-dir", str(state),
                                env=_env(NO_COLOR=no_color))
    assert code == 0 and "Succeeded" in shown and not ESCAPE.search(shown), repr(shown)


def test_a_dumb_terminal_and_machine_output_get_no_colour(state: Path) -> None:
    code, shown = on_a_terminal("get", "jobs", "--state-dir", str(state),
                                env=_env(TERM="dumb"))
    assert code == 0 and not ESCAPE.search(shown), repr(shown)
    for output in ("json", "yaml", "name"):
        code, shown = on_a_terminal("get", "-o", output, "--state-dir", str(state), env=_env())
        assert code == 0 and not ESCAPE.search(shown), (output, repr(shown))


def test_describe_colours_the_phase(state: Path) -> None:
    code, shown = on_a_terminal("describe", "job/bad", "--state-dir", str(state), env=_env())
    assert code == 0 and f"Phase:       {RED}Failed" in shown, repr(shown)


def test_validate_colours_its_result(tmp_path: Path) -> None:
    (tmp_path / "ok.yaml").write_text("apiVersion: nodus.dev/v1\nkind: Job\nmetadata:\n"
                                      "  name: a\nspec:\n  command: [echo]\n")
    code, shown = on_a_terminal("validate", str(tmp_path), env=_env())
    assert code == 0 and f"{GREEN}valid" in shown, repr(shown)
    (tmp_path / "bad.yaml").write_text("kind: Job\n")
    code, shown = on_a_terminal("validate", str(tmp_path), env=_env())
    assert code == 1 and RED in shown, repr(shown)
    code, piped = into_a_pipe("validate", str(tmp_path), env=_env())
    assert code == 1 and not ESCAPE.search(piped)
