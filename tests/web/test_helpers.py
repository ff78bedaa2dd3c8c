"""The dashboard's pure helpers, table-driven: commit links, masking, escaping, axes."""

from __future__ import annotations

import pytest
from nodus_gitops.web.api import commit_url
from nodus_gitops.web.html import Safe, esc, tag
from nodus_gitops.web.redact import MASK, mask
from nodus_gitops.web.svg import _axis

SHA = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize(("url", "expected"), [
    ("https://github.com/acme/ml.git", f"https://github.com/acme/ml/commit/{SHA}"),
    ("https://tok:x@gitlab.com/g/sub/p.git", f"https://gitlab.com/g/sub/p/-/commit/{SHA}"),
    ("https://gitea.corp.example/a/b", f"https://gitea.corp.example/a/b/commit/{SHA}"),
    ("https://codeberg.org/a/b/", f"https://codeberg.org/a/b/commit/{SHA}"),
    ("http://github.com/acme/ml", None),  # not https
    ("git@github.com:acme/ml.git", None),
    ("https://git.example.com/acme/ml", None),  # unknown host
    ("https://github.com/acme", None),
    ("/srv/git/ml", None),
])
def test_commit_url(url: str, expected: str | None) -> None:
    assert commit_url(url, SHA) == expected


def test_commit_url_needs_a_sha() -> None:
    assert commit_url("https://github.com/a/b", "main") is None
    assert commit_url("https://github.com/a/b", 'x"><script>') is None


def test_mask_hides_secret_looking_environment_only() -> None:
    manifest = {"spec": {"env": {"API_KEY": "k", "GH_TOKEN": "t", "db_password": "p",
                                 "MY_SECRET": "s", "LOG_LEVEL": "debug"},
                         "stages": [{"template": {"env": {"AWS_SECRET_ACCESS_KEY": "a"}}}],
                         "matrix": {"params": {"TOKEN_LIMIT": "9", "BATCH": "2"}},
                         "other": {"API_KEY": "kept: not an env"}}}
    out = mask(manifest)
    assert out["spec"]["env"] == {"API_KEY": MASK, "GH_TOKEN": MASK, "db_password": MASK,
                                  "MY_SECRET": MASK, "LOG_LEVEL": "debug"}
    assert out["spec"]["stages"][0]["template"]["env"] == {"AWS_SECRET_ACCESS_KEY": MASK}
    assert out["spec"]["matrix"]["params"] == {"TOKEN_LIMIT": MASK, "BATCH": "2"}
    assert out["spec"]["other"] == {"API_KEY": "kept: not an env"}
    assert manifest["spec"]["env"]["API_KEY"] == "k"  # a copy: the record is untouched
    assert mask({"env": [{"name": "PASSWORD", "value": "p"}]}) == {
        "env": [{"name": "PASSWORD", "value": MASK}]}


def test_tag_escapes_text_and_attributes_but_not_safe_html() -> None:
    assert esc('<a href="x">') == "&lt;a href=&quot;x&quot;&gt;"
    assert tag("td", "<b>", title='"x"', data_key="a'b", hidden=True, skip=None) == (
        '<td title="&quot;x&quot;" data-key="a&#x27;b" hidden>&lt;b&gt;</td>')
    assert tag("p", tag("b", "ok"), " & ", Safe("<i>raw</i>")) == (
        "<p><b>ok</b> &amp; <i>raw</i></p>")
    assert tag("rect", x=1) == '<rect x="1"/>'
    assert tag("text", "<tspan>", class_="a") == '<text class="a">&lt;tspan&gt;</text>'


@pytest.mark.parametrize(("largest", "top", "ticks"), [
    (0.0735, 0.08, 5), (1575, 2000, 5), (7, 8, 5), (100, 100, 5), (0, 1, 5)])
def test_axis_has_a_round_top(largest: float, top: float, ticks: int) -> None:
    got_top, got_ticks = _axis(largest)
    assert got_top == pytest.approx(top) and len(got_ticks) == ticks
    assert got_top >= largest
