"""What `plan` shows of a commit: its plan against the recorded state, its problems, and
what a backend with a server-side dry run (the Nodus API) says of each change.

One report, two places that make it: the `plan` command (from its own fetch and the
state it reads) and a `serve` asked for a plan (`POST /api/v1/repos/<id>/plan`, the
CLI's `plan --server`), which plans against its own state under its binding's lock.
Both print the same text and JSON, and exit by the same rule.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nodus_gitops.floor.problems import Problem
from nodus_gitops.floor.results import RUNS, ActionType

if TYPE_CHECKING:
    from nodus_gitops.apply import ApplyContext
    from nodus_gitops.desired import DesiredTree
    from nodus_gitops.plan import Plan
    from nodus_gitops.plan_text import Shown
    from nodus_gitops.providers.base import DryRuns, Provider

EXIT_OK, EXIT_PROBLEMS, EXIT_CHANGES = 0, 1, 2  # as `terraform plan -detailed-exitcode`


@dataclass
class PlanReport:
    """A commit's plan, with its problems and the dry run's answers per (kind, name)."""

    commit: str
    plan: Plan
    problems: list[Problem]
    dry_runs: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        """0 nothing would change, 2 changes pending, 1 problems or a blocked change."""
        if self.problems or self.plan.blocked:
            return EXIT_PROBLEMS
        return EXIT_CHANGES if self.plan.has_changes else EXIT_OK

    def as_json(self) -> dict[str, Any]:
        """`plan -o json`: every action (with its dry run's answer) and problem."""
        data = self.plan.to_dict(self.commit, [p.as_dict() for p in self.problems])
        for action in data["actions"]:
            found = self.dry_runs.get((action["kind"], action["name"]))
            if found:
                action["server"] = {k: v for k, v in found.items() if k != "problems"}
        return data

    def json_text(self) -> str:
        return json.dumps(self.as_json(), sort_keys=True, indent=2, ensure_ascii=False,
                          default=str)

    def text(self, shown: Shown | None = None) -> str:
        """The plan as people read it (plan_text; each change through `shown`), then
        each dry run's answer."""
        from nodus_gitops.plan_text import plan_text

        lines = [plan_text(self.commit, self.plan, self.problems, shown)]
        for (kind, name), found in sorted(self.dry_runs.items()):
            shown = {k: v for k, v in found.items() if v and k != "problems"}
            if shown:
                lines.append(f"  server dry run of {kind}/{name}: "
                             + ", ".join(f"{k} {v}" for k, v in shown.items()))
        return "\n".join(lines)


def plan_report(commit: str, tree: DesiredTree, the_plan: Plan, provider: Provider | None,
                ctx: ApplyContext) -> PlanReport:
    """The report of `the_plan` of `tree`; `provider`, where it has a server-side dry run
    and the tree has no problems, is asked about every created or patched resource and
    its refusals join the problems."""
    from nodus_gitops.providers.base import DryRuns

    problems = list(tree.problems)
    dry_runs = (_dry_runs(provider, the_plan, tree, ctx)
                if isinstance(provider, DryRuns) and not problems else {})
    problems += [p for result in dry_runs.values() for p in result["problems"]]
    return PlanReport(commit, the_plan, problems, dry_runs)


def _dry_runs(provider: DryRuns, the_plan: Plan, tree: DesiredTree,
              ctx: ApplyContext) -> dict[tuple[str, str], dict[str, Any]]:
    from nodus_gitops.apply import merge_patch, workload_for

    manifests = {(m.kind, m.name): m for m in tree.manifests}
    results = {}
    for action in the_plan.actions:
        if action.action not in RUNS or not action.manifest:
            continue
        workload = workload_for(action.manifest, action.key, action.spec_hash, action.file, ctx)
        changes = merge_patch(action.changes, action.manifest) if (
            action.action == ActionType.PATCH) else None
        result = provider.dry_run(workload, changes)
        m = manifests.get((action.key.kind, action.key.name))
        line_of = m.doc.line_of if m is not None else (lambda _path: 1)
        results[(action.key.kind, action.key.name)] = {
            "minMemory": result.min_memory, "estimateUSD": result.estimate,
            "message": result.message,
            "problems": result.problems(action.file, line_of, kind=action.key.kind,
                                        name=action.key.name)}
    return results
