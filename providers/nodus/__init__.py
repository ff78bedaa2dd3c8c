"""The Nodus API backend: Job, Pipeline and Sweep run natively by the platform.

`NodusProvider` (provider.py) speaks the Kubernetes-style API; `NodusConfig` (config.py)
reads the `providers.<name>` settings and the kubeconfig; errors.py maps the API's
`Status` answers to the reconciler's errors in one place.
"""

from nodus_gitops.providers.nodus.config import NodusConfig
from nodus_gitops.providers.nodus.errors import InvalidManifest, causes_to_problems
from nodus_gitops.providers.nodus.provider import DryRunResult, NodusProvider

__all__ = ["DryRunResult", "InvalidManifest", "NodusConfig", "NodusProvider",
           "causes_to_problems"]
