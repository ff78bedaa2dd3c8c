"""A manifest blob over the size limit is judged from its object header and never read:
a 100 MB `.yaml` in a commit gets its clear problem (file, size, limit) while the Git
source's memory stays far below the blob's size, whether the object is loose or packed."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path

import pygit2
import pytest
from nodus_gitops.desired import DesiredTree
from nodus_gitops.manifests import MAX_FILE_BYTES
from nodus_gitops.source import GitSource

from tests.fixtures_git import git

BIG = 100 * 1024 * 1024
JOB = (b"apiVersion: nodus.dev/v1\nkind: Job\nmetadata:\n  name: ok\nspec:\n"
       b"  image: python:3.12-slim\n  command: [python3, -c, pass]\n")
MB = 1024 * 1024


def _commit(repo: pygit2.Repository, files: dict[str, pygit2.Oid], parents: list) -> str:
    builder = repo.TreeBuilder()
    folder = repo.TreeBuilder()
    for name, oid in files.items():
        folder.insert(name, oid, pygit2.enums.FileMode.BLOB)
    builder.insert("manifests", folder.write(), pygit2.enums.FileMode.TREE)
    sig = pygit2.Signature("t", "t@e")
    return str(repo.create_commit("refs/heads/main", sig, sig, "c", builder.write(), parents))


@pytest.fixture(scope="module", params=["loose", "packed"])
def remote(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """A local bare repo: commit 1 has ok.yaml, commit 2 adds a 100 MB big.yaml."""
    root = tmp_path_factory.mktemp(f"big-{request.param}")
    repo = pygit2.init_repository(str(root / "remote.git"), bare=True)
    ok = repo.create_blob(JOB)
    first = _commit(repo, {"ok.yaml": ok}, [])
    big = repo.create_blob(b"a: " + b"x" * (BIG - 4) + b"\n")  # freed on return
    second = _commit(repo, {"ok.yaml": ok, "big.yaml": big}, [first])
    if request.param == "packed":
        git("repack", "-a", "-d", "-q", cwd=root / "remote.git")
        assert not list((root / "remote.git" / "objects").glob("??/*"))
    return root / "remote.git", first, second


def test_an_oversized_blob_gets_its_problem_unread(remote, tmp_path: Path) -> None:
    path, first, second = remote
    source = GitSource(str(path), "main", tmp_path / "mirrors")
    assert source.fetch() == second

    tracemalloc.start()
    try:
        whole = source.read_tree(second, "manifests")
        changed = source.changed_paths(first, second, "manifests")
        only = source.read_blobs(second, changed.added)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 5 * MB, f"{peak} bytes allocated: the blob was read"
    assert whole["manifests/ok.yaml"] == JOB
    assert changed.added == ("manifests/big.yaml",)

    expected = (f"file is {BIG} bytes; manifests are limited to {MAX_FILE_BYTES}")
    tree = DesiredTree.read(second, "team-a", whole)
    [problem] = tree.problems
    assert (problem.file, problem.line, problem.message) == ("manifests/big.yaml", 1, expected)
    assert {k.name for k in tree.index} == {"ok"}
    step = DesiredTree.read(first, "team-a", source.read_tree(first, "manifests"))
    step.advance(second, only, [])
    assert [(p.file, p.message) for p in step.problems] == [("manifests/big.yaml", expected)]


# The peak resident size of this process image: VmHWM, since ru_maxrss carries the peak
# of the forked test process over exec.
_CHILD = textwrap.dedent("""
    import json, re, sys
    from pathlib import Path
    from nodus_gitops.source import GitSource

    def peak_kib():
        return int(re.search(r"VmHWM:\\s+(\\d+) kB", Path("/proc/self/status").read_text())[1])

    remote, mirrors, first, second = sys.argv[1:]
    source = GitSource(remote, "main", Path(mirrors))
    before = peak_kib()
    sizes = {p: len(c) for p, c in source.read_tree(second, "manifests").items()}
    added = source.changed_paths(first, second, "manifests").added
    sizes.update({p: len(c) for p, c in source.read_blobs(second, added).items()})
    print(json.dumps({"grewKiB": peak_kib() - before, "sizes": sizes}))
""")


def test_the_blob_is_not_read_by_libgit2_either(remote, tmp_path: Path) -> None:
    """tracemalloc sees Python's allocations only; libgit2 inflating the blob shows in
    the peak resident size of a process that does nothing else."""
    path, first, second = remote
    mirrors = tmp_path / "mirrors"
    GitSource(str(path), "main", mirrors).fetch()
    done = subprocess.run([sys.executable, "-c", _CHILD, str(path), str(mirrors), first, second],
                          capture_output=True, text=True, check=False,
                          cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["grewKiB"] * 1024 < 20 * MB, report
    assert report["sizes"]["manifests/ok.yaml"] == len(JOB)
