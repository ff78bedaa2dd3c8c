"""`get`'s output conventions as kubectl users type them: `-o name`, `--no-headers` and
`--sort-by` (a column or a field of the JSON document), against a real state store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from nodus_gitops.cli import main
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.state.records import InventoryRecord
from nodus_gitops.state.store import Store

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """Three Jobs created a minute apart (cheap-old, dear-mid, mid-new) and a Pipeline."""
    state = tmp_path / "state"
    now = [T0]
    store = Store.open(None, state, clock=lambda: now[0])
    store.upsert_binding("b", "https://github.com/acme/ml.git", "main", "", "p")
    for minute, (name, phase, cost) in enumerate([("old", "Succeeded", "0.0031"),
                                                  ("mid", "Running", "10.00"),
                                                  ("new", "Failed", "0.31")]):
        now[0] = T0 + timedelta(minutes=minute)
        store.upsert_resource(InventoryRecord(
            ResourceKey("Job", "p", name), "b", {"kind": "Job", "spec": {}}, "h",
            phase=phase, cost_usd=cost, status={"phase": phase}, source_file=f"{name}.yaml"))
    store.upsert_resource(InventoryRecord(
        ResourceKey("Pipeline", "p", "te"), "b", {"kind": "Pipeline", "spec": {}}, "h",
        phase="Pending", source_file="te.yaml"))
    store.close()
    return state


def _get(capsys, state: Path, *args: str) -> tuple[int, list[str], str]:
    code = main(["get", *args, "--state-dir", str(state)])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


def test_output_name_prints_kind_slash_name_per_line(state: Path, capsys) -> None:
    code, lines, _ = _get(capsys, state, "-o", "name")
    assert code == 0
    assert lines == ["job/mid", "job/new", "job/old", "pipeline/te"]
    code, lines, _ = _get(capsys, state, "jobs", "-o", "name")
    assert lines == ["job/mid", "job/new", "job/old"]


def test_no_headers_leaves_out_the_title_row(state: Path, capsys) -> None:
    _, with_headers, _ = _get(capsys, state, "jobs")
    code, lines, _ = _get(capsys, state, "jobs", "--no-headers")
    assert code == 0 and with_headers[0].split()[:2] == ["NAME", "PHASE"]
    assert lines == with_headers[1:]
    _, wide, _ = _get(capsys, state, "jobs", "-o", "wide", "--no-headers")
    assert [line.split()[0] for line in wide] == ["mid", "new", "old"]


@pytest.mark.parametrize(("key", "order"), [
    ("cost", ["old", "new", "mid"]),          # by amount, not by the text "$10.00"
    ("COST", ["old", "new", "mid"]),
    (".costUSD", ["old", "new", "mid"]),
    ("age", ["new", "mid", "old"]),           # youngest first, as the AGE column reads
    (".createdAt", ["old", "mid", "new"]),    # the timestamp, oldest first
    (".status.phase", ["new", "mid", "old"]),
    ("{.status.phase}", ["new", "mid", "old"]),
    ("phase", ["new", "mid", "old"]),
    ("name", ["mid", "new", "old"]),
])
def test_sort_by_a_column_or_a_field(state: Path, capsys, key: str, order: list[str]) -> None:
    code, lines, err = _get(capsys, state, "jobs", "--sort-by", key, "--no-headers")
    assert code == 0, err
    assert [line.split()[0] for line in lines] == order


def test_sort_by_applies_to_every_output(state: Path, capsys) -> None:
    _, lines, _ = _get(capsys, state, "jobs", "--sort-by", "cost", "-o", "name")
    assert lines == ["job/old", "job/new", "job/mid"]


@pytest.mark.parametrize("key", ["bogus", ".nothing.here", ".", ""])
def test_a_bad_sort_key_is_one_line_naming_the_allowed_keys(state: Path, capsys,
                                                             key: str) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["get", "--sort-by", key, "--state-dir", str(state)])
    err = capsys.readouterr().err
    assert exited.value.code == 2
    message = err.strip().splitlines()[-1]
    assert "--sort-by" in message and "cost" in message and "age" in message, err
    assert ".status" in message and "Traceback" not in err
