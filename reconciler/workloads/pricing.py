"""What a child Job is expected to cost and spends a second, from its backend's own
estimate (the optional `estimate` capability): the shared cost cap's inputs."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from nodus_gitops.providers.base import Estimates

__all__ = ["Estimates", "RATE_PROBE_SECONDS", "estimate", "rate"]

RATE_PROBE_SECONDS = 1_000_000  # the estimate over this long, divided back, is the rate


def estimate(backend: object, spec: dict[str, Any]) -> Decimal | None:
    """The expected cost to completion of a Job with this spec; None when the backend
    cannot tell (no estimate, or neither expectedDuration nor timeout)."""
    if not isinstance(backend, Estimates):
        return None
    try:
        return Decimal(backend.estimate({"kind": "Job", "spec": spec}))
    except (ArithmeticError, ValueError):  # "unknown"
        return None


def rate(backend: object, spec: dict[str, Any]) -> Decimal | None:
    """USD a second while a Job with this spec runs (all its parallel indexes)."""
    uncapped = {k: v for k, v in spec.items() if k != "maxCostUSD"}
    total = estimate(backend, {**uncapped, "expectedDuration": RATE_PROBE_SECONDS})
    return None if total is None else total / RATE_PROBE_SECONDS
