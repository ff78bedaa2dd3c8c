"""source.git on the local backend: fetched over https inside the run's sandbox, at a
resolved commit, without .git, within the archive limits, and never from a path."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nodus_gitops.providers.local import runuser
from nodus_gitops.providers.local.source import (
    MAX_COMPRESSED,
    MAX_ENTRIES,
    SourceFetchError,
    check_ref,
    extract_limited,
    repo_url,
)
from nodus_gitops.validation import validate_files

from tests.providers.local.conftest import HAS_BWRAP

pytest_plugins = ["tests.providers.local.https_git"]
bwrap_only = pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap is not installed")

SHOW = """
import json, os
print(json.dumps({"cwd": os.getcwd(), "files": sorted(os.listdir(".")),
                  "owner": os.stat("train.py").st_uid, "me": os.getuid()}))
"""


@bwrap_only
def test_source_git_is_resolved_to_a_commit_and_checked_out(local_factory, https_git, tmp_path):
    commit = https_git.repo("train", {"train.py": "print('training')\n"}, tmp_path / "w")
    local = local_factory(**https_git.trusted())
    repo = https_git.url_for("train")
    k = local.create("from-git", command=[sys.executable, "-c", SHOW],
                     source={"git": {"repo": repo, "ref": "main"}})
    done = local.wait(k)
    assert done.phase == "Succeeded", (done, local.log(k))
    assert done.status["source"] == {"repo": repo, "ref": "main", "commit": commit}
    seen = json.loads(local.log(k))
    uid = runuser.resolve(None, None).uid  # nodus-run where it exists, else nobody
    assert seen == {"cwd": "/nodus/source", "files": ["train.py"], "owner": uid, "me": uid}
    assert uid != os.getuid()
    assert not (local.run(k).source / ".git").exists()
    events = [e["reason"] for e in local.run(k).read_events()]
    assert "SourceFetched" in events


@bwrap_only
def test_source_path_and_working_dir_place_the_checkout(local_factory, https_git, tmp_path):
    https_git.repo("code", {"a.txt": "a"}, tmp_path / "w")
    local = local_factory(**https_git.trusted())
    code = "import os; print(os.getcwd(), sorted(os.listdir('/src')))"
    k = local.create("placed", command=[sys.executable, "-c", code], workingDir="/workspace",
                     source={"git": {"repo": https_git.url_for("code"), "ref": "main",
                                     "path": "/src"}})
    assert local.wait(k).phase == "Succeeded", local.log(k)
    assert local.log(k) == "/workspace ['a.txt']"


@bwrap_only
def test_a_commit_that_is_no_branch_tip_is_found(local_factory, https_git, tmp_path):
    first = https_git.repo("hist", {"v.txt": "1"}, tmp_path / "w")
    (tmp_path / "w" / "v.txt").write_text("2")
    from tests.fixtures_git import git

    git("commit", "--quiet", "-am", "two", cwd=tmp_path / "w")
    git("push", "--quiet", str(https_git.root / "hist.git"), "HEAD:refs/heads/main",
        cwd=tmp_path / "w")
    local = local_factory(**https_git.trusted())
    k = local.create("old", command=[sys.executable, "-c", "print(open('v.txt').read())"],
                     source={"git": {"repo": https_git.url_for("hist"), "ref": first}})
    done = local.wait(k)
    assert done.phase == "Succeeded", local.log(k)
    assert done.status["source"]["commit"] == first and local.log(k) == "1"


@bwrap_only
def test_a_missing_repo_or_an_untrusted_server_fails_the_job(local_factory, https_git,
                                                             tmp_path):
    """A ref the repository lacks is named; a missing repository and a server whose
    certificate is not trusted say the one line of every failure of the network (no
    oracle of what answers there), and what git said is in the supervisor's log."""
    https_git.repo("real", {"a": "a"}, tmp_path / "w")
    trusting = local_factory(**https_git.trusted())
    missing = trusting.create("missing", command=["true"], source={
        "git": {"repo": https_git.url_for("nowhere"), "ref": "main"}})
    unknown_ref = trusting.create("no-ref", command=["true"], source={
        "git": {"repo": https_git.url_for("real"), "ref": "no-such-branch"}})
    # the server's certificate is its own: not trusted
    untrusting = local_factory(source_hosts=(https_git.host,))
    untrusted = untrusting.create("untrusted", command=["true"], source={
        "git": {"repo": https_git.url_for("real"), "ref": "main"}})
    for local, k, said, logged in (
            (trusting, missing, f"cannot fetch {https_git.url_for('nowhere')}: unreachable or "
             "refused", "not found"),
            (trusting, unknown_ref, "no-such-branch", None),
            (untrusting, untrusted, f"cannot fetch {https_git.url_for('real')}: unreachable or "
             "refused", "certificate")):
        failed = local.wait(k)
        assert (failed.phase, failed.reason) == ("Failed", "StorageUnavailable"), failed
        assert said in failed.message and failed.fix, failed.message
        if logged:
            assert failed.message == said
            log = (local.run(k).path / "supervisor.log").read_text(errors="replace")
            assert logged in log, log


@bwrap_only
def test_a_source_of_more_than_ten_thousand_entries_is_refused(local_factory, https_git,
                                                               tmp_path):
    files = {f"d{i // 1000}/f{i}": "" for i in range(MAX_ENTRIES + 1)}
    https_git.repo("many", files, tmp_path / "w")
    local = local_factory(**https_git.trusted())
    k = local.create("many", command=["true"],
                     source={"git": {"repo": https_git.url_for("many"), "ref": "main"}})
    failed = local.wait(k, timeout=120)
    assert (failed.phase, failed.reason) == ("Failed", "StorageUnavailable")
    assert f"more than {MAX_ENTRIES} entries" in failed.message
    assert not local.run(k).source.exists()


def _python_without_the_data_filter() -> str | None:
    """/usr/bin/python3 when it predates tarfile's data filter (3.11.4), else None."""
    python = "/usr/bin/python3"
    if not os.access(python, os.X_OK):
        return None
    done = subprocess.run([python, "-c", "import sys; print(sys.version_info >= (3, 11, 4))"],
                          capture_output=True, text=True)
    return python if done.stdout.strip() == "False" else None


@bwrap_only
def test_a_python_without_the_data_filter_never_unpacks_a_source(local_factory, https_git,
                                                                 tmp_path):
    old = _python_without_the_data_filter()
    if old is None:
        pytest.skip("no Python older than 3.11.4 on this machine")
    https_git.repo("plain", {"train.py": "print('training')\n"}, tmp_path / "w")
    local = local_factory(**https_git.trusted(python=old))
    k = local.create("old-python", command=["true"],
                     source={"git": {"repo": https_git.url_for("plain"), "ref": "main"}})
    done = local.wait(k)
    assert (done.phase, done.reason) == ("Failed", "StorageUnavailable"), done
    assert "Python 3.11.4 or later" in done.message, done.message
    assert not local.run(k).source.exists()


def _object(bare: Path, kind: str, data: bytes) -> str:
    """Write a Git object as given, without git's own checks (a hostile server's)."""
    return subprocess.run(["git", "-C", str(bare), "hash-object", "-t", kind, "--literally",
                           "-w", "--stdin"], input=data, capture_output=True,
                          check=True).stdout.decode().strip()


def _crafted_repo(bare: Path, escape_to: str) -> None:
    """A repository no honest Git host serves: trees with an entry named twice (a link
    and a directory), laid out as in CVE-2025-4517 so that its archive, unpacked with a
    vulnerable `data` filter, writes `escape/pwned` at `escape_to` (relative to the
    checkout) through links too long for the filter to follow."""
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)

    def tree(entries: list[tuple[str, str, str]]) -> str:
        return _object(bare, "tree", b"".join(f"{mode} {name}".encode() + b"\0" +
                                              bytes.fromhex(sha) for mode, name, sha in entries))

    def link(target: str) -> str:
        return _object(bare, "blob", target.encode())

    comp, steps = "d" * 240, "abcdefghijklmnop"
    via = tree([("120000", "l" * 254, link("/".join([".."] * len(steps))))])
    for step in reversed(steps[1:]):
        via = tree([("40000", step, via)])
    deep = tree([("100644", "keep", _object(bare, "blob", b""))])
    for i in reversed(range(len(steps) - 1)):
        deep = tree([("120000", steps[i + 1], link(comp)), ("40000", comp, deep)])
    target = "/".join(steps) + "/" + "l" * 254 + "/" + escape_to
    loot = tree([("100644", "pwned", _object(bare, "blob", b"written outside\n"))])
    root = tree([("40000", comp, deep), ("120000", "a", link(comp)), ("40000", "a", via),
                 ("120000", "escape", link(target)), ("40000", "escape", loot)])
    ident = {"GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b", "GIT_COMMITTER_NAME": "a",
             "GIT_COMMITTER_EMAIL": "a@b"}
    commit = subprocess.run(["git", "-C", str(bare), "commit-tree", root, "-m", "x"],
                            capture_output=True, check=True, text=True,
                            env={**os.environ, **ident}).stdout.strip()
    subprocess.run(["git", "-C", str(bare), "update-ref", "refs/heads/main", commit],
                   check=True)


@bwrap_only
def test_a_crafted_tree_never_writes_outside_the_checkout(local_factory, https_git):
    _crafted_repo(https_git.root / "crafted.git", "../..")  # the run directory
    local = local_factory(**https_git.trusted())
    k = local.create("crafted", command=["true"],
                     source={"git": {"repo": https_git.url_for("crafted"), "ref": "main"}})
    done = local.wait(k, timeout=120)
    # Unpacked in the fetch's sandbox, the write lands on its read-only root.
    assert (done.phase, done.reason) == ("Failed", "StorageUnavailable"), done
    assert "cannot be unpacked" in done.message and "Read-only file system" in done.message
    run = local.run(k)
    assert not (run.path / "pwned").exists()
    assert [p for p in run.path.rglob("pwned") if run.source not in p.parents] == []


def _tar(entries: list[tuple[str, bytes | str]]) -> io.BytesIO:
    """A tar of regular files (bytes) and symbolic links (str targets)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, content in entries:
            info = tarfile.TarInfo(name)
            if isinstance(content, str):
                info.type, info.linkname = tarfile.SYMTYPE, content
                tar.addfile(info)
            else:
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    buf.seek(0)
    return buf


def test_extraction_stops_at_the_expanded_and_entry_limits(tmp_path: Path) -> None:
    with pytest.raises(SourceFetchError, match="more than 0 MiB"):
        extract_limited(_tar([("a", b"x" * 10), ("b", b"y" * 10)]), tmp_path / "a",
                        max_bytes=15)
    assert not (tmp_path / "a" / "b").exists()  # stopped before writing past the limit
    with pytest.raises(SourceFetchError, match="more than 2 entries"):
        extract_limited(_tar([("a", b""), ("b", b""), ("c", b"")]), tmp_path / "b",
                        max_entries=2)


def test_links_out_of_the_checkout_are_left_out(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    skipped = extract_limited(_tar([("ok", b"fine"), ("abs", "/etc/shadow"),
                                    ("up", "../../outside"), ("near", "ok")]), dest)
    assert skipped == 2
    assert sorted(p.name for p in dest.iterdir()) == ["near", "ok"]


@pytest.mark.parametrize("repo", ["/srv/repo", "./repo", "../x/y", "file:///srv/repo",
                                  "http://github.com/a/b", "git@github.com:a/b.git",
                                  "ssh://git@host/a", "ext::sh -c touch% /tmp/x",
                                  "https://user:token@host/a.git", "team/..", "-o/x"])
def test_a_repo_is_never_a_path_or_another_transport(repo: str) -> None:
    with pytest.raises(SourceFetchError, match="not owner/repository or an https:// URL"):
        repo_url(repo)


def test_owner_name_is_github_over_https() -> None:
    assert repo_url("team/hello") == "https://github.com/team/hello.git"
    assert repo_url("team/hello.git") == "https://github.com/team/hello.git"
    assert repo_url("https://git.example/a/b.git") == "https://git.example/a/b.git"
    for ref in ("--upload-pack=touch /tmp/x; echo", "-b", "main branch", "a\nb"):
        with pytest.raises(SourceFetchError, match="is not a branch, tag or commit"):
            check_ref(ref)


def _problems(repo: str, ref: str) -> set[str]:
    text = ("apiVersion: nodus.dev/v1\nkind: Job\nmetadata:\n  name: j\nspec:\n"
            f"  command: [python3]\n  source:\n    git:\n      repo: {json.dumps(repo)}\n"
            f"      ref: {json.dumps(ref)}\n")
    result = validate_files([("j.yaml", text.encode())])
    return {p.path.rsplit(".", 1)[-1] for p in result.problems}


_PIECE = st.text(alphabet="aZ09-._~%+@:/ \n", min_size=0, max_size=10)
REPOS = st.one_of(
    st.text(alphabet="ab-./:_@~%+ \nhtps0", min_size=1, max_size=24),
    st.builds(lambda a, b: f"{a}/{b}", _PIECE, _PIECE),
    st.builds(lambda a, b: f"https://{a}/{b}", _PIECE, _PIECE),
    st.builds(lambda scheme, rest: f"{scheme}://{rest}",
              st.sampled_from(["http", "file", "ssh", "git", "ext"]), _PIECE))


@settings(max_examples=400, deadline=None)
@given(repo=REPOS, ref=st.text(alphabet="ab-/ ^~\t.0\n", min_size=1, max_size=12))
def test_validation_and_the_backend_agree_on_repos_and_refs(repo: str, ref: str) -> None:
    """What validation accepts the backend fetches, and what it refuses the backend
    refuses too (the backend never trusts validation alone)."""
    refused = _problems(repo, ref)

    def backend_refuses(check, value) -> bool:
        try:
            check(value)
            return False
        except SourceFetchError:
            return True

    assert ("repo" in refused) == backend_refuses(repo_url, repo)
    assert ("ref" in refused) == backend_refuses(check_ref, ref)


WHERE = """
import json, os
found = {p: sorted(os.listdir(p)) for p in ("/src", "/workspace/src", "/nodus/work/lib/code",
                                          "/nodus/source") if os.path.isdir(p)}
print(json.dumps({"cwd": os.getcwd(), "found": found}))
"""


@bwrap_only
@pytest.mark.parametrize(("spec", "cwd", "checkout"), [
    ({"path": "/src"}, "/nodus/work", "/src"),
    ({"path": "/src", "workingDir": "/workspace"}, "/workspace", "/src"),
    ({"path": "src", "workingDir": "/workspace"}, "/workspace", "/workspace/src"),
    ({"path": "lib/code"}, "/nodus/work", "/nodus/work/lib/code"),
    ({"path": "./src/", "workingDir": "/workspace"}, "/workspace", "/workspace/src"),
])
def test_source_path_moves_the_checkout_and_never_the_working_directory(
        local_factory, https_git, tmp_path, spec, cwd, checkout):
    """source.git.path is where the files appear (a relative one inside the command's
    working directory); the command starts where it would without it."""
    https_git.repo("code", {"a.txt": "a"}, tmp_path / "w")
    local = local_factory(**https_git.trusted())
    extra = {"workingDir": spec["workingDir"]} if "workingDir" in spec else {}
    k = local.create("placed", command=[sys.executable, "-c", WHERE], **extra,
                     source={"git": {"repo": https_git.url_for("code"), "ref": "main",
                                     "path": spec["path"]}})
    done = local.wait(k)
    assert done.phase == "Succeeded", (done.reason, done.message, local.log(k))
    seen = json.loads(local.log(k))
    assert seen["cwd"] == cwd
    assert seen["found"].get(checkout) == ["a.txt"], seen
    assert "/nodus/source" not in seen["found"]
    assert not [e for e in local.run(k).read_events() if e["reason"] == "WorkingDir"]


@bwrap_only
@pytest.mark.parametrize(("path", "words"), [("/usr/src/app", "part of the runtime"),
                                             ("../../etc/app", "part of the runtime"),
                                             ("/nodus/outputs/src", "the platform fills")])
def test_a_source_path_the_run_cannot_hold_is_refused_not_moved(local_factory, https_git,
                                                                 tmp_path, path, words):
    """A checkout the run's root cannot hold (/usr is the host's, read-only) or that
    would be mixed into the platform's directories is no place for the files: the Job
    fails saying so, before anything is fetched, instead of running elsewhere."""
    https_git.repo("code", {"a.txt": "a"}, tmp_path / "w")
    local = local_factory(**https_git.trusted())
    k = local.create("misplaced", command=["true"], source={
        "git": {"repo": https_git.url_for("code"), "ref": "main", "path": path}})
    done = local.wait(k)
    assert (done.phase, done.reason) == ("Failed", "StorageUnavailable"), done
    assert f"source.git.path {path}" in done.message and words in done.message
    assert done.status["attempts"] == 0 and done.status["source"] is None
    assert "source.git.path" in done.fix


def _incompressible_repo(https_git, name: str, size: int, work: Path) -> None:
    """A served repository whose one commit holds `size` random bytes: its archive
    cannot be compressed below that."""
    https_git.repo(name, {"README": "big\n"}, work)
    from tests.fixtures_git import git

    with open(work / "blob.bin", "wb") as f:
        f.write(os.urandom(size))
    git("add", "blob.bin", cwd=work)
    git("commit", "--quiet", "-m", "blob", cwd=work)
    git("push", "--quiet", str(https_git.root / f"{name}.git"), "HEAD:refs/heads/main",
        cwd=work)


@pytest.mark.parametrize("sandboxed", [pytest.param(True, marks=bwrap_only), False])
def test_a_source_over_100_mib_compressed_is_refused(local_factory, https_git, tmp_path,
                                                    sandboxed):
    _incompressible_repo(https_git, "huge", MAX_COMPRESSED + (1 << 20), tmp_path / "w")
    local = local_factory(**https_git.trusted(sandbox="bubblewrap" if sandboxed else "none"))
    k = local.create("huge", command=["true"],
                     source={"git": {"repo": https_git.url_for("huge"), "ref": "main"}})
    failed = local.wait(k, timeout=180)
    assert (failed.phase, failed.reason) == ("Failed", "StorageUnavailable"), failed
    assert "larger than 100 MiB compressed" in failed.message, failed.message
    assert failed.status["attempts"] == 0 and not local.run(k).source.exists()


@bwrap_only
def test_a_source_just_under_the_compressed_limit_is_fetched(local_factory, https_git,
                                                             tmp_path):
    """Old history does not count: only the commit's own files are the archive."""
    https_git.repo("near", {"README": "x\n"}, tmp_path / "w")
    from tests.fixtures_git import git

    work = tmp_path / "w"
    for step in range(2):  # two 60 MiB files, one after the other: 120 MiB of history
        (work / "blob.bin").write_bytes(os.urandom(60 << 20))
        git("add", "blob.bin", cwd=work)
        git("commit", "--quiet", "-m", f"blob {step}", cwd=work)
    git("push", "--quiet", str(https_git.root / "near.git"), "HEAD:refs/heads/main", cwd=work)
    local = local_factory(**https_git.trusted())
    k = local.create("near", command=["true"],
                     source={"git": {"repo": https_git.url_for("near"), "ref": "main"}})
    done = local.wait(k, timeout=180)
    assert done.phase == "Succeeded", done
    assert (local.run(k).source / "blob.bin").stat().st_size == 60 << 20
