"""The fleet as Prometheus sees it, computed at scrape time from the fleet view and the
allocation cache (the API's own answer, ``core.nodes``), so a scrape is never older than
the view it reads:

- ``fairlane_scheduler_gpus{state}``: GPUs per filter state (every state always present,
  0 included, so alerts on one of them have a series to compare);
- ``fairlane_scheduler_gpus_health_gated``: GPUs whose health gate is shut;
- ``fairlane_scheduler_gpu_score{node,gpu,uuid,model}``: every GPU's latest score;
- ``fairlane_scheduler_outbox_published`` and ``..._outbox_leader``: the relay's work.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from fairlane_scheduler.adapters.outbox import OutboxRelay
from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.core.nodes import node_summaries
from fairlane_scheduler.core.placement import PlacementPolicy

__all__ = ["STATES", "FleetCollector"]

#: The states a GPU can be in for a one-GPU request of any model (the filter's order).
STATES = ("free", "allocated", "cordoned", "stale", "score below threshold", "cooling")


def _label(state: str) -> str:
    return state.replace(" ", "_")


class FleetCollector(Collector):
    def __init__(
        self,
        fleet: FleetView,
        allocated: Callable[[], Collection[str]],
        policy: PlacementPolicy,
        relay: OutboxRelay | None,
        clock_ms: Callable[[], int],
    ) -> None:
        self._fleet = fleet
        self._allocated = allocated
        self._policy = policy
        self._relay = relay
        self._clock_ms = clock_ms

    def collect(self) -> Iterator[Metric]:
        fleet = self._fleet
        counts: Counter[str] = Counter(dict.fromkeys(STATES, 0))
        for summary in node_summaries(fleet, self._allocated(), self._policy, self._clock_ms()):
            counts.update(summary.states)
        by_state = GaugeMetricFamily(
            "fairlane_scheduler_gpus", "GPUs by the placement filter's state", labels=["state"]
        )
        for state, count in sorted(counts.items()):
            by_state.add_metric([_label(state)], count)
        yield by_state
        gated = sum(value == 0 for value in fleet.records.component("health_gate"))
        yield GaugeMetricFamily(
            "fairlane_scheduler_gpus_health_gated",
            "GPUs whose health gate is shut (ECC, row remaps, lost)",
            value=gated,
        )
        score = GaugeMetricFamily(
            "fairlane_scheduler_gpu_score",
            "each GPU's latest capacity score (0..1)",
            labels=["node", "gpu", "uuid", "model"],
        )
        for node, index, uuid, model, value in fleet.records.columns(
            "node", "index", "uuid", "model", "score"
        ):
            score.add_metric([node, str(index), uuid, model], value)
        yield score
        if self._relay is not None:
            yield CounterMetricFamily(
                "fairlane_scheduler_outbox_published",
                "outbox events this replica published to Kafka",
                value=self._relay.published,
            )
            yield GaugeMetricFamily(
                "fairlane_scheduler_outbox_leader",
                "1 while this replica relays the outbox",
                value=int(self._relay.is_leader),
            )
