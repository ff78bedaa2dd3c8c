"""Runs one reconcile of a repo against the DirProvider in its own process, so a test
can kill it at a failpoint (NODUS_GITOPS_FAILPOINT) and run it again.

python -m tests.support.crash_runner STATE_URL STATE_DIR REPO_URL BACKEND_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

from reconciler.config import Binding, Settings
from reconciler.service import Service
from state.store import Store
from tests.support.dir_provider import DirProvider


def main() -> int:
    state_url, state_dir, repo_url, backend = sys.argv[1:5]
    store = Store.open(state_url)
    binding = Binding(id="crash", url=repo_url, branch="main", project="p")
    settings = Settings(state_dir=Path(state_dir), instance="crash", bindings=(binding,))
    service = Service(settings, store, provider_factory=lambda _n: DirProvider(Path(backend)))
    report = service.reconcile("crash", force=True)
    print(report.result if report else "busy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
