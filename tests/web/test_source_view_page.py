"""The file page, /repos/<binding>/files/<commit>/<path>: one manifest file at one commit of
the binding's real Git repository, as written, numbered for `#L<line>` links, masked; and
nothing but the binding's manifest files."""

from __future__ import annotations

import re

import httpx
import pytest
from nodus_gitops.web.source_view import file_page, file_url

from tests.web.seed import SHA1, SHA2, XSS_SCRIPT, Seeded


def test_a_file_at_a_commit_is_its_own_text_numbered(seeded: Seeded) -> None:
    status, body = file_page(seeded.service, "ml-team", SHA1, "jobs/hello.yaml")
    html = body.decode()
    assert status == 200
    text = (seeded.repo_dir / "jobs" / "hello.yaml").read_text().split("\n")[:-1]
    shown = re.findall(r'<span id="L(\d+)" class="line"><a href="#L\1" class="ln" '
                       r'aria-hidden="true">\1</a><span class="code">(.*?)</span>', html)
    assert [int(n) for n, _ in shown] == list(range(1, len(text) + 1))
    unescaped = [s.replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">")
                 .replace("&#x27;", "'").replace("&amp;", "&") for _, s in shown]
    for original, line in zip(text, unescaped, strict=True):
        if "sk-live-123" in original or "hunter2" in original:
            assert line.endswith(": ********")
        else:
            assert line == original
    assert "sk-live-123" not in html and XSS_SCRIPT not in html
    assert "Secret-looking values are masked on 2 lines." in html


def test_the_head_commit_s_invalid_file_is_there_for_its_problem_s_link(
        seeded: Seeded) -> None:
    status, body = file_page(seeded.service, "ml-team", SHA2, "jobs/bad.yaml")
    assert status == 200 and 'id="L3"' in body.decode()
    assert file_url("ml-team", SHA2, "jobs/bad.yaml", 3) == (
        f"/repos/ml-team/files/{SHA2}/jobs/bad.yaml#L3")
    # Not in the first commit.
    assert file_page(seeded.service, "ml-team", SHA1, "jobs/bad.yaml")[0] == 404


@pytest.mark.parametrize(("binding", "commit", "file"), [
    ("ml-team", SHA1, "README.md"),  # not a manifest
    ("ml-team", SHA1, "jobs/../jobs/hello.yaml"),
    ("ml-team", SHA1, "other/hello.yaml"),  # outside the binding's path
    ("ml-team", "main", "jobs/hello.yaml"),  # a branch is not a commit
    ("ml-team", "f" * 40, "jobs/hello.yaml"),  # not in the mirror
    ("ops", SHA1, "jobs/hello.yaml"),  # another binding's repository
    ("nope", SHA1, "jobs/hello.yaml"),
])
def test_only_the_binding_s_manifest_files_are_shown(seeded: Seeded, binding: str,
                                                     commit: str, file: str) -> None:
    status, body = file_page(seeded.service, binding, commit, file)
    assert status == 404 and b'class="line' not in body


def test_the_page_over_http(client: httpx.Client) -> None:
    response = client.get(f"/repos/ml-team/files/{SHA1}/jobs/hello.yaml")
    if response.status_code == 404 and "no such endpoint" in response.text:
        pytest.skip("the route /repos/<binding>/files/<commit>/<path> is not in routes.py yet")
    assert response.status_code == 200 and 'id="L1"' in response.text
    assert client.get(f"/repos/ml-team/files/{SHA1}/jobs/nope.yaml").status_code == 404
