"""Check summaries as Markdown: what a reader sees rendered, and what an attacker who
controls a summary (a manifest's text reaches it) cannot make the page do."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st
from nodus_gitops.web.markdown import render

from tests.web.seed import XSS_IMG, XSS_SCRIPT

# The tags a rendered summary may contain, nothing else.
ALLOWED = {"a", "blockquote", "br", "code", "s", "details", "div", "em", "h1", "h2", "h3",
           "h4", "h5", "h6", "hr", "li", "ol", "p", "pre", "strong", "summary", "table",
           "tbody", "td", "th", "thead", "tr", "ul"}


def tags(html: str) -> set[str]:
    return {m.lower() for m in re.findall(r"</?([a-zA-Z][a-zA-Z0-9]*)", html)}


def test_markdown_is_rendered() -> None:
    html = render("**Summary**: 1 to create\n\n- `Job/ml/x` create\n- second\n\n"
                  "```diff\n- a: 1\n+ a: 2\n```\n")
    assert "<strong>Summary</strong>" in html
    assert "<li><code>Job/ml/x</code> create</li>" in html
    assert '<pre><code class="language-diff">- a: 1\n+ a: 2\n</code></pre>' in html
    assert html.startswith('<div class="markdown">') and html.endswith("</div>")


def test_tables_are_rendered_without_inline_styles() -> None:
    html = render("| Action | Cost |\n|---|---:|\n| create | $1 |\n")
    assert "<th>Action</th>" in html
    assert '<td class="align-right">$1</td>' in html
    assert "style=" not in html  # the page's CSP has no 'unsafe-inline' for styles


def test_the_reconcilers_own_folds_are_kept() -> None:
    # The plan summary folds each diff in <details><summary> (checks/plan_markdown.py).
    html = render("<details><summary><code>Job/ml/x</code> patch: spec.a &amp; b</summary>"
                  "\n\n```diff\n- a: 1\n```\n\n</details>\n")
    assert "<details><summary><code>Job/ml/x</code> patch: spec.a &amp; b</summary>" in html
    assert html.count("</details>") == 1


def test_raw_html_is_text() -> None:
    for source in (XSS_SCRIPT, XSS_IMG, "<b onclick=alert(1)>x</b>", "<details open>x",
                   "<iframe src=//evil></iframe>", "<summary onclick=x>s</summary>",
                   "a <style>body{}</style> b", "<!-- c --><svg onload=x>"):
        html = render(source)
        assert tags(html) <= ALLOWED - {"a"}, (source, html)
        assert not re.search(r"\son[a-z]+\s*=", html.replace("onclick=alert(1)&gt;", "")
                             .replace("onerror=alert(1)&gt;", "").replace("onload=x&gt;", "")
                             .replace("onclick=x&gt;", "")), html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in render(XSS_SCRIPT)


def test_only_safe_links() -> None:
    for bad in ("javascript:alert(1)", "JaVaScRiPt:alert(1)", "java\tscript:alert(1)",
                "data:text/html;base64,PHNjcmlwdD4=", "vbscript:msgbox", "file:///etc/passwd"):
        html = render(f"[click]({bad}) <{bad}>")
        assert "<a " not in html, html  # shown as text, not as a link
        assert not re.search(r'href="(?!https?:|mailto:|/|#)', html), html
    html = render("[the run](https://ci.example/run/1) and <https://ci.example/x>")
    assert '<a href="https://ci.example/run/1" rel="nofollow noopener noreferrer">the run</a>' \
        in html
    assert 'href="https://ci.example/x"' in html


def test_images_never_load() -> None:
    html = render("![pixel](https://tracker.example/p.png)")
    assert "<img" not in html
    assert "pixel" in html


def test_unclosed_folds_are_closed_inside_the_summary() -> None:
    html = render("<details><summary>open</summary>\n\ntext")
    assert html.endswith("</details></div>")
    stray = render("</details></summary></code></div></td>text")
    assert "</details>" not in stray and "</summary>" not in stray
    assert stray.count("</div>") == 1


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(list("<>/&\"'`*_[]()!:|-\n #=") + [
    "script", "details", "summary", "code", "img", "onerror", "javascript", "http", "a ",
    "href", "style", "~~"]), max_size=60).map("".join))
def test_any_text_renders_only_the_allowed_tags(text: str) -> None:
    html = render(text)
    assert tags(html) <= ALLOWED, (text, html)
    assert "<script" not in html.lower() and "<img" not in html.lower()
    # Every attribute is one the renderer writes itself.
    for attrs in re.findall(r"<[a-z0-9]+(\s[^>]*)?>", html):
        names = set(re.findall(r'\s([a-z-]+)=', attrs))
        assert names <= {"href", "rel", "class", "start", "title"}, (text, html)
