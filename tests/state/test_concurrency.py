"""Two processes opening and writing one state database at once, with no errors or losses.

Both start on an empty database at the same moment, so they also race the migration
(BEGIN IMMEDIATE on SQLite, the advisory lock on PostgreSQL), the binding upsert, the
same resources' upserts and the same checks.
"""

from __future__ import annotations

import multiprocessing
import traceback
from typing import Any

from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.state import InventoryRecord, Store
from nodus_gitops.state.migrations import head

WRITES = 200  # per process and per kind of write: 4 x 200 = 800 transactions each
SHARED = [ResourceKey("Job", "proj-a", f"shared-{i}") for i in range(5)]


def _writer(url: str, tag: str, barrier: Any, errors: Any) -> None:
    try:
        barrier.wait(timeout=60)
        with Store.open(url) as store:
            store.upsert_binding("team-a", "https://git.example/a.git", "main", "", "proj-a")
            for i in range(WRITES):
                key = ResourceKey("Job", "proj-a", f"{tag}-{i}")
                store.add_intent("team-a", None, "create", key, "h", f"{tag}-{i}", {"i": i})
                store.add_event(key, "Normal", "Created", f"{tag} wrote {i}")
                shared = SHARED[i % len(SHARED)]
                store.upsert_resource(
                    InventoryRecord(
                        key=shared, binding_id="team-a", manifest={"by": tag, "i": i}, spec_hash="h"
                    )
                )
                store.record_check("team-a", f"c{i}", "nodus/plan", "success", "ok", "gitnotes")
    except BaseException:
        errors.put(f"{tag}: {traceback.format_exc()}")
        raise


def test_two_processes_write_one_database_at_once(state_url: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier, errors = ctx.Barrier(2), ctx.Queue()
    workers = [
        ctx.Process(target=_writer, args=(state_url, tag, barrier, errors)) for tag in ("p1", "p2")
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=240)
    reported = []
    while not errors.empty():
        reported.append(errors.get())
    assert reported == [], "\n".join(reported)
    assert [w.exitcode for w in workers] == [0, 0]

    with Store.open(state_url) as store:
        assert store.schema_version() == head()
        assert len(store.pending_intents()) == 2 * WRITES
        assert len(store.list_events(limit=10 * WRITES)) == 2 * WRITES
        assert [r.key for r in store.list_inventory()] == SHARED
        assert len(store.list_checks()) == WRITES
