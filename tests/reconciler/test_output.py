"""`get` as the seeds print it: the columns per kind, and money down to its last digit."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.output import money, resources_table
from nodus_gitops.state.records import InventoryRecord


@pytest.mark.parametrize("value, shown", [
    ("0", "$0.00"),
    (None, "$0.00"),
    ("0.31", "$0.31"),
    ("1.5", "$1.50"),
    ("12.344", "$12.34"),
    ("0.01", "$0.01"),
    ("0.0031", "$0.0031"),  # below a cent: its value, not <$0.01
    ("0.00314159", "$0.0031"),  # two significant digits
    ("0.000047", "$0.000047"),
    ("0.003", "$0.003"),
    ("0.00999", "$0.01"),  # rounds up to a cent: shown as one
    ("0.0000000012", "$0.0000000012"),  # never in exponent form
    ("not money", "-"),
])
def test_money(value: str | None, shown: str) -> None:
    assert money(value) == shown


def record(kind: str, name: str, status: dict, cost: str = "0", spec: dict | None = None,
           phase: str = "Running") -> InventoryRecord:
    manifest = {"apiVersion": "nodus.dev/v1", "kind": kind, "metadata": {"name": name},
                "spec": spec or {}}
    return InventoryRecord(ResourceKey(kind, "p", name), "b", manifest, "h", phase=phase,
                           status=status, cost_usd=cost, source_file=f"{name}.yaml",
                           source_commit="a" * 40,
                           created_at=datetime.now(UTC) - timedelta(minutes=3))


def cells(table: str) -> list[list[str]]:
    return [line.split() for line in table.splitlines()]


# What the local backend writes in status for a running Job on one GPU, second attempt.
LOCAL_STATUS = {"attempts": 2, "gpus": [{"id": "sim-0", "index": 0, "type": "L4",
                                         "memory": 24 * 2**30, "simulated": True,
                                         "name": "L4"}],
                "succeeded": 0, "completedIndexes": ""}


def test_jobs_show_phase_gpu_attempt_cost_and_age() -> None:
    table = resources_table([record("Job", "hello", LOCAL_STATUS, "0.0031")])
    assert cells(table) == [["NAME", "PHASE", "GPU", "ATTEMPT", "COST", "AGE"],
                            ["hello", "Running", "L4", "2", "$0.0031", "3m"]]


def test_wide_adds_the_offering_its_rate_and_progress() -> None:
    status = {**LOCAL_STATUS, "offering": "local-l4", "rateUSDPerHour": "0.80"}
    table = resources_table([record("Job", "hello", status, "0.0031")], wide=True)
    header, row = cells(table)
    assert header == ["NAME", "PHASE", "GPU", "ATTEMPT", "COST", "AGE", "OFFERING", "RATE",
                      "PROGRESS", "REASON", "COMMIT", "FILE"]
    assert row == ["hello", "Running", "L4", "2", "$0.0031", "3m", "local-l4", "$0.80/h",
                   "0/1", "-", "a" * 12, "hello.yaml"]


@pytest.mark.parametrize("status, spec, gpu, attempt, progress", [
    ({}, {}, "-", "-", "0/1"),  # queued: nothing placed yet
    ({"gpus": [{"type": "H100"}] * 8, "attempts": 1}, {}, "H100:8", "1", "0/1"),
    ({"gpus": [{"type": "L4"}, {"type": "A10"}]}, {}, "L4,A10", "-", "0/1"),
    ({"gpu": "H100:8", "attempt": 3}, {}, "H100:8", "3", "0/1"),
    # An Indexed Job's `attempts` counts every run of every index: not one attempt.
    ({"attempts": 4, "succeeded": 3}, {"completions": 4}, "-", "-", "3/4"),
    ({"attempts": 5, "attempt": 2, "succeeded": 3}, {"completions": 4}, "-", "2", "3/4"),
    ({"progress": "40%"}, {}, "-", "-", "40%"),
])
def test_job_columns_from_status(status: dict, spec: dict, gpu: str, attempt: str,
                                 progress: str) -> None:
    header, row = cells(resources_table([record("Job", "j", status, spec=spec)], wide=True))
    shown = dict(zip(header, row, strict=True))
    assert (shown["GPU"], shown["ATTEMPT"], shown["PROGRESS"]) == (gpu, attempt, progress)
    assert (shown["OFFERING"], shown["RATE"]) == ("-", "-")


def test_offering_as_an_object_shows_its_name() -> None:
    status = {"offering": {"name": "aws-us-east-1-l4", "region": "us"}, "rateUSDPerHour": 0.8}
    header, row = cells(resources_table([record("Job", "j", status)], wide=True))
    shown = dict(zip(header, row, strict=True))
    assert (shown["OFFERING"], shown["RATE"]) == ("aws-us-east-1-l4", "$0.80/h")


def test_pipelines_and_sweeps_keep_the_seeds_columns() -> None:
    pipeline = record("Pipeline", "train-eval", {"stages": [
        {"name": "a", "phase": "Succeeded"}, {"name": "b", "phase": "Running"},
        {"name": "c", "phase": "Pending"}]}, "0.02")
    assert cells(resources_table([pipeline])) == [
        ["NAME", "PHASE", "STAGES", "COST", "AGE"], ["train-eval", "Running", "1/3", "$0.02",
                                                     "3m"]]
    sweep = record("Sweep", "batch-size", {"cells": [{"phase": "Succeeded"}] * 6,
                                           "best": {"byCost": 2}}, "0.31", phase="Succeeded")
    assert cells(resources_table([sweep])) == [
        ["NAME", "PHASE", "CELLS", "COST", "BEST-COST", "AGE"],
        ["batch-size", "Succeeded", "6/6", "$0.31", "2", "3m"]]


def test_a_mixed_listing_names_the_kind() -> None:
    table = resources_table([record("Job", "hello", LOCAL_STATUS, "0.0031"),
                             record("Sweep", "s", {}, "0.31")])
    assert cells(table)[0] == ["KIND", "NAME", "PHASE", "PROGRESS", "COST", "AGE"]
    assert cells(table)[1][:2] == ["Job", "hello"] and "$0.0031" in table
