"""The SDK's pure parts, without a server: Views, the manifest built from a grid, the
in-place `spec.state` edit, and the client's settings from the environment."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from nodus_gitops import sdk as nodus
from nodus_gitops.sdk import manifest as mf
from nodus_gitops.sdk.views import View, snake

EXAMPLE = Path(__file__).parents[2] / "examples-repo" / "sweeps" / "batch-size.yaml"


def test_view_reads_snake_case_and_is_read_only() -> None:
    data = {"phase": "Succeeded", "costUSD": "0.31", "best": {"byCost": 2, "byThroughput": 5},
            "cells": [{"index": i, "wallSeconds": 1.5, "params": {"BATCH_SIZE": "8"}}
                      for i in range(6)]}
    v = View(data)
    assert (v.phase, v.cost_usd, v.best.by_cost, v.best.by_throughput) == (
        "Succeeded", "0.31", 2, 5)
    assert isinstance(v.cells, tuple) and v.cells[3].wall_seconds == 1.5
    assert v.cells[0].params["BATCH_SIZE"] == "8" == v.cells[0].params.BATCH_SIZE
    assert v["costUSD"] == v["cost_usd"] and "best" in v and len(v) == 4
    assert v.to_dict() == data and v == data and v.to_dict() is not data
    assert repr(v.best) == "View(by_cost=2, by_throughput=5)"
    assert "... (6 items)" in repr(v)
    with pytest.raises(AttributeError, match="read-only"):
        v.phase = "Failed"
    with pytest.raises(AttributeError, match="has no 'fase'"):
        _ = v.fase
    with pytest.raises(KeyError):
        _ = v["nope"]
    assert [snake(n) for n in ("costUSD", "unitsPerSecond", "HTTPCode", "nodus.dev/x")] == [
        "cost_usd", "units_per_second", "http_code", "nodus.dev/x"]


def test_grid_becomes_the_matrix() -> None:
    assert mf.matrix({"gpu": "H100:8", "region": ["us", "eu"], "BATCH_SIZE": [8, 16],
                      "AMP": True, "LR": 0.001}) == {
        "gpu": ["H100:8"], "regions": ["us", "eu"],
        "params": {"BATCH_SIZE": ["8", "16"], "AMP": ["true"], "LR": ["0.001"]}}
    assert mf.matrix({"regions": "eu", "gpu": [{"type": "L4", "count": 2}]}) == {
        "regions": ["eu"], "gpu": [{"type": "L4", "count": 2}]}
    with pytest.raises(nodus.errors.InvalidSweep, match="repeats the regions dimension"):
        mf.matrix({"region": ["us"], "regions": ["eu"]})
    assert [mf.usd(v) for v in (25, "0.75", 0.125, "$3")] == ["25.00", "0.75", "0.125", "3.00"]
    with pytest.raises(nodus.errors.InvalidSweep, match="not an amount"):
        mf.usd("lots")


def test_a_whole_job_manifest_is_unwrapped_and_other_kinds_refused() -> None:
    job = {"apiVersion": "nodus.dev/v1", "kind": "Job", "metadata": {"name": "x"},
           "spec": {"image": "i", "command": ["true"]}}
    assert mf.check_target(job) == {"image": "i", "command": ["true"]}
    with pytest.raises(nodus.errors.Unsupported):
        mf.check_target({"kind": "Pipeline", "spec": {}})
    with pytest.raises(nodus.errors.InvalidSweep, match="needs a target"):
        nodus.Sweep(grid={"gpu": ["L4"]})


def test_state_edit_keeps_a_hand_written_file() -> None:
    original = EXAMPLE.read_bytes()
    suspended = mf.set_state("s.yaml", original, "batch-size", "Suspended")
    assert suspended is not None
    lines = suspended.decode().splitlines()
    assert lines[:9] == original.decode().splitlines()[:9]  # comments and order kept
    assert lines[9] == "  state: Suspended"
    assert yaml.safe_load(suspended)["spec"]["state"] == "Suspended"
    resumed = mf.set_state("s.yaml", suspended, "batch-size", "Running")
    assert resumed.decode().splitlines()[9] == "  state: Running"
    assert mf.set_state("s.yaml", resumed, "batch-size", "Running") is None
    with pytest.raises(nodus.errors.NotFound):
        mf.set_state("s.yaml", original, "other", "Cancelled")

    # A flow-style spec cannot be edited in place: the document is written again.
    flow = b"kind: Job\nmetadata: {name: j}\n---\nkind: Sweep\nmetadata: {name: s}\nspec: {a: 1}\n"
    edited = mf.set_state("f.yaml", flow, "s", "Cancelled")
    docs = list(yaml.safe_load_all(edited))
    assert docs == [{"kind": "Job", "metadata": {"name": "j"}},
                    {"kind": "Sweep", "metadata": {"name": "s"},
                     "spec": {"a": 1, "state": "Cancelled"}}]


def test_client_settings_come_from_the_environment(tmp_path: Path) -> None:
    env = {"NODUS_SDK_REPO": "https://user:tok@git.example/acme/m.git",
           "NODUS_SDK_BRANCH": "sweeps", "NODUS_SDK_PATH": "./team/sweeps/",
           "NODUS_API_URL": "http://api.example:8080/", "NODUS_API_TOKEN": "t0ken",
           "NODUS_PROJECT": "research", "GIT_AUTHOR_NAME": "Ada",
           "GIT_AUTHOR_EMAIL": "ada@example.test", "NODUS_SDK_CACHE": str(tmp_path),
           "NODUS_SDK_NOT_FOUND_GRACE": "5"}
    c = nodus.Client(environ=env)
    assert (c.branch, c.path, c.api_url, c.project, c.cache_dir, c.not_found_grace) == (
        "sweeps", "team/sweeps", "http://api.example:8080", "research", tmp_path, 5.0)
    assert (c.author.name, c.author.email) == ("Ada", "ada@example.test")
    assert "tok" not in repr(c).replace("token=", "") and "t0ken" not in repr(c)
    assert nodus.Client(project="p", author="Bob <bob@x.test>", environ=env).author.name == "Bob"
    with pytest.raises(nodus.errors.ConfigError, match="NODUS_SDK_REPO"):
        nodus.Client(environ={}).repository()
    old = nodus.default_client()
    try:
        installed = nodus.configure(api_url="http://other:1", environ={})
        assert nodus.default_client() is installed and installed.api_url == "http://other:1"
    finally:
        nodus.configure(old)
