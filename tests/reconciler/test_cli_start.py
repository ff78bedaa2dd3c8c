"""The CLI starts fast because each command loads only what it uses: `--help` nothing of
the commands, `validate` no database, Git or HTTP library, and `get` and `describe` of a
local SQLite state neither SQLAlchemy, SQLModel and Alembic (the standard library's
reader, state.quick_read) nor libgit2. bench/bench_cli.py has the times; this pins why."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.state import InventoryRecord, Store

HEAVY = ("sqlalchemy", "sqlmodel", "alembic", "pygit2", "httpx", "jsonschema", "yaml",
         "starlette", "uvicorn", "apscheduler")

# Runs the CLI in a fresh interpreter and writes, as its last line of stderr, which of
# HEAVY it loaded: whatever the command did, --help's SystemExit included.
_PROBE = f"""
import json, sys
from nodus_gitops.cli import main
try:
    code = main(sys.argv[1:])
finally:
    print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)), file=sys.stderr)
sys.exit(code)
"""


def loaded(*argv: str, cwd: Path) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    done = subprocess.run([sys.executable, "-c", _PROBE, *argv], cwd=cwd, text=True,
                          capture_output=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(cwd)})
    return done, json.loads(done.stderr.strip().splitlines()[-1])


@pytest.fixture
def state(tmp_path: Path) -> Path:
    folder = tmp_path / "state"
    with Store.open(None, folder) as store:
        store.upsert_binding("team", "https://git.example/team.git", "main", "", "default")
        key = ResourceKey("Job", "default", "hello")
        store.upsert_resource(InventoryRecord(
            key=key, binding_id="team", spec_hash="0" * 64, phase="Succeeded",
            manifest={"apiVersion": "nodus.dev/v1", "kind": "Job",
                      "metadata": {"name": "hello", "labels": {"team": "ml"}}}))
        store.add_event(key, "Normal", "Created", "created on local")
    return folder


def test_help_loads_none_of_them(tmp_path: Path) -> None:
    done, modules = loaded("--help", cwd=tmp_path)
    assert done.returncode == 0 and "usage: nodus-gitops" in done.stdout
    assert modules == []


def test_validate_of_one_file_loads_no_database_git_or_http(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(
        "apiVersion: nodus.dev/v1\nkind: Job\nmetadata: {name: hello}\n"
        "spec: {image: python:3.11, command: [python, -c, 'print(1)']}\n")
    done, modules = loaded("validate", "job.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert set(modules) <= {"yaml", "jsonschema"}


@pytest.mark.parametrize("argv", [["get"], ["get", "jobs", "-l", "team=ml", "-o", "wide"],
                                  ["get", "job/hello", "-o", "json"],
                                  ["describe", "job/hello"]])
def test_get_and_describe_of_a_local_state_load_none_of_them(
        state: Path, argv: list[str]) -> None:
    done, modules = loaded(*argv, "--state-dir", str(state), cwd=state.parent)
    assert done.returncode == 0, done.stderr
    assert "hello" in done.stdout
    assert modules == []


def test_an_older_schema_still_gets_the_stores_message(state: Path) -> None:
    from tests.state.support import execute

    execute(f"sqlite:///{state / 'state.db'}", "UPDATE alembic_version SET version_num = '0003'")
    done, _modules = loaded("get", "--state-dir", str(state), cwd=state.parent)
    assert done.returncode == 1
    assert "is 0003, not 0004" in done.stderr and "run `nodus-gitops reconcile`" in done.stderr
