"""Runs one reconcile of a repo against the DirProvider in its own process, so a test
can kill it at a failpoint (NODUS_GITOPS_FAILPOINT) and run it again.

python -m tests.support.crash_runner STATE_URL STATE_DIR REPO_URL BACKEND_DIR [REPLICA]

With REPLICA, it runs as that replica under a 1 s lease: it first waits until it holds
the binding (a killed replica's lease expires), as a second replica taking over would.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from nodus_gitops.config import Binding, Settings
from nodus_gitops.leases import LeaseKeeper
from nodus_gitops.state.store import Store
from nodus_gitops.wiring import build_service

from tests.support.dir_provider import DirProvider


def main() -> int:
    state_url, state_dir, repo_url, backend = sys.argv[1:5]
    replica = sys.argv[5] if len(sys.argv) > 5 else None
    store = Store.open(state_url)
    binding = Binding(id="crash", url=repo_url, branch="main", project="p")
    settings = Settings(state_dir=Path(state_dir), instance="crash", bindings=(binding,))
    service = build_service(settings, store, provider_factory=lambda _n: DirProvider(Path(backend)))
    service.follow_up = False
    if replica:
        service.leases = LeaseKeeper(store, service.syncs, replica=replica, ttl=1.0)
        deadline = time.monotonic() + 15
        while not service.leases.holds("crash"):
            if time.monotonic() > deadline:
                print("never got the lease")
                return 1
            service.keep_leases()
            time.sleep(0.2)
    report = service.reconcile("crash", force=True)
    print(report.result if report else "busy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
