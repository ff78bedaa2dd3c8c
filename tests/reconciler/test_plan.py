"""The pure plan: table-driven cases over desired, recorded and live state."""

from __future__ import annotations

import ast
import copy
from pathlib import Path

import pytest
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.plan import ActionType, Desired, Live, PlanOptions, Recorded, plan

PROJECT = "team-a"


def job(name: str, **spec) -> dict:
    body = {"image": "python:3.12-slim", "command": ["python3", "-c", "pass"], **spec}
    return {"apiVersion": "nodus.dev/v1", "kind": "Job", "metadata": {"name": name},
            "spec": body}


def annotate(manifest: dict, **annotations) -> dict:
    m = copy.deepcopy(manifest)
    m["metadata"]["annotations"] = {f"nodus.dev/{k.replace('_', '-')}": v
                                    for k, v in annotations.items()}
    return m


def key(name: str) -> ResourceKey:
    return ResourceKey("Job", PROJECT, name)


def desired(manifest: dict, file: str = "jobs/x.yaml") -> Desired:
    return Desired.of(key(manifest["metadata"]["name"]), manifest, file)


def recorded(manifest: dict, phase: str = "Running", file: str = "jobs/x.yaml") -> Recorded:
    d = desired(manifest, file)
    return Recorded(d.key, manifest, d.spec_hash, file, phase)


def only(p, name: str = "a"):
    [action] = [a for a in p.actions if a.key.name == name]
    return action


def test_new_manifest_is_created() -> None:
    a = only(plan([desired(job("a"))], []))
    assert a.action == ActionType.CREATE and a.file == "jobs/x.yaml"


def test_unchanged_is_only_counted() -> None:
    m = job("a")
    p = plan([desired(m)], [recorded(m)])
    assert p.actions == () and p.unchanged == 1 and p.summary()["noop"] == 1
    assert not p.has_changes


@pytest.mark.parametrize("old, new, expected", [
    ({"maxCostUSD": "1.00"}, {"maxCostUSD": "2.00"}, ActionType.PATCH),
    ({"maxCostUSD": "1.00"}, {}, ActionType.PATCH),
    ({"timeout": "10m"}, {"timeout": "5m"}, ActionType.PATCH),
    ({"timeout": "10m"}, {}, ActionType.PATCH),
    ({}, {"state": "Suspended"}, ActionType.PATCH),
    ({"state": "Suspended"}, {"state": "Running"}, ActionType.PATCH),
    ({}, {"state": "Cancelled"}, ActionType.PATCH),
    ({}, {"ttlSecondsAfterFinished": 60}, ActionType.PATCH),
    ({"maxCostUSD": "1.00"}, {"maxCostUSD": "0.50"}, ActionType.BLOCKED),
    ({}, {"maxCostUSD": "0.50"}, ActionType.BLOCKED),
    ({}, {"image": "other"}, ActionType.BLOCKED),
    ({}, {"completions": 3}, ActionType.BLOCKED),
])
def test_patchable_and_immutable_fields(old: dict, new: dict, expected: ActionType) -> None:
    a = only(plan([desired(job("a", **new))], [recorded(job("a", **old))]))
    assert a.action == expected, a.reason


def test_lowered_cap_message() -> None:
    a = only(plan([desired(job("a", maxCostUSD="0.50"))], [recorded(job("a", maxCostUSD="1"))]))
    assert "the cap can only be raised" in a.reason


def test_reject_names_the_field_and_the_annotation() -> None:
    a = only(plan([desired(job("a", image="new"))], [recorded(job("a"))]))
    assert a.action == ActionType.BLOCKED
    assert "spec.image" in a.reason and "nodus.dev/on-change" in a.reason
    assert [c.path for c in a.changes] == ["spec.image"]


def test_replace_and_ignore_policies() -> None:
    new = annotate(job("a", image="new"), on_change="Replace")
    old = annotate(job("a"), on_change="Replace")
    a = only(plan([desired(new)], [recorded(old)]))
    assert a.action == ActionType.REPLACE and "outputs" in a.reason
    new = annotate(job("a", image="new"), on_change="Ignore")
    running = recorded(annotate(job("a"), on_change="Ignore"))
    a = only(plan([desired(new)], [running]))
    assert a.action == ActionType.NOOP and "ignored" in a.reason
    # Nothing applied: the inventory keeps what runs, so a later Replace still replaces.
    assert (a.manifest, a.spec_hash, a.record) == (running.manifest, running.spec_hash, False)
    moved = only(plan([Desired.of(running.key, new, "jobs/y.yaml")], [running]))
    assert moved.record and moved.spec_hash == running.spec_hash
    replace = annotate(job("a", image="new"), on_change="Replace")
    assert only(plan([desired(replace)], [running])).action == ActionType.REPLACE


def test_labels_and_annotations_patch_in_place() -> None:
    new = job("a")
    new["metadata"]["labels"] = {"team": "x"}
    assert only(plan([desired(new)], [recorded(job("a"))])).action == ActionType.PATCH


def test_finished_resource_is_never_recreated() -> None:
    m = job("a")
    gone = {key("a"): Live(exists=False)}
    p = plan([desired(m)], [recorded(m, phase="Succeeded")], gone)
    assert p.actions == () and p.unchanged == 1
    # Only a new spec, through its change policy, starts a new run.
    new = annotate(job("a", command=["python3", "v2.py"]), on_change="Replace")
    old = annotate(m, on_change="Replace")
    assert only(plan([desired(new)], [recorded(old, "Succeeded")], gone)).action == \
        ActionType.REPLACE


def test_removed_from_git_is_deleted() -> None:
    p = plan([desired(job("b"))], [recorded(job("a")), recorded(job("b"))])
    assert only(p, "a").action == ActionType.DELETE
    assert [a.action for a in p.actions][-1] == ActionType.DELETE  # deletes last


def test_prune_guards() -> None:
    # Empty desired set refused unless allowEmpty.
    p = plan([], [recorded(job("a"))])
    assert only(p).action == ActionType.BLOCKED and "allowEmpty" in only(p).reason
    p = plan([], [recorded(job("a"))], options=PlanOptions(allow_empty=True))
    assert only(p).action == ActionType.DELETE
    # Blast radius.
    stale = [recorded(job(f"s{i}")) for i in range(11)]
    p = plan([desired(job("keep"))], stale)
    assert all(a.action == ActionType.BLOCKED and "maxDeletions (10)" in a.reason
               for a in p.actions if a.key.name != "keep")
    assert only(p, "keep").action == ActionType.CREATE  # the rest of the plan still applies
    p = plan([desired(job("keep"))], stale, options=PlanOptions(max_deletions=11))
    assert len(p.by_type(ActionType.DELETE)) == 11
    # prune: disabled keeps it.
    kept = annotate(job("a"), prune="disabled")
    p = plan([desired(job("b"))], [recorded(kept)])
    assert only(p).action == ActionType.BLOCKED and "prune: disabled" in only(p).reason


def test_rename_is_a_noop_that_records_the_new_file() -> None:
    m = job("a")
    a = only(plan([desired(m, "jobs/new.yaml")], [recorded(m, file="jobs/old.yaml")]))
    assert a.action == ActionType.NOOP and a.record and a.file == "jobs/new.yaml"


def test_drift_and_self_heal() -> None:
    m = job("a")
    live = {key("a"): Live(exists=True, phase="Suspended")}
    a = only(plan([desired(m)], [recorded(m)], live))
    assert a.action == ActionType.NOOP and a.reason.startswith("drift")
    a = only(plan([desired(m)], [recorded(m)], live, PlanOptions(self_heal=True)))
    assert a.action == ActionType.PATCH and "self-heal" in a.reason
    cancelled = {key("a"): Live(exists=True, phase="Cancelled")}
    a = only(plan([desired(m)], [recorded(m)], cancelled, PlanOptions(self_heal=True)))
    assert a.action == ActionType.NOOP and "drift" in a.reason
    capped = {key("a"): Live(exists=True, phase="Suspended", reason="MaxCostReached")}
    assert plan([desired(m)], [recorded(m)], capped).actions == ()  # the cap is not drift
    missing = {key("a"): Live(exists=False)}
    assert only(plan([desired(m)], [recorded(m)], missing)).reason.startswith("drift")


def test_same_inputs_same_plan_byte_for_byte() -> None:
    d = [desired(job(f"j{i}", maxCostUSD=f"{i + 1}.00")) for i in range(20)]
    r = [recorded(job(f"j{i}")) for i in range(10, 30)]
    first = plan(d, r).to_json("abc")
    second = plan(list(reversed(d)), list(reversed(r))).to_json("abc")
    assert first == second


def test_plan_module_does_no_io() -> None:
    source = Path(__file__).parents[2] / "reconciler" / "plan.py"
    imported = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            imported |= {n.name.split(".")[0] for n in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
    forbidden = {"providers", "state", "httpx", "pygit2", "socket", "os", "time", "random",
                 "subprocess", "datetime", "sqlmodel"}
    assert not {m for m in imported if m.split(".")[0] in forbidden}, imported


def test_every_kind_of_plan_hashes_and_compares() -> None:
    """Plan values are frozen all the way down: a changed list or mapping field (which
    once crashed every sync with 'unhashable type') hashes like any other."""
    old = job("a", env={"A": "1"}, outputs=[{"name": "o", "path": "/nodus/outputs/o"}])
    new = job("a", command=["python3", "-c", "print(1)"], env={"A": "2", "B": "3"},
              outputs=[{"name": "o", "path": "/nodus/outputs/p"}], maxCostUSD="9.00")
    cases = [
        plan([desired(new)], []),  # create
        plan([desired(new)], [recorded(old)]),  # blocked: immutable fields
        plan([desired(annotate(new, on_change="Replace"))], [recorded(old)]),  # replace
        plan([desired(annotate(new, on_change="Ignore"))], [recorded(old)]),  # noop + record
        plan([desired(job("a", maxCostUSD="2.00"))],
             [recorded(job("a", maxCostUSD="1.00"))]),  # patch
        plan([desired(job("b"))], [recorded(old)], options=PlanOptions(allow_empty=True)),
        plan([], [recorded(old)]),  # prune refused: the binding would be empty
        plan([desired(job("a"))], [recorded(job("a"))], {key("a"): Live(False)}),  # missing
        plan([desired(job("a", maxCostUSD="2.00"))],
             [recorded(job("a", maxCostUSD="1.00"), phase="Succeeded")]),  # noop: finished
    ]
    kinds = {a.action for p in cases for a in p.actions}
    assert kinds == set(ActionType)
    for p in cases:
        assert hash(p) == hash(copy.deepcopy(p)) and p == copy.deepcopy(p)
        assert {p: 1}[p] == 1 and all({a: 1}[a] == 1 for a in p.actions)
    lists = [c for p in cases for a in p.actions for c in a.changes
             if isinstance(c.new, tuple) or isinstance(c.old, tuple)]
    assert lists, "the cases change list-valued fields"
    blocked = only(cases[1])
    # Frozen inside, plain JSON outside: what the check, the API and `plan -o json` show.
    assert {"path": "spec.command", "old": ["python3", "-c", "pass"],
            "new": ["python3", "-c", "print(1)"]} in blocked.as_dict()["changes"]


def test_the_empty_binding_guard_judges_the_whole_tree() -> None:
    """An incremental plan sees only the touched keys: deleting b while a stays is a plain
    deletion, not 'every resource of the binding'."""
    b = recorded(job("b"))
    part = plan([], [b], tree_size=1)
    assert [(x.action, x.key.name) for x in part.actions] == [(ActionType.DELETE, "b")]
    whole = plan([], [b], tree_size=0)
    assert only(whole, "b").action == ActionType.BLOCKED


def test_a_refused_create_is_planned_again_and_pruned_without_guards() -> None:
    m = job("a")
    refused = recorded(m, phase="CreateFailed")
    again = only(plan([desired(m)], [refused]))
    assert again.action == ActionType.CREATE and "refused" in again.reason
    gone = only(plan([], [recorded(annotate(m, prune="disabled"), phase="CreateFailed")],
                     options=PlanOptions(max_deletions=0)))
    assert gone.action == ActionType.DELETE  # nothing on the backend to keep or guard


def test_ignore_keeps_what_runs_but_in_place_fields_still_patch() -> None:
    """An ignored immutable change never swallows a later cancel, cap raise or label."""
    running = recorded(annotate(job("a", maxCostUSD="1.00"), on_change="Ignore"))
    wanted = annotate(job("a", image="new", state="Cancelled", maxCostUSD="5.00"),
                      on_change="Ignore")
    a = only(plan([desired(wanted)], [running]))
    assert a.action == ActionType.PATCH and "ignored" in a.reason
    assert {c.path for c in a.changes} == {"spec.state", "spec.maxCostUSD"}
    assert a.manifest["spec"]["state"] == "Cancelled"
    assert a.manifest["spec"]["image"] == "python:3.12-slim"  # what runs, not the ignored
    # Once patched, what is left is the ignored change alone: a noop.
    after = Recorded(running.key, a.manifest, a.spec_hash, running.file, "Cancelling")
    assert only(plan([desired(wanted)], [after])).action == ActionType.NOOP


def test_two_instances_never_share_an_idempotency_key() -> None:
    """An instance that lost its store, or another fed by the same repository, asks the
    backend for its own create: it never receives a run another instance made."""
    from nodus_gitops.apply import ApplyContext, idempotency_key

    ours = ApplyContext("b", PROJECT, "default", "https://h/r.git", "c1")
    theirs = ApplyContext("b", PROJECT, "other", "https://h/r.git", "c1")
    assert idempotency_key(ours, "create", key("a"), "h") != idempotency_key(
        theirs, "create", key("a"), "h")
