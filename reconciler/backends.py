"""Composition-root helper: the backend a binding drives, built from its settings.

`build_backend` asks the providers' registry for the raw backend and wraps it in the
workload controllers (`CompositeProvider`), which run Pipelines and Sweeps as Jobs where
the backend does not know them. The service adds the metrics wrapper itself
(`MeteredProvider`), once per backend. Both wrappers keep the backend's optional
capabilities (`providers.base.Wrapper`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nodus_gitops.providers.base import Provider
from nodus_gitops.providers.registry import build
from nodus_gitops.workloads import CompositeProvider


def build_backend(name: str, settings: Mapping[str, Any], state_dir: Path) -> Provider:
    """`providers.<name>` as a provider of every kind (state kept under `state_dir`)."""
    return CompositeProvider(build(name, settings, state_dir), Path(state_dir) / "workloads")
