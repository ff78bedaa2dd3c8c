"""The Git source against real repos served over real HTTP (and git://, file://) on 127.0.0.1."""

from __future__ import annotations

import random
import socket
from pathlib import Path

import pygit2
import pytest
from nodus_gitops.floor.errors import ConfigError, SourceError
from nodus_gitops.floor.redaction import mask_url_passwords, scrub, url_without_userinfo
from nodus_gitops.hosts.credentials import Credentials
from nodus_gitops.source import Backoff, GitSource

from tests.fixtures_git import GitHttpServer, ManifestRepo, git, serve_git_http

JOB = "apiVersion: nodus.dev/v1\nkind: Job\nmetadata:\n  name: {name}\n"


@pytest.fixture
def source(manifest_repo: ManifestRepo, git_http_server: GitHttpServer, tmp_path: Path):
    return GitSource(git_http_server.url_for("manifests"), "main", tmp_path / "mirrors")


def seed(repo: ManifestRepo) -> str:
    repo.write("jobs/train.yaml", JOB.format(name="train"))
    repo.write("jobs/eval.yml", JOB.format(name="eval"))
    repo.write("jobs/nested/deep.yaml", JOB.format(name="deep"))
    repo.write("jobs/notes.md", "not a manifest\n")
    repo.write("jobs/data.json", "{}\n")
    repo.write("jobs2/other.yaml", JOB.format(name="other"))
    repo.write("top.yaml", JOB.format(name="top"))
    sha = repo.commit("seed")
    repo.push()
    return sha


def test_remote_head_is_the_pushed_sha(manifest_repo, source):
    sha = seed(manifest_repo)
    assert source.remote_head() == sha
    manifest_repo.write("jobs/train.yaml", JOB.format(name="train2"))
    second = manifest_repo.commit("second")
    manifest_repo.push()
    assert source.remote_head() == second


def test_poll_fetches_only_when_the_branch_moved(manifest_repo, source, git_http_server):
    first = seed(manifest_repo)
    assert source.poll(None) == first
    before = git_http_server.requests
    assert source.poll(first) is None
    assert git_http_server.requests - before == 1  # one ref advertisement, no fetch

    manifest_repo.write("jobs/train.yaml", JOB.format(name="changed"))
    second = manifest_repo.commit("change")
    manifest_repo.push()
    before = git_http_server.requests
    assert source.poll(first) == second
    assert git_http_server.requests - before == 2  # the fetch reuses the poll's connection
    assert source.read_tree(second, "jobs")["jobs/train.yaml"] == JOB.format(
        name="changed"
    ).encode()


def test_poll_refetches_into_a_wiped_mirror(manifest_repo, git_http_server, tmp_path):
    sha = seed(manifest_repo)
    url = git_http_server.url_for("manifests")
    assert GitSource(url, "main", tmp_path / "a").poll(None) == sha
    fresh = GitSource(url, "main", tmp_path / "b")  # e.g. a new pod, state says `sha`
    assert fresh.poll(sha) is None
    assert "jobs/train.yaml" in fresh.read_tree(sha)


def test_read_tree_returns_only_yaml_under_the_folder(manifest_repo, source):
    sha = seed(manifest_repo)
    source.fetch()
    expected = {"jobs/eval.yml", "jobs/nested/deep.yaml", "jobs/train.yaml"}
    assert set(source.read_tree(sha, "jobs")) == expected
    assert set(source.read_tree(sha, "/jobs/")) == expected
    assert source.read_tree(sha, "jobs")["jobs/eval.yml"] == JOB.format(name="eval").encode()
    assert set(source.read_tree(sha)) == expected | {"jobs2/other.yaml", "top.yaml"}


def test_read_tree_names_a_missing_folder(manifest_repo, source):
    sha = seed(manifest_repo)
    source.fetch()
    with pytest.raises(SourceError, match="path 'pipelines' not found at commit"):
        source.read_tree(sha, "pipelines")
    with pytest.raises(SourceError, match="'top.yaml' .* is a file"):
        source.read_tree(sha, "top.yaml")


def test_changed_paths_add_modify_delete_rename(manifest_repo, source):
    old = seed(manifest_repo)
    manifest_repo.write("jobs/new.yaml", JOB.format(name="new"))
    manifest_repo.write("jobs/train.yaml", JOB.format(name="train-v2"))
    manifest_repo.remove("jobs/nested/deep.yaml")
    manifest_repo.rename("jobs/eval.yml", "jobs/evaluation.yaml")
    manifest_repo.write("jobs/notes.md", "edited, but not YAML\n")
    manifest_repo.write("jobs2/other.yaml", JOB.format(name="outside"))
    new = manifest_repo.commit("everything at once")
    manifest_repo.push()
    source.fetch()

    changed = source.changed_paths(old, new, "jobs")
    assert changed.added == ("jobs/evaluation.yaml", "jobs/new.yaml")
    assert changed.modified == ("jobs/train.yaml",)
    assert changed.deleted == ("jobs/eval.yml", "jobs/nested/deep.yaml")
    assert source.changed_paths(old, new).modified == ("jobs/train.yaml", "jobs2/other.yaml")
    assert source.read_blobs(new, changed.added) == {
        "jobs/evaluation.yaml": JOB.format(name="eval").encode(),
        "jobs/new.yaml": JOB.format(name="new").encode(),
    }
    with pytest.raises(SourceError, match="'jobs/eval.yml' not found at commit"):
        source.read_blobs(new, changed.deleted)


def _commit_files(repo: pygit2.Repository, files: dict[str, tuple[bytes, int]]) -> str:
    """Commit `{path: (content, mode)}` as the whole tree of a new commit on main."""
    def build(prefix: str) -> pygit2.Oid:
        builder = repo.TreeBuilder()
        children = set()
        for path, (content, mode) in files.items():
            if not path.startswith(prefix):
                continue
            head, _, rest = path[len(prefix):].partition("/")
            if rest:
                children.add(head)
            else:
                builder.insert(head, repo.create_blob(content), mode)
        for child in children:
            builder.insert(child, build(f"{prefix}{child}/"), pygit2.enums.FileMode.TREE)
        return builder.write()

    sig = pygit2.Signature("t", "t@e")
    tip = repo.references.get("refs/heads/main")
    parents = [tip.target] if tip is not None else []
    return str(repo.create_commit("refs/heads/main", sig, sig, "step", build(""), parents))


def test_changed_paths_matches_comparing_both_trees_whole(tmp_path):
    """Random edits (files to folders and back, mode changes, links, folders appearing
    and vanishing): the changes found by skipping equal subtrees are exactly what
    comparing the two full trees finds."""
    remote = pygit2.init_repository(str(tmp_path / "remote.git"), bare=True)
    source = GitSource(str(tmp_path / "remote.git"), "main", tmp_path / "mirrors")
    rng = random.Random(7)
    names = ["a.yaml", "b.yml", "c.md", "x", "x/a.yaml", "x/y/b.yaml", "m/a.yaml", "m/n.yaml"]
    modes = [pygit2.enums.FileMode.BLOB, pygit2.enums.FileMode.BLOB_EXECUTABLE,
             pygit2.enums.FileMode.LINK]
    files: dict[str, tuple[bytes, int]] = {}
    commits = []
    for _ in range(40):
        for _ in range(rng.randint(1, 3)):
            name = rng.choice(names)
            if rng.random() < 0.3:
                files.pop(name, None)
            else:
                files[name] = (rng.choice([b"a: 1\n", b"a: 2\n"]), rng.choice(modes))
        # A path cannot be a file and a folder at once: the folder wins.
        tree = {p: v for p, v in files.items() if not any(q.startswith(p + "/") for q in files)}
        commits.append(_commit_files(remote, tree))
    source.fetch()
    for old, new in zip(commits, commits[1:] + commits[:1], strict=True):
        for path in ("", "x", "m"):
            before = _read_or_empty(source, old, path)
            after = _read_or_empty(source, new, path)
            changed = source.changed_paths(old, new, path)
            assert changed.added == tuple(sorted(after.keys() - before.keys()))
            assert changed.deleted == tuple(sorted(before.keys() - after.keys()))
            assert changed.modified == tuple(sorted(
                p for p in before.keys() & after.keys() if before[p] != after[p]))


def _read_or_empty(source: GitSource, commit: str, path: str) -> dict[str, bytes]:
    try:
        return source.read_tree(commit, path)
    except SourceError:  # the folder is missing (or a file) at this commit
        return {}


def test_changed_paths_in_folders_nested_deeper_than_python_recurses(tmp_path):
    remote = pygit2.init_repository(str(tmp_path / "remote.git"), bare=True)
    source = GitSource(str(tmp_path / "remote.git"), "main", tmp_path / "mirrors")
    sig = pygit2.Signature("t", "t@e")
    commits = []
    for content in (b"a: 1\n", b"a: 2\n"):
        builder = remote.TreeBuilder()
        builder.insert("a.yaml", remote.create_blob(content), pygit2.enums.FileMode.BLOB)
        tree = builder.write()
        for _ in range(1500):  # built from the bottom up: d/d/.../d/a.yaml
            builder = remote.TreeBuilder()
            builder.insert("d", tree, pygit2.enums.FileMode.TREE)
            tree = builder.write()
        commits.append(str(remote.create_commit(
            "refs/heads/main", sig, sig, "deep", tree, commits[-1:])))
    source.fetch()
    deep = "/".join(["d"] * 1500)
    assert source.changed_paths(*commits).modified == (f"{deep}/a.yaml",)


def test_mirror_packs_are_merged_once_fetches_pile_them_up(git_http_server, tmp_path,
                                                             monkeypatch):
    """libgit2 leaves one pack per fetch; past the limit they become one, and another
    handle on the same mirror (another thread) still reads every commit."""
    monkeypatch.setattr("nodus_gitops.source.MAX_MIRROR_PACKS", 5)
    remote = pygit2.init_repository(str(git_http_server.root / "packs.git"), bare=True)
    source = GitSource(git_http_server.url_for("packs"), "main", tmp_path / "mirrors")
    commits = [_commit_files(remote, {"a.yaml": (b"a: 0\n", pygit2.enums.FileMode.BLOB)})]
    last = source.poll(None)
    other = pygit2.Repository(str(source.path))
    packs = []
    for n in range(1, 9):
        commits.append(_commit_files(remote, {
            "a.yaml": (f"a: {n}\n".encode(), pygit2.enums.FileMode.BLOB)}))
        last = source.poll(last)
        assert other[last].peel(pygit2.Commit).tree  # this handle opens the packs so far
        packs.append(len(list(source.path.glob("objects/pack/*.pack"))))
    assert packs == [2, 3, 4, 5, 1, 2, 3, 4]
    for n, sha in enumerate(commits):
        assert source.read_tree(sha) == {"a.yaml": f"a: {n}\n".encode()}
        assert other[sha].peel(pygit2.Commit).tree["a.yaml"].data == f"a: {n}\n".encode()


def test_a_local_remote_shares_its_objects_and_survives_their_pruning(tmp_path):
    """A remote on this disk is read in place (no pack per fetch); when it prunes the
    commit the mirror had (a force-push, then gc), the old commit is reported missing,
    so the sync reads the new one whole, and everything new still reads."""
    path = tmp_path / "remote.git"
    remote = pygit2.init_repository(str(path), bare=True)
    blob = pygit2.enums.FileMode.BLOB
    source = GitSource(str(path), "main", tmp_path / "mirrors")
    first = _commit_files(remote, {"a.yaml": (b"a: 1\n", blob), "b.yaml": (b"b: 1\n", blob)})
    assert source.poll(None) == first
    second = _commit_files(remote, {"a.yaml": (b"a: 2\n", blob), "b.yaml": (b"b: 1\n", blob)})
    assert source.poll(first) == second
    assert source.changed_paths(first, second).modified == ("a.yaml",)
    assert not list(source.path.glob("objects/pack/*.pack"))  # nothing was copied

    sig = pygit2.Signature("t", "t@e")  # force-push a new history, then prune the old
    tree = remote.TreeBuilder()
    tree.insert("c.yaml", remote.create_blob(b"c: 1\n"), blob)
    rewritten = str(remote.create_commit(None, sig, sig, "rewrite", tree.write(), []))
    remote.references["refs/heads/main"].set_target(rewritten)
    git("-C", path, "reflog", "expire", "--expire=now", "--all")
    git("-C", path, "gc", "--prune=now", "--quiet")
    fresh = GitSource(str(path), "main", tmp_path / "mirrors")  # a restarted process
    assert fresh.poll(second) == rewritten
    with pytest.raises(SourceError, match="read the full tree"):
        fresh.changed_paths(second, rewritten)
    assert fresh.read_tree(rewritten) == {"c.yaml": b"c: 1\n"}


def test_a_linked_worktree_remote_shares_its_repository_objects(tmp_path):
    """A worktree's Git directory has no objects of its own: its repository's are used."""
    main = tmp_path / "main"
    git("init", "-q", "-b", "main", main)
    (main / "a.yaml").write_text("a: 1\n")
    git("-C", main, "add", "a.yaml")
    git("-C", main, "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "a")
    git("-C", main, "worktree", "add", "-q", "-b", "side", tmp_path / "side")
    source = GitSource(str(tmp_path / "side"), "side", tmp_path / "mirrors")
    assert source.read_tree(source.fetch()) == {"a.yaml": b"a: 1\n"}
    alternates = source.path / "objects" / "info" / "alternates"
    assert alternates.read_text().strip() == str((main / ".git" / "objects").resolve())
    assert not list(source.path.glob("objects/pack/*.pack"))


def test_force_push_to_unrelated_history(manifest_repo, source):
    old = seed(manifest_repo)
    assert source.poll(None) == old
    new = manifest_repo.reset_hard_to_new_history({"jobs/rewritten.yaml": "kind: Job\n"})
    manifest_repo.push(force=True)

    assert source.poll(old) == new
    assert source.read_tree(new, "jobs") == {"jobs/rewritten.yaml": b"kind: Job\n"}
    changed = source.changed_paths(old, new, "jobs")  # old is still in the mirror
    assert changed.added == ("jobs/rewritten.yaml",)
    assert "jobs/train.yaml" in changed.deleted


def test_changed_paths_from_an_unknown_commit_says_read_everything(manifest_repo, source):
    sha = seed(manifest_repo)
    source.fetch()
    with pytest.raises(SourceError, match="not in the mirror .* read the full tree"):
        source.changed_paths("1" * 40, sha)


def test_commit_info(manifest_repo, source):
    manifest_repo.write("a.yaml", "a: 1\n")
    sha = manifest_repo.commit("Add a\n\nlonger body")
    manifest_repo.push()
    source.fetch()
    info = source.commit_info(sha)
    assert (info.sha, info.author, info.email, info.message) == (sha, "t", "t@e", "Add a")
    assert info.time.tzinfo is not None


def test_missing_branch_is_named(manifest_repo, git_http_server, tmp_path):
    seed(manifest_repo)
    source = GitSource(git_http_server.url_for("manifests"), "release", tmp_path / "m")
    for call in (source.remote_head, source.fetch, lambda: source.poll(None)):
        with pytest.raises(SourceError, match="branch 'release' not found on http://127"):
            call()


def test_unreachable_remote(tmp_path):
    with socket.socket() as s:  # a port that was free a moment ago and has no listener
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    source = GitSource(f"http://bob:hunter2@127.0.0.1:{port}/x.git", "main", tmp_path)
    with pytest.raises(SourceError) as caught:
        source.poll(None)
    message = str(caught.value)
    assert message.startswith(f"cannot reach http://127.0.0.1:{port}/x.git: ")
    assert "hunter2" not in message and "bob" not in message


def test_basic_auth(tmp_path):
    password = "s3cret-pass"
    with serve_git_http(tmp_path / "srv", auth=("alice", password)) as server:
        repo = ManifestRepo(server.root, "private", tmp_path / "work")  # pushes by path
        sha = seed(repo)
        url = server.url_for("private")
        wrong = Credentials.from_env("NODUS_GIT", {"NODUS_GIT_USERNAME": "alice",
                                                   "NODUS_GIT_TOKEN": "wrong-pass"})
        for creds, target in [(wrong, url), (None, url.replace("//", f"//alice:{password}x@"))]:
            with pytest.raises(SourceError) as caught:
                GitSource(target, "main", tmp_path / "m", creds).poll(None)
            assert str(caught.value).startswith(f"authentication failed for {url}: ")
            assert "wrong-pass" not in str(caught.value) and password not in str(caught.value)
        assert "set NODUS_GIT_TOKEN" in str(
            pytest.raises(SourceError, GitSource(url, "main", tmp_path / "m", wrong).fetch).value
        )
        with pytest.raises(SourceError, match="requires credentials and none are configured"):
            GitSource(url, "main", tmp_path / "m").remote_head()

        good = GitSource(url, "main", tmp_path / "m", Credentials("alice", password))
        assert good.poll(None) == sha
        in_url = GitSource(url.replace("//", f"//alice:{password}@"), "main", tmp_path / "m")
        assert in_url.poll(None) == sha and password not in repr(in_url)
        assert password not in (in_url.path / "config").read_text()


def test_missing_local_path(tmp_path):
    with pytest.raises(SourceError, match="cannot reach /.*/absent.git: no Git repository at"):
        GitSource(str(tmp_path / "absent.git"), "main", tmp_path / "m").remote_head()


@pytest.mark.parametrize("form", ["path", "file"])
def test_local_remotes(tmp_path, form):
    repo = ManifestRepo(tmp_path / "srv", "local", tmp_path / "work")
    sha = seed(repo)
    url = str(repo.bare) if form == "path" else repo.bare.as_uri()
    source = GitSource(url, "main", tmp_path / "mirrors")
    assert source.remote_head() == sha
    assert source.poll(None) == sha
    assert "jobs/train.yaml" in source.read_tree(sha, "jobs")


def test_git_daemon_remote(manifest_repo, git_daemon, tmp_path):
    sha = seed(manifest_repo)
    source = GitSource(f"{git_daemon}/manifests.git", "main", tmp_path / "mirrors")
    assert source.poll(None) == sha


def test_each_remote_has_its_own_mirror_and_reuses_it(manifest_repo, git_http_server, tmp_path):
    sha = seed(manifest_repo)
    mirrors = tmp_path / "mirrors"
    http = GitSource(git_http_server.url_for("manifests"), "main", mirrors)
    local = GitSource(str(manifest_repo.bare), "main", mirrors)
    assert http.path != local.path and http.path.parent == mirrors
    http.fetch()
    again = GitSource(git_http_server.url_for("manifests"), "main", mirrors)
    assert again.path == http.path
    assert "jobs/train.yaml" in again.read_tree(sha)  # objects already there, no fetch


def test_pygit2_can_push_through_the_fixture_server(manifest_repo, git_http_server, tmp_path):
    seed(manifest_repo)
    clone = pygit2.clone_repository(git_http_server.url_for("manifests"), str(tmp_path / "c"))
    sig = pygit2.Signature("t", "t@e")
    tree = clone.TreeBuilder(clone.head.peel(pygit2.Commit).tree)
    tree.insert("pushed.yaml", clone.create_blob(b"a: 1\n"), pygit2.enums.FileMode.BLOB)
    sha = clone.create_commit("refs/heads/main", sig, sig, "via libgit2", tree.write(),
                              [clone.head.target])
    clone.remotes["origin"].push(["refs/heads/main:refs/heads/main"])  # a chunked POST
    assert git("rev-parse", "main", cwd=manifest_repo.bare) == str(sha)


def test_invalid_branch_name_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="not a valid Git branch name"):
        GitSource("https://example.com/x.git", "bad..name", tmp_path)


def test_credentials_never_show_secrets(tmp_path):
    creds = Credentials("alice", "tok-123", ssh_key="~/.ssh/id", ssh_passphrase="pp-456")
    assert repr(creds) == (
        "Credentials(username=<set>, password=<set>, ssh_passphrase=<set>, ssh_key='~/.ssh/id')"
    )
    assert "tok-123" not in str(creds) and "pp-456" not in f"{creds}"
    source = GitSource("https://alice:tok-123@example.com/x.git", "main", tmp_path)
    assert "tok-123" not in repr(source) and source.url == "https://example.com/x.git"


def test_credentials_from_env_and_file(tmp_path):
    env = {"G_USERNAME": "u", "G_PASSWORD": "p", "G_TOKEN": "t", "G_SSH_KEY": "/k"}
    assert Credentials.from_env("G", env) == Credentials("u", "p", ssh_key="/k")
    assert Credentials.from_env("G", {"G_TOKEN": "t"}).password == "t"
    good = tmp_path / "creds"
    good.write_text("# git\nusername = u\ntoken=a=b\n\nssh_key=/k\n")
    assert Credentials.from_file(good) == Credentials("u", "a=b", ssh_key="/k")
    bad = tmp_path / "bad"
    bad.write_text("username=u\npasword=x\n")
    with pytest.raises(ConfigError, match=f"{bad}:2: expected key=value"):
        Credentials.from_file(bad)
    with pytest.raises(ConfigError, match="cannot read it"):
        Credentials.from_file(tmp_path / "absent")


def test_url_without_userinfo():
    assert url_without_userinfo("https://u:p@h.example/x.git") == "https://h.example/x.git"
    assert url_without_userinfo("ssh://git@h.example:22/x.git") == "ssh://h.example:22/x.git"
    assert url_without_userinfo("git@h.example:org/x.git") == "git@h.example:org/x.git"
    assert url_without_userinfo("/srv/x.git") == "/srv/x.git"


def test_mask_url_passwords_keeps_the_user_and_hides_each_password():
    text = "could not connect to postgresql://app:s3cret@db:5432/x (via http://u:p@proxy)"
    assert mask_url_passwords(text) == ("could not connect to postgresql://app:***@db:5432/x "
                                        "(via http://u:***@proxy)")


def test_scrub_hides_every_secret_but_not_fragments_too_short_to_be_one():
    message = "token ghp_abcdef refused; retry with ghp_abcdef or ab"
    assert scrub(message, ("ghp_abcdef", "ab", "")) == "token *** refused; retry with *** or ab"
    assert scrub("x tok1 y", ("tok1",), "<token>") == "x <token> y"


def test_backoff_grows_to_the_cap_with_jitter():
    backoff = Backoff(random.Random(7))
    delays = [backoff.next_delay(n) for n in range(0, 14)]
    assert delays[0] == 0.0
    for n, delay in enumerate(delays[1:], 1):
        ceiling = min(300.0, 2.0 ** (n - 1))
        assert ceiling / 2 <= delay <= ceiling
    assert backoff.next_delay(10_000) <= 300.0
    replay = Backoff(random.Random(7))
    assert delays == [replay.next_delay(n) for n in range(0, 14)]  # the injected rng decides
    assert len(set(delays[1:])) == len(delays) - 1  # jittered, not a fixed ladder
