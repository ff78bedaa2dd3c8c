"""Masking as a reader meets it through the real server: a Job whose env carries a bearer
token and whose args and message carry secrets the config names (the seeded settings'
webhook secret and a repository URL's password), read as its page and as its document."""

from __future__ import annotations

import html

import httpx
import pytest
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.state.records import InventoryRecord

from tests.web.seed import PROJECT, Seeded

BEARER = "Bearer sk-live-abc123def456"
HOOK_SECRET = "hook-secret"  # checks.webhooks.github in the seeded settings
URL_PASSWORD = "s3cret"  # the ops binding's https://user:s3cret@... URL


@pytest.fixture
def leaky(seeded: Seeded) -> Seeded:
    manifest = {"apiVersion": "nodus.dev/v1", "kind": "Job", "metadata": {"name": "leaky"},
                "spec": {"image": "python:3.12", "env": {"AUTH": BEARER, "LOG_LEVEL": "debug"},
                         "command": ["python", "notify.py", "--sign", HOOK_SECRET, "--lr",
                                     "0.1"]}}
    seeded.store.upsert_resource(InventoryRecord(
        key=ResourceKey("Job", PROJECT, "leaky"), binding_id="ml-team", manifest=manifest,
        spec_hash="h", phase="Failed", reason="Error",
        message=f"push to https://user:{URL_PASSWORD}@gitlab.com/acme/ops.git refused",
        status={"message": f"signature {HOOK_SECRET} refused"}))
    return seeded


def test_the_resource_page_hides_them_and_keeps_the_command(leaky: Seeded,
                                                            client: httpx.Client) -> None:
    page = html.unescape(client.get(f"/resources/Job/{PROJECT}/leaky").text)
    for secret in ("sk-live-abc123def456", HOOK_SECRET):
        assert secret not in page, secret
    assert "notify.py" in page and "--sign" in page and "LOG_LEVEL" in page


def test_the_resource_pages_message_hides_a_url_password(leaky: Seeded,
                                                         client: httpx.Client) -> None:
    page = html.unescape(client.get(f"/resources/Job/{PROJECT}/leaky").text)
    assert URL_PASSWORD not in page


def test_the_api_document_hides_them(leaky: Seeded, client: httpx.Client) -> None:
    body = client.get(f"/api/v1/resources/Job/{PROJECT}/leaky").text
    for secret in ("sk-live-abc123def456", HOOK_SECRET, URL_PASSWORD):
        assert secret not in body, secret


def test_the_api_document_hides_the_bearer_token(leaky: Seeded,
                                                 client: httpx.Client) -> None:
    doc = client.get(f"/api/v1/resources/Job/{PROJECT}/leaky").json()
    assert doc["manifest"]["spec"]["env"] == {"AUTH": "********", "LOG_LEVEL": "debug"}
