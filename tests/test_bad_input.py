"""The bad-input corpus: every file gives one clear problem with file and line, in
bounded time and memory, never a crash; and a binding full of it never stops another."""

from __future__ import annotations

import json
import os
import time
import tracemalloc
from pathlib import Path

import pytest
from nodus_gitops.cli import main
from nodus_gitops.config import Binding, Settings
from nodus_gitops.providers.base import FakeProvider
from nodus_gitops.state.store import Store
from nodus_gitops.validation import validate_files
from nodus_gitops.wiring import build_service

from tests.fixtures_git import ManifestRepo, git

CORPUS = Path(__file__).parent / "testdata" / "bad"
EXPECTED = json.loads((CORPUS / "expected.json").read_text())
GOOD = "apiVersion: nodus.dev/v1\nkind: Job\nmetadata:\n  name: {n}\nspec:\n  command: [x]\n"


def test_the_corpus_is_large_and_fully_described() -> None:
    files = {p.name for p in CORPUS.iterdir()} - {"expected.json"}
    assert len(files) >= 100
    assert files == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_file_gives_its_problem(name: str) -> None:
    expected = EXPECTED[name]
    tracemalloc.start()
    start = time.perf_counter()
    result = validate_files([(name, (CORPUS / name).read_bytes())])
    elapsed = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert elapsed < 2, f"{name} took {elapsed:.2f}s"
    assert peak < 200 * 2**20, f"{name} peaked at {peak >> 20} MiB"
    messages = [str(p) for p in result.problems]
    if expected["contains"]:
        assert any(expected["contains"] in p.message for p in result.problems), messages
        assert all(p.file == name and p.line >= 1 for p in result.problems)
    if "line" in expected:
        assert any(p.line == expected["line"] for p in result.problems), messages


def test_a_50_mib_file_is_refused_without_parsing() -> None:
    content = b"a: " + b"x" * (50 * 2**20) + b"\n"
    start = time.perf_counter()
    [problem] = validate_files([("big.yaml", content)]).problems
    assert "limited to" in problem.message and time.perf_counter() - start < 1


def test_thousands_of_documents_in_one_file() -> None:
    text = "---\n".join(GOOD.format(n=f"j{i}") for i in range(3000))
    start = time.perf_counter()
    result = validate_files([("many.yaml", text.encode())])
    assert result.problems == [] and len(result.manifests) == 3000
    assert time.perf_counter() - start < 20
    dup = validate_files([("dup.yaml", (text + "---\n" + GOOD.format(n="j7")).encode())])
    [problem] = dup.problems
    assert "defined twice" in problem.message and "dup.yaml:" in problem.message


def test_validate_does_not_follow_links_out_of_the_tree(tmp_path: Path, capsys) -> None:
    secret = tmp_path / "secret.yaml"
    secret.write_text("password: hunter2\n")
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "ok.yaml").write_text(GOOD.format(n="ok"))
    os.symlink(secret, tree / "leak.yaml")
    assert main(["validate", str(tree)]) == 1
    out = capsys.readouterr().out
    assert "leak.yaml:1: a symbolic link to a file outside the tree: not read" in out
    assert "hunter2" not in out


def test_git_source_skips_symlinks(manifest_repo: ManifestRepo, tmp_path: Path) -> None:
    from nodus_gitops.source import GitSource

    manifest_repo.write("ok.yaml", GOOD.format(n="ok"))
    os.symlink("/etc/passwd", manifest_repo.work / "leak.yaml")
    manifest_repo.commit("link")
    manifest_repo.push()
    source = GitSource(manifest_repo.push_url, "main", tmp_path / "mirrors")
    assert set(source.read_tree(source.fetch())) == {"ok.yaml"}


def test_a_binding_full_of_bad_input_never_stops_another(
        manifest_repo: ManifestRepo, git_http_server, tmp_path: Path) -> None:
    for path in CORPUS.iterdir():
        if path.name != "expected.json":
            target = manifest_repo.work / "bad" / path.name
            target.parent.mkdir(exist_ok=True)
            target.write_bytes(path.read_bytes())
    manifest_repo.write("good/job.yaml", GOOD.format(n="fine"))
    manifest_repo.commit("corpus")
    manifest_repo.push()
    bindings = (Binding(id="bad", url=manifest_repo.push_url, path="bad", project="b"),
                Binding(id="good", url=manifest_repo.push_url, path="good", project="g"))
    provider = FakeProvider()
    service = build_service(Settings(state_dir=tmp_path / "s", bindings=bindings),
                      Store.open(None, tmp_path / "s"), provider_factory=lambda _n: provider)
    reports = {r.binding: r for r in service.reconcile_all()}
    assert reports["bad"].result == "invalid" and len(reports["bad"].problems) >= 100
    assert reports["good"].result == "applied"
    assert {k.name for k in provider.resources} == {"fine"}
    assert git("--git-dir", manifest_repo.bare, "rev-parse", "HEAD")  # the remote is intact
