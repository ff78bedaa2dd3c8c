"""`reconcile` says each resource's phase as it changes while it waits, with the time
since it began waiting and the resource's spend, one line per change."""

from __future__ import annotations

import re
from pathlib import Path

from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.progress import PhaseChanges, elapsed
from nodus_gitops.state.records import InventoryRecord

from tests.fixtures_git import ManifestRepo
from tests.reconciler.test_cli import run_cli

SLOW = ("apiVersion: nodus.dev/v1\nkind: Job\nmetadata:\n  name: slow\nspec:\n"
        "  command: [python3, -c, 'import time; time.sleep(2)']\n  maxCostUSD: \"0.25\"\n")


def _record(phase: str, cost: str = "0") -> InventoryRecord:
    return InventoryRecord(ResourceKey("Job", "p", "train"), "b", {}, "h",
                           phase=phase, cost_usd=cost)


def test_a_line_per_phase_change_and_none_while_it_stays() -> None:
    changes = PhaseChanges()
    assert changes.lines([_record("Pending")], 0.4) == ["    0s  Job/train  Pending  $0.00"]
    assert changes.lines([_record("Pending")], 3) == []
    assert changes.lines([_record("Running", "0.01")], 12.2) == [
        "   12s  Job/train  Pending -> Running  $0.01"]
    assert elapsed(185) == "3m05s" and elapsed(3725) == "1h02m"


def test_reconcile_says_the_phases_as_they_change_then_the_table(
        manifest_repo: ManifestRepo, tmp_path: Path) -> None:
    manifest_repo.write("slow.yaml", SLOW)
    manifest_repo.commit("slow")
    manifest_repo.push()
    done = run_cli("reconcile", "--repo", manifest_repo.push_url, "--branch", "main",
                   "--state-dir", str(tmp_path / "s"), "--timeout", "3m")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout.splitlines()
    assert any(re.fullmatch(r"\s+\+ create\s+Job/slow\s+\(slow\.yaml\).*", line)
               for line in out), done.stdout
    progress = [line for line in out if "Job/slow  " in line and "create" not in line]
    assert progress, done.stdout
    assert all(re.fullmatch(r"\s*\d+(s|m\d\ds)  Job/slow  (\S+ -> )?\S+  \$\d+\.\d+", line)
               for line in progress), progress
    assert progress[-1].split("  ")[-2].endswith("-> Succeeded"), progress
    # then the table, once everything finished
    assert out[-2].split()[:2] == ["NAME", "PHASE"] and out[-1].split()[:2] == [
        "slow", "Succeeded"], done.stdout
