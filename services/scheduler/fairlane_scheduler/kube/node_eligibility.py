"""Tells kube-scheduler when a node's GPUs change eligibility, so that pods it held back
are tried again: every ``interval_s`` the per-node summaries are refreshed (the
extender's own, core/node_summary.py) and each Node whose count of GPUs free to take
(qualifying, and held neither by a placement nor by a Kubernetes pod) changed since it
was last written gets it in the ``fairlane.dev/eligible-gpus`` annotation (a merge patch
of its metadata; RBAC: ``patch nodes``).

Why an annotation: kube-scheduler (v1.37, pkg/scheduler/schedule_one.go) puts a pod that
an extender rejected in the unschedulable pool with the pseudo-plugin ``Extender``, which
registers for every cluster event; an annotation change is a Node update event
(``UpdateNodeAnnotation``), so the pod goes back to the queue after its backoff. Without
it, a pod refused because a node's GPUs were cooling waited for an unrelated event or the
5-minute flush, although Fairlane readmitted the GPUs the moment the stabilization window
ended. Pod holds count because Fairlane learns that a pod ended through its watch, after
kube-scheduler did: a pod tried in between is refused on GPUs that are in fact free, and
the release is then the only event that can send it back. A count that falls is
written too, so the annotation always says what Fairlane passes (users may read it;
decisions never do).

Every replica writes; the value is the same fleet's, so a second write of the same value
changes nothing (no event). A Node that Kubernetes does not have (404) is not retried
until its count changes again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from fairlane_runtime.outage import OutageLog
from fairlane_runtime.periodic import Periodic
from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.core.node_states import FREE
from fairlane_scheduler.core.node_summary import NodeSummaries
from fairlane_scheduler.core.placement import PlacementPolicy
from fairlane_scheduler.core.pod_ledger import PodLedger
from fairlane_scheduler.kube.client import KubeApiError, KubeClient

__all__ = ["ELIGIBLE_ANNOTATION", "EligibilityAnnotator"]

log = logging.getLogger("fairlane.scheduler.node_eligibility")

ELIGIBLE_ANNOTATION = "fairlane.dev/eligible-gpus"
_MERGE_PATCH = "application/merge-patch+json"


class EligibilityAnnotator:
    """``start()`` and ``stop()`` run :meth:`annotate` every ``interval_s``."""

    def __init__(
        self,
        client: KubeClient,
        *,
        fleet: FleetView,
        summaries: NodeSummaries,
        ledger: PodLedger,
        policy: PlacementPolicy,
        clock_ms: Callable[[], int],
        outage: OutageLog,
        interval_s: float = 2.0,
    ) -> None:
        self._client = client
        self._fleet = fleet
        self._summaries = summaries
        self._ledger = ledger
        self._policy = policy
        self._clock_ms = clock_ms
        self._written: dict[str, int] = {}  # node -> the count it carries (or 404'd with)
        loop = Periodic("node-eligibility", self.annotate, interval_s, outage)
        self.start, self.stop = loop.start, loop.stop

    async def annotate(self) -> None:
        """Write the count of every node whose count changed."""
        summaries, now = self._summaries, self._clock_ms()
        summaries.refresh(self._fleet, self._policy, now)
        names = self._fleet.nodes[: summaries.unknown]
        # The extender's width, so both read the ledger's one cached array.
        held = self._ledger.held(self._fleet.node_id, len(self._fleet.nodes), now, exclude="")
        counts = np.maximum(summaries.tally[: len(names), FREE] - held[: len(names)], 0)
        written = np.fromiter((self._written.get(n, -1) for n in names), np.int64, len(names))
        for i in np.flatnonzero(counts != written).tolist():
            name, count = names[i], int(counts[i])
            body = {"metadata": {"annotations": {ELIGIBLE_ANNOTATION: str(count)}}}
            try:
                await self._client.request(
                    "PATCH", f"/api/v1/nodes/{name}", body, content_type=_MERGE_PATCH
                )
            except KubeApiError as exc:
                if exc.status != 404:
                    raise
                log.debug("node %s: not in Kubernetes", name)
            self._written[name] = count
