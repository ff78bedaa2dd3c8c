"""Prometheus metrics: a tiny thread-safe in-process registry of labelled counters and
histograms, and their text exposition (format 0.0.4).

The sync loop reports through three functions, `observe_sync`, `observe_fetch` and
`count_provider`, which write to the process's default registry `REGISTRY`; `/metrics`
renders it together with gauges the web layer computes from the store at scrape time
(`render(gauges)`). No dependency: the few metric types needed fit in this module.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

Labels = tuple[tuple[str, str], ...]

DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: Labels, extra: Labels = ()) -> str:
    items = (*labels, *extra)
    if not items:
        return ""
    return "{" + ",".join(f'{k}="{_escape(str(v))}"' for k, v in items) + "}"


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


@dataclass
class Counter:
    name: str
    help: str
    label_names: tuple[str, ...]
    _values: dict[Labels, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        key = _key(self, labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def value(self, **labels: str) -> float:
        with self._lock:
            return self._values.get(_key(self, labels), 0.0)

    def lines(self) -> list[str]:
        with self._lock:
            values = sorted(self._values.items())
        return [f"{self.name}{_labels(k)} {_number(v)}" for k, v in values]

    type = "counter"


@dataclass
class Histogram:
    name: str
    help: str
    label_names: tuple[str, ...]
    buckets: Sequence[float] = DURATION_BUCKETS
    _series: dict[Labels, list[float]] = field(default_factory=dict)  # counts..., sum, count
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def observe(self, value: float, **labels: str) -> None:
        key = _key(self, labels)
        with self._lock:
            series = self._series.setdefault(key, [0.0] * (len(self.buckets) + 2))
            for i, bound in enumerate(self.buckets):
                if value <= bound:
                    series[i] += 1
            series[-2] += value
            series[-1] += 1

    def count(self, **labels: str) -> float:
        with self._lock:
            series = self._series.get(_key(self, labels))
            return series[-1] if series else 0.0

    def lines(self) -> list[str]:
        with self._lock:
            items = sorted((k, list(v)) for k, v in self._series.items())
        out = []
        for key, series in items:
            for bound, n in zip(self.buckets, series, strict=False):
                out.append(f"{self.name}_bucket{_labels(key, (('le', _number(bound)),))} "
                           f"{_number(n)}")
            out.append(f"{self.name}_bucket{_labels(key, (('le', '+Inf'),))} "
                       f"{_number(series[-1])}")
            out.append(f"{self.name}_sum{_labels(key)} {_number(series[-2])}")
            out.append(f"{self.name}_count{_labels(key)} {_number(series[-1])}")
        return out

    type = "histogram"


def _key(metric: Counter | Histogram, labels: dict[str, str]) -> Labels:
    if set(labels) != set(metric.label_names):
        raise ValueError(f"{metric.name} takes labels {metric.label_names}, not {tuple(labels)}")
    return tuple((n, str(labels[n])) for n in metric.label_names)


@dataclass(frozen=True)
class Gauge:
    """A value computed at scrape time: one sample per label set."""

    name: str
    help: str
    samples: Iterable[tuple[dict[str, str], float]]


class Registry:
    """The metrics of one process; every method is safe to call from any thread."""

    def __init__(self) -> None:
        self.syncs = Counter("nodus_gitops_syncs_total", "Syncs finished, by binding and result.",
                             ("binding", "result"))
        self.sync_seconds = Histogram("nodus_gitops_sync_duration_seconds",
                                      "Time one sync of a binding took.", ("binding",))
        self.fetch_seconds = Histogram("nodus_gitops_git_fetch_duration_seconds",
                                       "Time polling and fetching a binding's remote took.",
                                       ("binding",))
        self.provider_requests = Counter("nodus_gitops_provider_requests_total",
                                         "Calls made to a compute provider.",
                                         ("provider", "operation"))
        self.provider_errors = Counter("nodus_gitops_provider_errors_total",
                                       "Provider calls that failed, by error kind.",
                                       ("provider", "operation", "kind"))
        self._metrics: tuple[Counter | Histogram, ...] = (
            self.syncs, self.sync_seconds, self.fetch_seconds, self.provider_requests,
            self.provider_errors)

    def render(self, gauges: Iterable[Gauge] = ()) -> str:
        lines: list[str] = []
        for m in self._metrics:
            lines += [f"# HELP {m.name} {m.help}", f"# TYPE {m.name} {m.type}", *m.lines()]
        for g in gauges:
            lines += [f"# HELP {g.name} {g.help}", f"# TYPE {g.name} gauge"]
            for labels, value in g.samples:
                key = tuple(sorted((k, str(v)) for k, v in labels.items()))
                lines.append(f"{g.name}{_labels(key)} {_number(value)}")
        return "\n".join(lines) + "\n"


REGISTRY = Registry()
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def observe_sync(binding: str, result: str, seconds: float) -> None:
    """A sync of `binding` finished with `result` after `seconds`."""
    REGISTRY.syncs.inc(binding=binding, result=result)
    REGISTRY.sync_seconds.observe(seconds, binding=binding)


def observe_fetch(binding: str, seconds: float) -> None:
    """Polling (and fetching, when the branch moved) `binding`'s remote took `seconds`."""
    REGISTRY.fetch_seconds.observe(seconds, binding=binding)


def count_provider(provider: str, operation: str, error_kind: str | None = None) -> None:
    """One call to `provider`; `error_kind` (e.g. transient, permanent) when it failed."""
    REGISTRY.provider_requests.inc(provider=provider, operation=operation)
    if error_kind is not None:
        REGISTRY.provider_errors.inc(provider=provider, operation=operation, kind=error_kind)


def render(gauges: Iterable[Gauge] = ()) -> str:
    return REGISTRY.render(gauges)
