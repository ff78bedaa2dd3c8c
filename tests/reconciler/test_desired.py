"""The desired tree kept per file: an update re-reads only changed files and keeps its
indexes (resources, problems, duplicates) equal to a fresh read."""

from __future__ import annotations

from nodus_gitops.desired import DesiredTree

JOB = "apiVersion: nodus.dev/v1\nkind: Job\nmetadata:\n  name: {n}\nspec:\n  command: [x]\n"


def read(files: dict[str, str]) -> DesiredTree:
    return DesiredTree.read("c", "p", {k: v.encode() for k, v in files.items()})


def test_updates_match_a_fresh_read() -> None:
    tree = read({"a.yaml": JOB.format(n="x"), "b.yaml": JOB.format(n="y")})
    steps = [({"b.yaml": JOB.format(n="x")}, []),            # a duplicate appears
             ({"c.yaml": "kind: [\n"}, []),                    # an invalid file
             ({"b.yaml": JOB.format(n="z")}, ["c.yaml"]),      # both go away
             ({"d.yaml": JOB.format(n="z")}, []),              # z copied to d.yaml...
             ({}, ["b.yaml"]),                                 # ...and moved: still there
             ({"e.yaml": JOB.format(n="z")}, []),              # copied again...
             ({"d.yaml": JOB.format(n="w")}, []),              # ...and the first renamed
             ({}, ["a.yaml"])]
    files = {"a.yaml": JOB.format(n="x"), "b.yaml": JOB.format(n="y")}
    for changed, deleted in steps:
        tree.advance("c", {k: v.encode() for k, v in changed.items()}, deleted)
        files = {**{k: v for k, v in files.items() if k not in deleted}, **changed}
        fresh = read(files)
        assert [str(p) for p in tree.problems] == [str(p) for p in fresh.problems]
        assert sorted(tree.index) == sorted(fresh.index)
        assert tree.duplicated == fresh.duplicated
        if not fresh.problems:  # one definition a key: the very same one
            assert {k: d.file for k, d in tree.index.items()} == {
                k: d.file for k, d in fresh.index.items()}
    assert sorted(d.key.name for d in tree.desired()) == ["w", "z"]
    assert tree.touched is not None and {k.name for k in tree.touched} == {"x"}
