"""`plan` prints what a commit changes as a reader reviews it: a short field as
`path: old -> new`, a script as a unified line diff; `-o json` keeps the raw changes."""

from __future__ import annotations

import json
from pathlib import Path

from nodus_gitops.config import Binding, Settings
from nodus_gitops.providers.base import FakeProvider
from nodus_gitops.state.store import Store
from nodus_gitops.wiring import build_service

from tests.fixtures_git import ManifestRepo
from tests.reconciler.test_cli import flag_binding_id, run_cli

SCRIPT_JOB = """apiVersion: nodus.dev/v1
kind: Job
metadata:
  name: train
spec:
  command:
    - bash
    - -c
    - |
{script}
  maxCostUSD: "{cap}"
"""
SCRIPT = ["set -e", "echo preparing", "python3 prepare.py", "python3 train.py --epochs 3",
          "echo done"]


def _job(lines: list[str], cap: str) -> str:
    return SCRIPT_JOB.format(script="\n".join("      " + line for line in lines), cap=cap)


def test_plan_shows_a_changed_script_as_a_line_diff_and_a_cap_as_old_to_new(
        manifest_repo: ManifestRepo, tmp_path: Path) -> None:
    state = tmp_path / "state"
    common = ["--repo", manifest_repo.push_url, "--branch", "main", "--project", "p",
              "--state-dir", str(state)]
    manifest_repo.write("train.yaml", _job(SCRIPT, "1.00"))
    manifest_repo.commit("train")
    manifest_repo.push()
    store = Store.open(None, state)
    binding = Binding(id=flag_binding_id(manifest_repo), url=manifest_repo.push_url, project="p")
    provider = FakeProvider()
    service = build_service(Settings(state_dir=state, bindings=(binding,)), store,
                            provider_factory=lambda _n: provider)
    assert service.reconcile(binding.id).result == "applied"
    service.close()
    store.close()

    changed = [*SCRIPT]
    changed[3] = "python3 train.py --epochs 10"
    manifest_repo.write("train.yaml", _job(changed, "2.50"))
    manifest_repo.commit("longer training, a higher cap")
    manifest_repo.push()

    done = run_cli("plan", *common)
    assert "Traceback" not in done.stderr, done.stderr
    out = done.stdout.splitlines()
    assert any(line.strip() == "spec.maxCostUSD: '1.00' -> '2.50'" for line in out), done.stdout
    # The script: its path, then the unified diff with the unchanged lines around it.
    at = next(i for i, line in enumerate(out) if line.strip() == "spec.command:")
    indent = out[at].index("spec") + 2
    assert [line[indent:] for line in out[at + 1:at + 8]] == [
        "@@ -4,5 +4,5 @@", "   set -e", "   echo preparing", "   python3 prepare.py",
        "-  python3 train.py --epochs 3", "+  python3 train.py --epochs 10", "   echo done"]
    assert '"python3 train.py' not in done.stdout  # no JSON strings

    # -o json: the changes as recorded, unchanged.
    data = json.loads(run_cli("plan", *common, "-o", "json").stdout)
    [action] = data["actions"]
    paths = {c["path"] for c in action["changes"]}
    assert "spec.maxCostUSD" in paths
