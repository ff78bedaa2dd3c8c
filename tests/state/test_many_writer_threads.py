"""Many threads of one process writing one SQLite store at once, as a service's sync
workers, status refresh and lease renewals do: each write waits its turn, however many
are queued before it, and none fails with "database is locked"."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from nodus_gitops.state import Store

THREADS = 16
HELD_S = 0.4  # each thread's transaction: 16 x 0.4 s queue far past the busy timeout


def test_queued_writes_of_one_process_all_commit(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'state.db'}")
    errors: list[str] = []
    start = threading.Barrier(THREADS)

    def writer(n: int) -> None:
        try:
            start.wait(timeout=30)
            with store.batch():
                store.upsert_binding(f"team-{n}", f"https://git.example/{n}.git", "main",
                                     "", f"proj-{n}")
                time.sleep(HELD_S)  # a long transaction: many writes of one sync
        except Exception as exc:  # noqa: BLE001 (each thread's failure is the finding)
            errors.append(f"team-{n}: {exc}")

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    try:
        assert errors == []
        assert len(store.list_bindings()) == THREADS
    finally:
        store.close()
