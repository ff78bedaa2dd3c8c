"""Secrets where people and programs put them, read back through the real server: a
plan's diff of env values and scripts, a sync's message, a Job's log lines. The seeded
config names the webhook secret `hook-secret`; a Bearer token and a URL's password are
secret by their looks."""

from __future__ import annotations

import html

import httpx
from nodus_gitops.web import markdown

from tests.web.seed import Seeded, write_run

HOOK_SECRET = "hook-secret"
BEARER = "Bearer sk-abcdefghijklmnop1234567890"
URL_PASSWORD = "hunter22"


def _plain(response: httpx.Response) -> str:
    return html.unescape(response.text)


def test_a_plans_diff_hides_the_secrets_it_changes(seeded: Seeded,
                                                   client: httpx.Client) -> None:
    store = seeded.store
    sync = store.start_sync("ml-team", "f" * 40)
    store.finish_sync(sync, "applied", f"pushed with {HOOK_SECRET}", {"actions": [
        {"action": "patch", "kind": "Job", "name": "hello", "file": "jobs/hello.yaml",
         "reason": None, "changes": [
             {"path": "spec.env.AUTH", "old": BEARER, "new": BEARER + "x"},
             {"path": "spec.env.DB_PASSWORD", "old": "plain-old", "new": "plain-new"},
             {"path": "spec.env.DB_URL", "old": f"https://alice:{URL_PASSWORD}@db/x",
              "new": "https://alice:hunter33@db/x"},
             {"path": "spec.command", "old": ["notify", "--token", HOOK_SECRET],
              "new": ["notify", "--token", HOOK_SECRET, "--lr", "0.1"]}]}],
        "problems": []}, {"patched": 1})
    for answer in (client.get(f"/syncs/{sync}"), client.get(f"/api/v1/syncs/{sync}"),
                   client.get("/api/v1/syncs"), client.get("/history")):
        text = _plain(answer)
        assert answer.status_code == 200, text
        for secret in (BEARER, "sk-abcdefghijklmnop", "plain-old", "plain-new", URL_PASSWORD,
                       "hunter33", HOOK_SECRET):
            assert secret not in text, (answer.url, secret)
    page = _plain(client.get(f"/syncs/{sync}"))
    assert "--lr" in page and "notify" in page  # the command's own words stay


def test_log_lines_hide_the_configured_secret_and_token_shapes(seeded: Seeded,
                                                               client: httpx.Client) -> None:
    write_run(seeded.local_root, "hello", {(0, 3): [
        f"calling with {HOOK_SECRET} and https://carol:{URL_PASSWORD}@x.com/y", BEARER,
        "epoch 3 loss 0.2"]}, completions=2)
    for url in ("/resources/Job/ml/hello", "/api/v1/resources/Job/ml/hello/logs?index=0"):
        text = _plain(client.get(url))
        assert "epoch 3 loss 0.2" in text, url
        for secret in (HOOK_SECRET, URL_PASSWORD, "sk-abcdefghijklmnop"):
            assert secret not in text, (url, secret)


def test_a_page_past_any_list_is_400_not_500(client: httpx.Client) -> None:
    for url in ("/history?page=922337203685477580", "/resources?page=99999999999999999999",
                "/api/v1/resources?page=99999999999999999999"):
        assert client.get(url).status_code == 400, url


def test_a_protocol_relative_link_in_a_summary_is_not_a_link() -> None:
    shown = markdown.render("[x](//evil.example/x) and [y](/syncs/1)")
    assert "evil.example" not in shown.split("href=")[1] if "href=" in shown else True
    assert 'href="//' not in shown and 'href="/syncs/1"' in shown
