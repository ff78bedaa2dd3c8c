"""Why a binding is Degraded, on its Overview card: the commonest reason among its failed
resources with that reason's message, how many have it, one of them to open, and, for a
reason of the host that runs the backend (SandboxUnavailable), that it is the host's
problem and not the manifests', with the fix the backend recorded. All of it read from
the store's inventory and events, masked and escaped as every dashboard text is."""

from __future__ import annotations

import html
import re
from pathlib import Path

import httpx
import pytest
from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.state.records import InventoryRecord
from nodus_gitops.state.store import Store
from nodus_gitops.web import overview_queries
from nodus_gitops.web.overview_queries import Cause, Failures, cause_of, failures

from tests.web.seed import PROJECT, SHA1, XSS_SCRIPT, Seeded
from tests.web.test_overview import inventory_selects

# As providers/local records it on a host where slirp4netns cannot run (settings.py,
# sandbox.py): the problem as the message, its own fix.
SLIRP_MESSAGE = ("network: shared: slirp4netns (/usr/bin/slirp4netns) cannot give runs a "
                 "network here: [Errno 1] Operation not permitted")
SLIRP_FIX = ("install slirp4netns (apt-get install slirp4netns), or set network: host in "
             "the local backend's config to give runs the host's network, its loopback "
             "services included")
MARKDOWN_LINK = "[x](https://evil)"
HOSTILE_MESSAGE = f"{SLIRP_MESSAGE} {XSS_SCRIPT} {MARKDOWN_LINK}"
ESCAPED_SCRIPT = "&lt;script&gt;alert(1)&lt;/script&gt;"


def put(store: Store, binding: str, kind: str, name: str, phase: str | None,
        reason: str | None = None, message: str | None = None, fix: str | None = None,
        deleted: bool = False, project: str = "team") -> ResourceKey:
    key = ResourceKey(kind, project, name)
    store.upsert_resource(InventoryRecord(
        key=key, binding_id=binding, manifest={"kind": kind, "metadata": {"name": name}},
        spec_hash="h-" + name, provider="local", phase=phase, reason=reason,
        message=message, fix=fix, status={"phase": phase}, deleted=deleted))
    return key


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store.open(state_dir=tmp_path / "state")
    for b in ("examples", "fine", "other"):
        s.upsert_binding(b, f"https://example.com/{b}.git", "main", "", "team")
    yield s
    s.close()


def test_the_commonest_reason_of_a_bindings_failed_resources(store: Store) -> None:
    """The fresh machine's case: both Jobs failed with SandboxUnavailable, the Pipeline
    and the Sweep only point at their children."""
    hello = put(store, "examples", "Job", "hello", "Failed", "SandboxUnavailable",
                SLIRP_MESSAGE, SLIRP_FIX)
    put(store, "examples", "Job", "indexed-outputs", "Failed", "SandboxUnavailable",
        SLIRP_MESSAGE, SLIRP_FIX)
    put(store, "examples", "Pipeline", "train-eval", "Failed", "StageFailed",
        "stage failed: prepare", "read the failed stages' reasons")
    put(store, "examples", "Sweep", "batch-size", "Failed", "CellsFailed",
        "6 of 6 cells failed", "read the failed cells' reasons")
    put(store, "examples", "Job", "gone", "Failed", "OOMKilled", "gone", deleted=True)
    put(store, "fine", "Job", "ok", "Succeeded")
    put(store, "other", "Job", "refused", "CreateFailed", "CreateFailed",
        "quota exceeded", "read the backend's message")

    got = failures(store)
    assert set(got) == {"examples", "other"}  # "fine" has nothing failed
    assert got["examples"] == Failures(
        failed=4, reason="SandboxUnavailable", count=2,
        others=(("CellsFailed", 1), ("StageFailed", 1)), resource=hello, provider="local",
        message=SLIRP_MESSAGE, fix=SLIRP_FIX, cause=Cause.HOST)
    other = got["other"]
    assert (other.failed, other.reason, other.count, other.cause) == (
        1, "CreateFailed", 1, Cause.BACKEND)
    assert other.resource == ResourceKey("Job", "team", "refused")


def test_more_of_a_resource_s_own_reason_wins_over_a_host_reason(store: Store) -> None:
    for name in ("a", "b", "c"):
        put(store, "examples", "Job", name, "Failed", "BackoffLimitExceeded", "exit 1")
    put(store, "examples", "Job", "d", "Failed", "SandboxUnavailable", SLIRP_MESSAGE)
    got = failures(store)["examples"]
    assert (got.reason, got.count, got.failed, got.cause) == (
        "BackoffLimitExceeded", 3, 4, Cause.RESOURCE)
    assert got.others == (("SandboxUnavailable", 1),)
    assert got.resource == ResourceKey("Job", "team", "a")  # the first recorded of the three


def test_a_tie_goes_to_the_host_then_the_backend(store: Store) -> None:
    put(store, "examples", "Job", "a", "Failed", "BackoffLimitExceeded", "exit 1")
    put(store, "examples", "Job", "b", "Failed", "ImagePullFailed", "no image x")
    put(store, "examples", "Job", "c", "Failed", "SandboxUnavailable", SLIRP_MESSAGE)
    assert failures(store)["examples"].reason == "SandboxUnavailable"


def test_only_roll_ups_and_no_reason_at_all(store: Store) -> None:
    put(store, "examples", "Pipeline", "p", "Failed", "StageFailed", "stage failed: x")
    put(store, "examples", "Job", "j", "Failed")  # a backend that recorded no reason
    put(store, "examples", "Job", "k", "Failed")
    got = failures(store)["examples"]
    # The Pipeline's StageFailed names where to look; a resource with no reason does not.
    assert (got.reason, got.count, got.failed) == ("StageFailed", 1, 3)
    assert got.others == ((None, 2),)


def test_the_message_comes_from_the_resource_s_events_when_its_status_has_none(
        store: Store) -> None:
    key = put(store, "examples", "Job", "hello", "Failed", "SandboxUnavailable")
    store.add_event(key, "Normal", "Created", "created on local")
    store.add_event(key, "Warning", "Failed", SLIRP_MESSAGE)
    store.add_event(key, "Normal", "Noted", "later, and not a warning")
    got = failures(store)["examples"]
    assert (got.message, got.fix) == (SLIRP_MESSAGE, None)


def test_nothing_recorded_says_nothing(store: Store) -> None:
    put(store, "examples", "Job", "hello", "Failed", "SandboxUnavailable")
    got = failures(store)["examples"]
    assert (got.message, got.fix) == (None, None)  # never a made-up default


@pytest.mark.parametrize(("reason", "cause"), [
    ("SandboxUnavailable", Cause.HOST),
    ("ImagePullFailed", Cause.BACKEND), ("CreateFailed", Cause.BACKEND),
    ("StorageUnavailable", Cause.BACKEND), ("CapacityUnavailable", Cause.BACKEND),
    ("BackoffLimitExceeded", Cause.RESOURCE), ("OOMKilled", Cause.RESOURCE),
    ("StageFailed", Cause.RESOURCE), (None, Cause.RESOURCE), ("Sideways", Cause.RESOURCE),
])
def test_whose_problem_a_reason_is(reason: str | None, cause: Cause) -> None:
    assert cause_of(reason) is cause


def test_the_failure_query_searches_only_failed_resources(store: Store) -> None:
    """Like the Overview's other reads: never a scan of the inventory's wide rows."""
    put(store, "examples", "Job", "hello", "Failed", "SandboxUnavailable", SLIRP_MESSAGE)
    phases = ("Succeeded", "Running", "Queued", "Cancelled")
    store.upsert_resources([InventoryRecord(
        key=ResourceKey("Job", "team", f"ok-{i}"), binding_id="fine",
        manifest={"kind": "Job", "spec": {"command": ["echo", "x" * 2000]}}, spec_hash="h",
        phase=phases[i % 4], status={"log": "y" * 2000}) for i in range(500)])
    with inventory_selects(store) as seen:
        assert set(overview_queries.failures(store)) == {"examples"}
    assert seen
    with store._engine.connect() as conn:
        for sql, params in seen:
            plan = [row[3] for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql,
                                                           params)]
            assert not any(step.startswith("SCAN inventory") for step in plan), plan


# -- over HTTP: the API and the card ------------------------------------------------------


def fail_on_this_host(s: Seeded, message: str = HOSTILE_MESSAGE, n: int = 3) -> list[str]:
    """`n` Jobs of the seeded ml-team binding failed as on the fresh machine."""
    names = [f"sandboxed-{i}" for i in range(n)]
    for name in names:
        s.store.upsert_resource(InventoryRecord(
            key=ResourceKey("Job", PROJECT, name), binding_id="ml-team",
            manifest={"kind": "Job", "metadata": {"name": name}}, spec_hash="h",
            source_commit=SHA1, provider="local", phase="Failed",
            reason="SandboxUnavailable", message=message, fix=SLIRP_FIX))
    return names


def card(html: str, binding: str) -> str:
    return html.split(f'data-binding="{binding}"', 1)[1].split("</section>", 1)[0]


def text_of(fragment: str) -> str:
    """What a reader sees of an HTML fragment: its text, as the browser shows it."""
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", fragment)))


def why_of(page: str, binding: str = "ml-team") -> str:
    """The card's "Why" (the HTML of its value)."""
    return card(page, binding).split('data-field="failures"', 1)[1].split("</dd>", 1)[0]


def test_the_api_says_why_a_binding_is_degraded(client: httpx.Client, seeded: Seeded) -> None:
    fail_on_this_host(seeded)
    ml = {r["id"]: r for r in client.get("/api/v1/repos").json()}["ml-team"]
    assert ml["failures"] == {
        "failed": 5, "reason": "SandboxUnavailable", "count": 3, "cause": "host",
        "otherReasons": [{"reason": "BackoffLimitExceeded", "count": 1},
                         {"reason": "CellsFailed", "count": 1}],
        "resource": {"kind": "Job", "project": PROJECT, "name": "sandboxed-0",
                     "url": f"/resources/Job/{PROJECT}/sandboxed-0"},
        "provider": "local", "message": HOSTILE_MESSAGE, "fix": SLIRP_FIX}
    assert {r["id"]: r for r in client.get("/api/v1/repos").json()}["ops"]["failures"] is None


def test_the_card_says_why_with_the_message_the_fix_and_a_link(client: httpx.Client,
                                                               seeded: Seeded) -> None:
    fail_on_this_host(seeded)
    page = client.get("/").text
    why = why_of(page)
    shown = text_of(why)
    assert "5 Failed" in shown and "3 of them SandboxUnavailable" in shown
    assert "slirp4netns (/usr/bin/slirp4netns) cannot give runs a network here" in shown
    assert f'href="/resources/Job/{PROJECT}/sandboxed-0"' in why
    assert re.search(r"see <a [^>]*>job/sandboxed-0</a>", why)
    assert ("A problem of the host that runs the local backend, not of the manifests."
            in shown)
    assert f"Fix: {SLIRP_FIX}" in shown
    assert "also 1 BackoffLimitExceeded, 1 CellsFailed" in shown
    # Hostile text is text: no element, no link from Markdown.
    assert ESCAPED_SCRIPT in why and XSS_SCRIPT not in page
    assert MARKDOWN_LINK in shown and "https://evil" not in why.replace(MARKDOWN_LINK, "")
    assert '<a href="https://evil' not in page


def test_a_resource_s_own_reason_is_not_called_the_host_s(client: httpx.Client) -> None:
    """The seed's own failures: a Job that exited non-zero, a Sweep pointing at its cells."""
    why = why_of(client.get("/").text)
    shown = text_of(why)
    assert "2 Failed" in shown and "1 of them BackoffLimitExceeded" in shown
    assert ESCAPED_SCRIPT in why and XSS_SCRIPT in shown  # the Job's message, as text
    assert "host" not in shown and "also 1 CellsFailed" in shown


def test_a_long_message_is_one_line_cut_at_a_word(client: httpx.Client,
                                                  seeded: Seeded) -> None:
    long = "first line of the problem\n" + " ".join(f"word{i}" for i in range(200))
    fail_on_this_host(seeded, message=long)
    ml = card(client.get("/").text, "ml-team")
    shown = re.search(r'<span class="failure-message"[^>]*>([^<]*)</span>', ml)
    assert shown is not None
    line = shown.group(1)
    assert "\n" not in line and line.startswith("first line of the problem word0 ")
    assert line.endswith("…") and len(line) <= 201
    assert re.fullmatch(r".* word\d+…", line)  # cut between words, not inside one


def test_a_secret_in_the_message_is_masked_before_it_is_cut(client: httpx.Client,
                                                            seeded: Seeded) -> None:
    """"hook-secret" is a webhook secret the seed's config names: hidden wherever it
    falls, even where the card's one line would cut it in two."""
    for at in (190, 195, 199):
        fail_on_this_host(seeded, message="x" * at + " hook-secret and more after it")
        ml = card(client.get("/").text, "ml-team")
        assert "hook-s" not in ml and "hook-secret" not in client.get("/api/v1/repos").text


def test_sync_and_health_are_labelled_apart(client: httpx.Client, seeded: Seeded) -> None:
    """The case seen: "Synced" beside "Degraded". Synced says Git's head is applied;
    health says how the resources did: each says which it is."""
    seeded.store.record_poll("ml-team", SHA1, None)  # the applied commit is the head
    fail_on_this_host(seeded)
    ml = card(client.get("/").text, "ml-team")
    rows = dict(re.findall(r"<dt>(.*?)</dt><dd>(.*?)</dd>", ml, re.S))
    labels = [text_of(k) for k in rows]
    sync = next(k for k in labels if k.startswith("Sync"))
    health = next(k for k in labels if k.startswith("Health"))
    assert sync == "Sync Git's head commit applied?"
    assert health == "Health how its resources ran"
    assert re.search(r'data-field="syncStatus"[^>]*>Synced<', ml)
    assert re.search(r'data-field="health"[^>]*>Degraded<', ml)
    assert any(k.startswith("Why") for k in labels)
    assert "Degraded" not in rows[next(k for k in rows if k.startswith("Sync"))]
