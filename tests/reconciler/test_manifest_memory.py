"""What a large parsed tree keeps: text repeated across manifests is one str object (the
values are unchanged), each file's dicts stay its own, and the records are slotted."""

from __future__ import annotations

import pickle

import nodus_gitops.manifests as manifests
from nodus_gitops.desired import DesiredTree
from nodus_gitops.manifests import load_documents

JOB = ("apiVersion: nodus.dev/v1\nkind: Job\nmetadata:\n  name: {n}\nspec:\n"
       "  image: python:3.12-slim\n  command: [python3, -c, 'print({n})']\n"
       "  resources:\n    memory: 512Mi\n")


def _strings(value: object) -> list[str]:
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


def test_repeated_text_is_one_object_and_each_file_keeps_its_own_values() -> None:
    a, b = (load_documents(f"{n}.yaml", JOB.format(n=n))[0].data for n in ("a", "b"))
    assert a == {"apiVersion": "nodus.dev/v1", "kind": "Job", "metadata": {"name": "a"},
                 "spec": {"image": "python:3.12-slim", "command": ["python3", "-c",
                                                                    "print(a)"],
                          "resources": {"memory": "512Mi"}}}
    assert a["spec"]["image"] is b["spec"]["image"]
    assert next(iter(a["spec"]["resources"])) is next(iter(b["spec"]["resources"]))
    assert a["metadata"] is not b["metadata"]  # dicts and lists are never shared
    a["spec"]["command"].append("x")
    assert b["spec"]["command"] == ["python3", "-c", "print(b)"]


def test_long_text_is_not_kept_and_the_table_stays_bounded(monkeypatch) -> None:
    long = "x" * manifests._MAX_SHARED_LEN
    a, b = (load_documents("f.yaml", f"k: {long}\n")[0].data for _ in range(2))
    assert a == b == {"k": long} and a["k"] is not b["k"]
    monkeypatch.setattr(manifests, "_MAX_SHARED", 10)
    for i in range(30):
        assert load_documents("f.yaml", f"v{i}: w{i}\n")[0].data == {f"v{i}": f"w{i}"}
        assert len(manifests._SHARED) <= 10 + 2  # one document's worth past the bound


def test_a_tree_of_many_files_shares_its_text_and_still_finds_duplicates() -> None:
    files = {f"{i}.yaml": JOB.format(n=f"job-{i % 50}").encode() for i in range(100)}
    tree = DesiredTree.read("c", "p", files)
    strings = [s for m in tree.manifests for s in _strings(m.body)]
    assert len({id(s) for s in strings}) == len(set(strings))  # one object per value
    assert tree.duplicated == 50 and len(tree.problems) == 50


def test_slotted_records_replace_and_pickle() -> None:
    (manifest,) = DesiredTree.read("c", "p", {"a.yaml": JOB.format(n="a").encode()}).manifests
    assert not hasattr(manifest, "__dict__") and not hasattr(manifest.doc, "__dict__")
    copy = pickle.loads(pickle.dumps(manifest))
    assert copy.body == manifest.body and copy.line == 1 and copy.doc.node is None
    assert manifest.without_nodes().body is manifest.body


def test_the_inventory_view_keeps_the_trees_manifests_not_a_second_copy(manifest_repo,
                                                                        tmp_path) -> None:
    """After a cold sync of more resources than the view re-reads one by one, the next
    poll reads the view whole: each resource recorded as the tree has it keeps the tree's
    manifest object; the changed one keeps what was recorded; the plan is the full one."""
    from tests.reconciler.test_reconcile import job
    from tests.reconciler.test_sync_truth import applied_first, assert_incremental_is_full, push

    rig = applied_first(manifest_repo, tmp_path, {f"j{i}.yaml": job(f"j{i}") for i in range(60)})
    push(manifest_repo, {"j7.yaml": job("j7", annotations="    team: x\n")})
    _, crash = rig.reconcile()
    assert crash is None and rig.last_sync().result == "applied"
    view, tree = rig.sync.inventory, rig.sync.tree
    assert view.recorded is not None and tree is not None and len(view.recorded) == 60
    shared = {k.name for k, r in view.recorded.items() if r.manifest is tree.index[k].manifest}
    assert shared == {f"j{i}" for i in range(60)} - {"j7"}
    assert view.recorded[next(k for k in view.recorded if k.name == "j7")].manifest == (
        tree.index[next(k for k in tree.index if k.name == "j7")].manifest)
    assert_incremental_is_full(rig)
