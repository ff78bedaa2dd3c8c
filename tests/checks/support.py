"""Helpers for the check-writer tests: recorded host responses, a fake clock, API clients."""

from __future__ import annotations

import functools
import json
import random
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from nodus_gitops.checks.model import Annotation, CheckRun
from nodus_gitops.hosts.client import ApiClient, HostLimiter, RetryPolicy, Token

HOSTS = Path(__file__).resolve().parents[1] / "testdata" / "hosts"
SHA = "ce587453ced02b1526dfb4cb910479d431683101"
TOKEN = "tok-3f9a1c7e5b2d"  # a fake, long enough to be recognisable in any output


def recorded(host: str, name: str, *, fields: dict[str, Any] | None = None,
             **replace: str) -> httpx.Response:
    """The response `name` of tests/testdata/hosts/<host>.json; `replace` fills header
    placeholders (e.g. RESET=epoch seconds), `fields` replaces top-level body fields."""
    entry: dict[str, Any] = json.loads((HOSTS / f"{host}.json").read_text())[name]
    headers = {k: replace.get(v, v) for k, v in entry.get("headers", {}).items()}
    body = entry["body"] if fields is None else {**entry["body"], **fields}
    if isinstance(body, str):
        return httpx.Response(entry["status"], text=body, headers=headers)
    return httpx.Response(entry["status"], json=body, headers=headers)


class FakeTime:
    """Monotonic clock, wall clock and sleep that only move when something sleeps."""

    def __init__(self, wall: float = 1_700_000_000.0) -> None:
        self.now = 1000.0
        self.start_wall = wall
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return self.start_wall + (self.now - 1000.0)

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def client(base_url: str, auth: Any, time: FakeTime, *, headers: dict[str, str] | None = None,
           min_interval: float = 0.0, retry: RetryPolicy | None = None,
           setting: str = "checks.test.tokenEnv (TEST_TOKEN)") -> ApiClient:
    return ApiClient(base_url=base_url, token=Token(setting=setting, value=TOKEN), auth=auth,
                     headers=headers or {}, min_interval=min_interval,
                     limiter=HostLimiter(clock=time.monotonic), retry=retry or RetryPolicy(),
                     sleep=time.sleep, wall=time.wall, rng=random.Random(7))


def run(state: str = "success", *, context: str = "nodus/prod/sync", title: str = "Synced",
        summary: str = "3 created, 1 configured", annotations: tuple[Annotation, ...] = (),
        details_url: str | None = "https://nodus.example/repos/team-a",
        commit: str = SHA) -> CheckRun:
    return CheckRun("team-a", "https://github.com/octo-org/gpu-jobs.git", commit, context,
                    state, title, summary, annotations, details_url)


def body(request: httpx.Request) -> Any:
    return json.loads(request.content)


@functools.cache
def app_key_pem() -> str:
    """A GitHub App's private key as GitHub hands it out: RSA, PEM, unencrypted."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(serialization.Encoding.PEM,
                             serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption()).decode()


def app_public_key() -> rsa.RSAPublicKey:
    key = serialization.load_pem_private_key(app_key_pem().encode(), password=None)
    assert isinstance(key, rsa.RSAPrivateKey)
    return key.public_key()


def iso(epoch: float) -> str:
    """An `expires_at` as GitHub writes it."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
