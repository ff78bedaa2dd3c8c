"""The dashboard's pure helpers, table-driven: commit links, masking, escaping, axes."""

from __future__ import annotations

import pytest
from nodus_gitops.web.api import commit_url
from nodus_gitops.web.html import Safe, definition_list, esc, layout, table, tag, th
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


def test_table_scrolls_in_its_own_wrapper_and_can_be_live() -> None:
    assert table(["A"], [tag("tr", tag("td", 1))], class_="x") == (
        '<div class="table-wrap"><table class="x"><thead><tr><th scope="col">A</th></tr>'
        "</thead><tbody><tr><td>1</td></tr></tbody></table></div>")
    assert table(["A"], [], live="rows").startswith('<div class="table-wrap" data-live="rows">')
    sorted_by = table([th(tag("a", "Cost", href="?sort=cost"), aria_sort="ascending"), "B"], [])
    assert ('<tr><th scope="col" aria-sort="ascending"><a href="?sort=cost">Cost</a></th>'
            '<th scope="col">B</th></tr>') in sorted_by
    assert definition_list([("k", "<v>")], live="facts") == (
        '<dl data-live="facts"><dt>k</dt><dd>&lt;v&gt;</dd></dl>')


def test_layout_has_a_skip_link_a_connection_note_and_a_live_as_of_time() -> None:
    page = layout("T <b>", tag("p", "body"), active="history", poll="/api/v1/syncs",
                  generated="2026-12-02 05:10:03 UTC").decode()
    assert page.index('<a href="#main" class="skip">') < page.index("<header>")
    assert '<main id="main" tabindex="-1"><h1>T &lt;b&gt;</h1><p>body</p></main>' in page
    assert '<p id="connection" class="connection" role="status" aria-live="polite"></p>' in page
    assert ('<span class="as-of" data-live="as-of">as of <time datetime='
            '"2026-12-02T05:10:03+00:00">2026-12-02 05:10:03 UTC</time></span>') in page
    assert '<a href="/history" aria-current="page" class="active">History</a>' in page
    assert 'data-poll="/api/v1/syncs"' in page and 'class="live"' in page
    still = layout("T", "", generated="").decode()  # a page that is not live says nothing
    assert 'class="live off"' in still and "data-poll" not in still
