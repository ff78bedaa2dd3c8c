"""Prometheus metrics, kept by prometheus_client.

The sync loop reports through three functions, `observe_sync`, `observe_fetch` and
`count_provider`, which write to the process's registry `REGISTRY`. `/metrics` serves a
`scrape_registry`: those series and collectors the web layer adds (gauges it reads from
the store at scrape time), in the text format of `generate_latest` with `CONTENT_TYPE`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
CONTENT_TYPE = CONTENT_TYPE_LATEST


class Metrics:
    """The reconciler's own series, registered on `registry` (thread-safe, as
    prometheus_client's metrics are)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.syncs = Counter("nodus_gitops_syncs_total", "Syncs finished, by binding and result.",
                             ("binding", "result"), registry=registry)
        self.sync_seconds = Histogram("nodus_gitops_sync_duration_seconds",
                                      "Time one sync of a binding took.", ("binding",),
                                      unit="seconds", buckets=DURATION_BUCKETS,
                                      registry=registry)
        self.fetch_seconds = Histogram("nodus_gitops_git_fetch_duration_seconds",
                                       "Time polling and fetching a binding's remote took.",
                                       ("binding",), unit="seconds", buckets=DURATION_BUCKETS,
                                       registry=registry)
        self.provider_requests = Counter("nodus_gitops_provider_requests_total",
                                         "Calls made to a compute provider.",
                                         ("provider", "operation"), registry=registry)
        self.provider_errors = Counter("nodus_gitops_provider_errors_total",
                                       "Provider calls that failed, by error kind.",
                                       ("provider", "operation", "kind"), registry=registry)


# The one process-wide registry. It stays module-level because the sync loop and the
# metered provider report through the plain functions below, with no registry handed to
# them; it is an explicit object of this module, never prometheus_client's default
# REGISTRY (which would also collect whatever else the process registers there).
REGISTRY = CollectorRegistry()
PROCESS = Metrics(REGISTRY)


def observe_sync(binding: str, result: str, seconds: float) -> None:
    """A sync of `binding` finished with `result` after `seconds`."""
    PROCESS.syncs.labels(binding=binding, result=result).inc()
    PROCESS.sync_seconds.labels(binding=binding).observe(seconds)


def observe_fetch(binding: str, seconds: float) -> None:
    """Polling (and fetching, when the branch moved) `binding`'s remote took `seconds`."""
    PROCESS.fetch_seconds.labels(binding=binding).observe(seconds)


def count_provider(provider: str, operation: str, error_kind: str | None = None) -> None:
    """One call to `provider`; `error_kind` (e.g. transient, permanent) when it failed."""
    PROCESS.provider_requests.labels(provider=provider, operation=operation).inc()
    if error_kind is not None:
        PROCESS.provider_errors.labels(provider=provider, operation=operation,
                                       kind=error_kind).inc()


class _WithoutCreated:
    """A registry's families without the `_created` samples prometheus_client adds to
    counters and histograms: the text format carries them as extra gauge series
    (`..._created`) that nothing here reads, and leaving them out keeps the library's own
    switch for it (a process-wide flag) untouched."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            kept = Metric(family.name, family.documentation, family.type, family.unit)
            kept.samples = [s for s in family.samples
                            if s.name != f"{family.name}_created"]
            yield kept


def scrape_registry(collectors: Iterable[Collector] = (),
                    registry: CollectorRegistry = REGISTRY) -> CollectorRegistry:
    """What one `/metrics` endpoint serves: `registry`'s series and `collectors`' (e.g.
    gauges read from the store at scrape time). A registry of its own, so that a server's
    collectors are never added to the process's `REGISTRY`; nothing is collected before
    a scrape (no auto-describe)."""
    scrape = CollectorRegistry(auto_describe=False)
    scrape.register(_WithoutCreated(registry))
    for collector in collectors:
        scrape.register(collector)
    return scrape


def render(registry: Collector) -> bytes:
    """`registry`'s series in the Prometheus text format."""
    return generate_latest(registry)
