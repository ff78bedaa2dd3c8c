"""Git over HTTP with a GitHub App's installation token: fetches and notes pushes to a real
Git server that takes `x-access-token` and the current token only; the App's API is a
respx fixture of GitHub's documented shapes."""

from __future__ import annotations

import json
from pathlib import Path

import respx
from nodus_gitops.checks.gitnotes import GitNotesWriter
from nodus_gitops.hosts.github_app import GitHubApp, git_credentials
from nodus_gitops.source import GitSource

from tests.checks.support import app_key_pem, iso, recorded, run
from tests.fixtures_git import ManifestRepo, git, serve_git_http

API = "https://api.github.com"
NOW = 1_700_000_000.0


def _token(n: int) -> str:
    return f"ghs_{n:036d}"


def test_fetches_and_notes_pushes_use_the_apps_token_renewed_after_a_401(tmp_path: Path):
    clock = [NOW]
    minted: list[str] = []

    def mint(request):
        minted.append(_token(len(minted) + 1))
        return recorded("github", "installation_token",
                        fields={"token": minted[-1], "expires_at": iso(clock[0] + 3600)})

    app = GitHubApp.from_settings({"appId": 12345, "privateKeyEnv": "K", "installationId": 77},
                                  {"K": app_key_pem()}, clock=lambda: clock[0])
    with serve_git_http(tmp_path / "srv", auth=("x-access-token", _token(1))) as server, \
            respx.mock() as router:
        route = router.post(f"{API}/app/installations/77/access_tokens").mock(side_effect=mint)
        repo = ManifestRepo(server.root / "octo-org", "gpu-jobs", tmp_path / "work")
        repo.write("a.yaml", "kind: Job\n")
        first = repo.commit("a")
        repo.push()
        url = server.url_for("octo-org/gpu-jobs")
        credentials = git_credentials(app, "octo-org/gpu-jobs")
        source = GitSource(url, "main", tmp_path / "mirrors", credentials)
        assert source.fetch() == first
        assert minted == [_token(1)]

        # GitHub stops taking the cached token before its expires_at (revoked): the
        # remote answers 401, and the fetch goes through with a freshly minted one.
        server._server.auth = ("x-access-token", _token(2))
        repo.write("b.yaml", "kind: Job\n")
        second = repo.commit("b")
        repo.push()
        assert source.fetch() == second
        assert minted == [_token(1), _token(2)]

        # The hour passes: the next fetch mints before sending anything.
        clock[0] += 3600
        server._server.auth = ("x-access-token", _token(3))
        requests = server.requests
        assert source.remote_head() == second
        assert minted[-1] == _token(3)
        # libgit2 always asks once without credentials; a stale token would add a third.
        assert server.requests - requests == 2

        # Notes go to the same remote with the same token.
        writer = GitNotesWriter(source.path, url, credentials, push=True)
        writer.post(run("success", commit=second, context="nodus/ci/sync"))
        note = git("--git-dir", repo.bare, "notes", "--ref=nodus", "show", second)
        assert json.loads(note)["nodus/ci/sync"]["state"] == "success"
        assert route.call_count == 3


def test_the_apps_minted_tokens_are_scrubbed_from_git_messages(tmp_path: Path):
    # App credentials carry no password: what they send is minted at the first use, so
    # the redaction lists must follow the tokens as they are minted.
    minted: list[str] = []

    def mint(request):
        minted.append(_token(len(minted) + 1))
        return recorded("github", "installation_token",
                        fields={"token": minted[-1], "expires_at": iso(NOW + 3600)})

    app = GitHubApp.from_settings({"appId": 12345, "privateKeyEnv": "K", "installationId": 77},
                                  {"K": app_key_pem()}, clock=lambda: NOW)
    credentials = git_credentials(app, "octo-org/gpu-jobs")
    url = "https://github.com/octo-org/gpu-jobs.git"
    source = GitSource(url, "main", tmp_path / "mirrors", credentials)
    writer = GitNotesWriter(source.path, url, credentials)
    with respx.mock() as router:
        router.post(f"{API}/app/installations/77/access_tokens").mock(side_effect=mint)
        first = credentials.secret()
        second = credentials.secret(fresh=True)  # the remote refused the first one
    assert [first, second] == [_token(1), _token(2)]
    for token in (first, second):
        message = f"unexpected http status code: 401 for https://x-access-token:{token}@github.com"
        assert token not in source._scrub(message)
        assert token not in writer._scrub(message)
