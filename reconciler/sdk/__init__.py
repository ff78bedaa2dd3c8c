"""The Python Sweep SDK of nodus-gitops: `nodus.Sweep(...)` as on the platform, written
to the manifests repository as a commit and read back from the reconciler's JSON API.

    from reconciler import sdk as nodus

    sweep = nodus.Sweep({"image": "nodus/pytorch", "command": ["python", "bench.py"]},
                        grid={"gpu": ["L4", "H100"], "BATCH_SIZE": [8, 16, 32]},
                        repetitions=2, max_parallel=6, max_cost=25).run()
    report = sweep.wait()

Where it writes and reads comes from `nodus.configure(...)` or the environment
(`NODUS_SDK_REPO`, `NODUS_API_URL`, ...; see `Client`).
"""

from reconciler.sdk import errors
from reconciler.sdk.client import Client, configure, default_client
from reconciler.sdk.sweep import Sweep
from reconciler.sdk.views import View

__all__ = ["Client", "Sweep", "View", "configure", "default_client", "errors"]
