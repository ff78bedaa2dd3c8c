"""The Python Sweep SDK of nodus-gitops: `nodus.Sweep(...)` as on the platform, written
to the manifests repository as a commit and read back from the reconciler's JSON API.

    from nodus_gitops import sdk as nodus

    sweep = nodus.Sweep({"image": "nodus/pytorch", "command": ["python", "bench.py"]},
                        grid={"gpu": ["L4", "H100"], "BATCH_SIZE": [8, 16, 32]},
                        repetitions=2, max_parallel=6, max_cost=25).run()
    report = sweep.wait()

Where it writes and reads comes from `nodus.configure(...)` or the environment
(`NODUS_SDK_REPO`, `NODUS_API_URL`, ...; see `Client`).
"""

from nodus_gitops.sdk import errors
from nodus_gitops.sdk.client import Client, configure, default_client
from nodus_gitops.sdk.sweep import Sweep
from nodus_gitops.sdk.views import View

__all__ = ["Client", "Sweep", "View", "configure", "default_client", "errors"]
