"""The gauges of `/metrics` that the store knows, read at each scrape: managed resources by
kind and phase, and each binding's recorded cost."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodus_gitops.web import queries
from prometheus_client.core import GaugeMetricFamily

if TYPE_CHECKING:
    from nodus_gitops.service import Service


class StoreGauges:
    def __init__(self, service: Service) -> None:
        self.service = service

    def describe(self) -> list[GaugeMetricFamily]:
        return list(self._families())

    def collect(self) -> list[GaugeMetricFamily]:
        totals = queries.totals(self.service.store)
        resources, cost = self._families()
        for kind, phase, n in totals.by_kind_phase():
            resources.add_metric([kind, phase], n)
        costs = totals.cost_by_binding()
        for binding in sorted(set(self.service.syncs) | set(costs)):
            cost.add_metric([binding], float(costs.get(binding, 0)))
        return [resources, cost]

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
        return (GaugeMetricFamily("nodus_gitops_resources",
                                  "Managed resources by kind and phase.", labels=("kind", "phase")),
                GaugeMetricFamily("nodus_gitops_cost_usd",
                                  "Recorded cost of a binding's resources, in US dollars.",
                                  labels=("binding",), unit="usd"))
