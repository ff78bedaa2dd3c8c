"""The History page as a user meets it: syncs paged by fifty, filtered by binding, result
and commit (the filters kept in the URL and in every link), each sync linking to its own
page, check summaries rendered from Markdown, problems with their resource, field and a
link to the file's line; and planted markup staying text."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

import httpx
from nodus_gitops.web.history import history
from nodus_gitops.web.sync_page import sync_page
from nodus_gitops.web.sync_queries import SyncQuery, syncs_page

from tests.web.seed import SHA1, SHA2, XSS_IMG, XSS_SCRIPT, Seeded


def page(seeded: Seeded, query: str = "") -> str:
    result = history(seeded.service, parse_qs(query))
    status, body = result if isinstance(result, tuple) else (200, result)
    assert status == 200, body
    return body.decode()


def sync_ids(html: str) -> list[int]:
    return [int(i) for i in re.findall(r'<section class="[^"]*" data-sync="(\d+)"', html)]


def add_syncs(seeded: Seeded, n: int, binding: str = "ml-team", result: str = "noop",
              commit: str = "feedface") -> list[int]:
    ids = []
    for i in range(n):
        sync_id = seeded.store.start_sync(binding, f"{commit}{i:032x}")
        seeded.store.finish_sync(sync_id, result, "nothing to do",
                                 {"commit": commit, "actions": [], "problems": []},
                                 {"unchanged": 3})
        ids.append(sync_id)
    return ids


def href_params(html: str, rel: str) -> dict[str, list[str]]:
    match = re.search(rf'<a href="([^"]+)" rel="{rel}">', html)
    assert match, f"no {rel} link"
    return parse_qs(urlsplit(match.group(1).replace("&amp;", "&")).query)


def test_pages_by_fifty_newest_first(seeded: Seeded) -> None:
    added = add_syncs(seeded, 60)
    first = page(seeded)
    assert sync_ids(first) == sorted(added, reverse=True)[:50]
    assert "62 syncs · page 1 of 2" in first
    assert 'rel="prev"' not in first
    assert href_params(first, "next") == {"page": ["2"]}
    second = page(seeded, "page=2")
    assert len(sync_ids(second)) == 12 and sync_ids(second)[-2:] == [2, 1]
    assert href_params(second, "prev") == {} and 'rel="next"' not in second


def test_filters_by_binding_result_and_commit(seeded: Seeded) -> None:
    add_syncs(seeded, 3, binding="ops", result="error", commit="0badc0de")
    assert len(sync_ids(page(seeded, "repo=ops"))) == 3
    assert len(sync_ids(page(seeded, "repo=ml-team"))) == 2
    invalid = page(seeded, "result=invalid")
    assert len(sync_ids(invalid)) == 1 and "1 syncs" not in invalid and "1 sync ·" in invalid
    assert len(sync_ids(page(seeded, "result=invalid,error"))) == 4
    assert sync_ids(page(seeded, f"commit={SHA2[:7]}")) == [2]
    assert sync_ids(page(seeded, f"commit={SHA1[:10].upper()}")) == [1]
    assert sync_ids(page(seeded, "commit=0badc0de&repo=ml-team")) == []
    none = page(seeded, "commit=0badc0de&repo=ml-team")
    assert "No syncs match these filters." in none


def test_the_filters_stay_in_the_form_and_the_links(seeded: Seeded) -> None:
    add_syncs(seeded, 55, binding="ops", result="error", commit="0badc0de")
    html = page(seeded, "repo=ops&result=error&commit=0BADC0")
    assert '<option value="ops" selected>' in html
    assert '<option value="error" selected>' in html
    assert 'name="commit" value="0badc0"' in html
    assert href_params(html, "next") == {"repo": ["ops"], "result": ["error"],
                                         "commit": ["0badc0"], "page": ["2"]}


def test_bad_filters_say_what_is_wrong(seeded: Seeded) -> None:
    for query, said in (("page=0", "page: must be 1 to 1,000,000"),
                        ("result=great", "result: &#x27;great&#x27; is not one of"),
                        ("commit=%25", "commit: &#x27;%&#x27; is not the start"),
                        ("pageSize=501", "pageSize: at most 500")):
        status, body = history(seeded.service, parse_qs(query))
        assert status == 400 and said in body.decode(), (query, body)


def test_each_sync_links_to_its_page_and_says_what_happened(seeded: Seeded) -> None:
    html = page(seeded)
    assert '<a href="/syncs/1">#1</a>' in html and '<a href="/syncs/2">#2</a>' in html
    assert "1 created, 1 patched" in html
    assert f'<code title="{SHA1}">{SHA1[:12]}</code>' in html  # a local repository: no link
    ops = add_syncs(seeded, 1, binding="ops", commit="0badc0de")[0]
    sha = f"0badc0de{0:032x}"
    assert f'href="https://gitlab.com/acme/ops/-/commit/{sha}"' in page(seeded, "repo=ops")
    assert "s3cret" not in page(seeded, "repo=ops")
    html = page(seeded, "repo=ml-team")
    assert ops not in sync_ids(html)
    sections = re.findall(r'<section class="([^"]+)" data-sync="(\d+)"', html)
    assert sections == [("sync card problem", "2"), ("sync card", "1")]
    live = html.split('data-live="history-rows"', 1)[1]
    assert sync_ids(live) == [2, 1]  # the rows the page re-renders live


def test_problems_name_resource_field_and_link_the_line(seeded: Seeded) -> None:
    sync_id = seeded.store.start_sync("ml-team", SHA2)
    seeded.store.finish_sync(sync_id, "invalid", "1 problems; nothing applied", {
        "commit": SHA2, "actions": [], "problems": [
            {"file": "jobs/train.yaml", "line": 12, "kind": "Job", "name": "train",
             "path": "spec.resources.gpu", "message": "must be one of L4, A10"}]}, {})
    html = page(seeded, f"result=invalid&commit={SHA2[:8]}")
    line = re.search(r'<li class="problem">.*?</li>', html.split(
        f'data-sync="{sync_id}"', 1)[1], re.S)
    assert line, html
    assert (f'<a href="/repos/ml-team/files/{SHA2}/jobs/train.yaml#L12">jobs/train.yaml:12</a>'
            in line.group(0))
    assert "<code>Job/train</code>" in line.group(0)
    assert "<code>spec.resources.gpu</code>" in line.group(0)
    assert "must be one of L4, A10" in line.group(0)


def test_check_summaries_are_rendered_markdown(seeded: Seeded) -> None:
    seeded.store.record_check("ml-team", SHA1, "nodus-gitops/sync", "success",
                              "**Summary**: 1 created\n\n- `Job/ml/hello` create\n", "github")
    html = page(seeded, f"commit={SHA1}")
    assert "<strong>Summary</strong>: 1 created" in html
    assert "<li><code>Job/ml/hello</code> create</li>" in html
    assert "**Summary**" not in html


def test_planted_markup_stays_text(seeded: Seeded, client: httpx.Client) -> None:
    html = client.get("/history").text
    assert XSS_SCRIPT not in html and "<img" not in html
    assert "1 problem &lt;script&gt;alert(1)&lt;/script&gt;" in html  # the check's summary
    assert "unknown field &quot;&gt;&lt;img src=x onerror=alert(1)&gt;" in html
    assert XSS_IMG not in html


def test_a_page_reads_no_more_than_its_rows(seeded: Seeded) -> None:
    add_syncs(seeded, 120)
    rows, total = syncs_page(seeded.store, SyncQuery(page=2, page_size=50))
    assert total == 122 and len(rows) == 50
    assert [r.id for r in rows] == list(range(72, 22, -1))


def test_a_long_summary_shows_its_start_and_links_the_rest(seeded: Seeded) -> None:
    summary = "\n".join(f"- line {i}" for i in range(30))
    seeded.store.record_check("ml-team", SHA1, "nodus-gitops/sync", "success", summary,
                              "github")
    html = page(seeded, f"commit={SHA1}")
    assert "<li>line 11</li>" in html and "line 12<" not in html
    assert '<a href="/syncs/1">18 more lines of this summary</a>' in html
    assert "<li>line 29</li>" in sync_page(seeded.service, "1")[1].decode()
