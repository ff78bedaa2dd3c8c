"""The page of one sync: binding, commit, times, result; the plan as a diff field by field
(a script as a line diff, a create as its new fields, a delete as removed); what was
applied as the journal recorded it; the checks posted for the commit; the problems
linked to their lines; every planted string as text."""

from __future__ import annotations

import re
from typing import Any

from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.web.sync_page import sync_page

from tests.web.seed import PROJECT, SHA1, SHA2, XSS_IMG, XSS_SCRIPT, Seeded

HELLO = {"apiVersion": "nodus.dev/v1", "kind": "Job",
         "metadata": {"name": "hello", "labels": {"team": XSS_SCRIPT}},
         "spec": {"image": "nodus/pytorch", "command": ["python", "hello.py"]}}


def page(seeded: Seeded, sync_id: int | str) -> str:
    status, body = sync_page(seeded.service, str(sync_id))
    assert status == 200
    return body.decode()


def journal(seeded: Seeded, sync_id: int, calls: list[tuple[str, str, str, dict[str, Any],
                                                            bool, dict[str, Any]]]) -> None:
    """The journal entries apply writes for a sync: each call announced, then its result."""
    ids = seeded.store.add_intents([
        {"binding_id": "ml-team", "sync_id": sync_id, "action": op,
         "key": ResourceKey(kind, PROJECT, name), "spec_hash": f"h-{name}",
         "idempotency_key": f"{sync_id}-{op}-{name}", "payload": payload}
        for op, kind, name, payload, _, _ in calls])
    seeded.store.finish_intents([(ids[f"{sync_id}-{op}-{name}"][0], ok, outcome)
                                 for op, _, name, _, ok, outcome in calls])


def scripted_sync(seeded: Seeded) -> int:
    old = "set -e\npython prepare.py\npython train.py --epochs 3\necho done\n"
    new = f"set -e\npython prepare.py\npython train.py --epochs 5 # {XSS_SCRIPT}\necho done\n"
    sync_id = seeded.store.start_sync("ml-team", SHA1)
    plan = {"commit": SHA1, "problems": [], "actions": [
        {"action": "create", "kind": "Job", "name": "hello", "file": "jobs/hello.yaml",
         "changes": [], "reason": ""},
        {"action": "replace", "kind": "Job", "name": "train", "file": "jobs/train.yaml",
         "changes": [{"path": "spec.script", "old": old, "new": new},
                     {"path": "spec.completions", "old": 1, "new": 2}],
         "reason": "spec.script cannot change in place (nodus.dev/on-change: Replace)"},
        {"action": "delete", "kind": "Job", "name": "old", "file": "jobs/old.yaml",
         "changes": [], "reason": "removed from Git"}]}
    seeded.store.finish_sync(sync_id, "partial", "1 created, 1 deleted, 1 failed", plan,
                             {"created": 1, "deleted": 1, "failed": 1})
    journal(seeded, sync_id, [
        ("create", "Job", "hello", {"file": "jobs/hello.yaml", "manifest": HELLO}, True,
         {"provider_id": "local-42"}),
        ("delete", "Job", "train", {"file": "jobs/train.yaml"}, True, {}),
        ("create", "Job", "train", {"file": "jobs/train.yaml", "manifest": {"kind": "Job"}},
         False, {"error": f"quota exceeded {XSS_IMG}"}),
        ("delete", "Job", "old", {"file": "jobs/old.yaml"}, True, {})])
    return sync_id


def test_the_sync_and_its_commit(seeded: Seeded) -> None:
    html = page(seeded, 1)
    assert "<h1>Sync #1</h1>" in html
    assert '<a href="/history?repo=ml-team">ml-team</a>' in html
    assert f'<code title="{SHA1}">{SHA1[:12]}</code>' in html
    assert 'class="phase phase-applied"' in html and "1 created, 1 patched" in html
    main = html.split("<main", 1)[1]
    assert main.count("<time ") == 2 + 1  # started, finished, and the check's post
    assert 'class="duration"' in html


def test_a_patch_is_old_to_new_and_links_resource_and_file(seeded: Seeded) -> None:
    html = page(seeded, 1)
    sweep = html.split('data-resource="Sweep/batch-size"', 1)[1].split("</section>", 1)[0]
    assert "<code>spec.maxParallel</code>" in sweep and "<code>1</code> → <code>2</code>" in sweep
    assert f'href="/resources/Sweep/{PROJECT}/batch-size"' in sweep
    assert f'href="/repos/ml-team/files/{SHA1}/jobs/batch-size.yaml"' in sweep


def test_a_script_change_is_a_line_diff(seeded: Seeded) -> None:
    html = page(seeded, scripted_sync(seeded))
    train = html.split('data-resource="Job/train"', 1)[1].split("</section>", 1)[0]
    assert '<span class="line del">- python train.py --epochs 3\n</span>' in train
    assert ('<span class="line ins">+ python train.py --epochs 5 # '
            '&lt;script&gt;alert(1)&lt;/script&gt;\n</span>') in train
    assert '<span class="line">  python prepare.py\n</span>' in train
    assert "<code>1</code> → <code>2</code>" in train  # spec.completions, beside it
    assert "cannot change in place" in train


def test_a_create_shows_the_fields_it_sent_and_a_delete_the_resource_removed(
        seeded: Seeded) -> None:
    html = page(seeded, scripted_sync(seeded))
    hello = html.split('data-resource="Job/hello"', 1)[1].split("</section>", 1)[0]
    assert '<code>spec.image</code> <span class="mark">added</span> <code>nodus/pytorch</code>' \
        in hello
    assert "<code>metadata.labels.team</code>" in hello and "&lt;script&gt;" in hello
    old = html.split('data-resource="Job/old"', 1)[1].split("</section>", 1)[0]
    assert '<span class="mark">removed</span> <code>Job/old</code>' in old
    assert 'href="/resources/' not in old  # it is gone: no link to a page that 404s
    # Without a journal entry, the page says the manifest is unknown, not "no fields".
    assert "not journaled" in page(seeded, 1).split('data-resource="Job/hello"', 1)[1]


def test_what_was_applied_is_the_journal(seeded: Seeded) -> None:
    html = page(seeded, scripted_sync(seeded))
    applied = html.split('class="applied"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr[ >].*?</tr>", applied.split("<tbody>", 1)[1], re.S)
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)[:2] for r in rows]
    assert cells == [["create", "Job/hello"], ["delete", "Job/train"], ["create", "Job/train"],
                     ["delete", "Job/old"]]
    assert "provider id local-42" in rows[0] and "phase-done" in rows[0]
    assert 'class="bad"' in rows[2] and "quota exceeded &quot;&gt;&lt;img" in rows[2]
    assert "No provider call was journaled with this sync." in page(seeded, 1)


def test_the_checks_of_the_commit_are_rendered(seeded: Seeded) -> None:
    seeded.store.record_check("ml-team", SHA1, "nodus-gitops/sync", "success",
                              "**Applied**: 1 created\n\n| a | b |\n|---|--:|\n| 1 | 2 |\n",
                              "github")
    html = page(seeded, 1)
    assert "<strong>Applied</strong>: 1 created" in html
    assert '<td class="align-right">2</td>' in html
    assert "nodus-gitops/plan" in html and "gitnotes" in html


def test_problems_link_to_their_lines(seeded: Seeded) -> None:
    html = page(seeded, 2)
    assert "Problems (1)" in html
    assert (f'<a href="/repos/ml-team/files/{SHA2}/jobs/bad.yaml#L3">jobs/bad.yaml:3</a> '
            "<code>spec</code>: unknown field &quot;&gt;&lt;img src=x onerror=alert(1)&gt;"
            in html)
    assert "The commit has problems: nothing was planned." in html
    assert "1 problem &lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_planted_markup_stays_text(seeded: Seeded) -> None:
    for sync_id in (1, 2, scripted_sync(seeded)):
        html = page(seeded, sync_id)
        assert XSS_SCRIPT not in html and XSS_IMG not in html and "<img" not in html
        assert re.findall(r"<script[^>]*>", html) == ['<script src="/static/app.js" defer>']
        assert " style=" not in html


def test_a_file_path_is_encoded_segment_by_segment(seeded: Seeded) -> None:
    sync_id = seeded.store.start_sync("ml-team", SHA2)
    seeded.store.finish_sync(sync_id, "invalid", "1 problems; nothing applied", {
        "commit": SHA2, "actions": [], "problems": [
            {"file": "jobs/a b/#x?.yaml", "line": 7, "path": "", "message": "bad"}]}, {})
    assert f'href="/repos/ml-team/files/{SHA2}/jobs/a%20b/%23x%3F.yaml#L7"' in page(
        seeded, sync_id)


def test_an_unknown_sync_is_404(seeded: Seeded) -> None:
    for sync_id in ("999", "abc", "-1"):
        status, body = sync_page(seeded.service, sync_id)
        assert status == 404 and b"No sync" in body


def test_a_file_name_that_is_not_utf8_shows_its_bytes_and_links_to_them(seeded):
    """Git takes any bytes as a file name; the reconciler reads them with surrogateescape
    (a byte 0xff is U+DCFF). The page shows the byte and links to the real path, never a
    500."""
    sync_id = seeded.store.start_sync("ml-team", SHA1)
    name = b"jobs/caf\xff.yaml".decode("utf-8", "surrogateescape")
    plan = {"commit": SHA1, "actions": [], "problems": [
        {"file": name, "line": 3, "resource": "Job/x", "path": "spec", "message": "bad"}]}
    seeded.store.finish_sync(sync_id, "invalid", "1 problem", plan, {})
    html = page(seeded, sync_id)
    assert "jobs/caf\\xff.yaml:3" in html
    assert "/files/" in html and "caf%FF.yaml#L3" in html


def test_a_lone_surrogate_no_byte_stands_for_is_shown_as_its_escape():
    from nodus_gitops.web.html import esc, path

    assert esc("a\ud800b") == "a\\ud800b"
    assert path("a\ud800") == "/a%5Cud800"
