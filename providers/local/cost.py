"""Cost accounting with the local rate card: the rate of one run, money formatting,
and the plan's estimate (rate x expectedDuration, or x timeout as an upper bound)."""

from __future__ import annotations

from typing import Any

from nodus_gitops.providers.local.config import RateCard
from nodus_gitops.providers.local.jobstate import format_usd
from nodus_gitops.providers.local.spec import JobSpec, SpecError, parse_job


def run_rate(spec: JobSpec, rates: RateCard,
             gpu_types: list[str | None] | None = None) -> float:
    """USD per second for one running index of this Job: its GPUs priced by the types
    it asked for, or by `gpu_types`, those of the slots it was placed on."""
    if gpu_types is None:
        gpu_types = [spec.gpu.type] * spec.gpu.count if spec.gpu else []
    return rates.per_second(spec.cpu, spec.memory, gpu_types)


def estimate(manifest: dict[str, Any], rates: RateCard | None = None) -> str:
    """The expected cost to completion in USD, for the plan: `parallelism` indexes (a
    gang: all its ranks) run for the Job's `expectedDuration` (or, failing that, its
    whole `timeout`, an upper bound), capped by maxCostUSD; `unknown` without either
    duration."""
    rates = rates or RateCard()
    try:
        spec = parse_job(manifest)
    except SpecError:
        return "unknown"
    duration = spec.expected_duration if spec.expected_duration is not None else spec.timeout
    if duration is None:
        return "unknown"
    total = run_rate(spec, rates) * duration * spec.parallelism * spec.members  # a gang: every rank
    if spec.max_cost is not None:
        total = min(total, float(spec.max_cost))
    return format_usd(round(total, 6))
