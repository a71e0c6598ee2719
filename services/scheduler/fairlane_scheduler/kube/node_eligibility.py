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

Shares of GPUs (issue 29) get the same: ``fairlane.dev/shared-gpu-free`` is the room,
in thousandths of a GPU, that the node's shared GPUs have left (their placements' shares
taken from 1000 each), so a fractional pod refused for want of room is tried again when
a share on the node ends, not only when a whole GPU frees.

Every replica writes; the value is the same fleet's, so a second write of the same value
changes nothing (no event). A Node that Kubernetes does not have (404) is not retried
until its count changes again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

import numpy as np

from fairlane_runtime.outage import OutageLog
from fairlane_runtime.periodic import Periodic
from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.core.node_states import FREE
from fairlane_scheduler.core.node_summary import NodeSummaries
from fairlane_scheduler.core.placement import PlacementPolicy
from fairlane_scheduler.core.pod_ledger import PodLedger
from fairlane_scheduler.kube.client import KubeApiError, KubeClient

__all__ = ["ELIGIBLE_ANNOTATION", "SHARED_FREE_ANNOTATION", "EligibilityAnnotator"]

log = logging.getLogger("fairlane.scheduler.node_eligibility")

ELIGIBLE_ANNOTATION = "fairlane.dev/eligible-gpus"
SHARED_FREE_ANNOTATION = "fairlane.dev/shared-gpu-free"
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
        shared_free: Callable[[], Mapping[str, int]],
        clock_ms: Callable[[], int],
        outage: OutageLog,
        interval_s: float = 2.0,
    ) -> None:
        """``shared_free``: per node, the thousandths its shared GPUs have left."""
        self._client = client
        self._fleet = fleet
        self._summaries = summaries
        self._ledger = ledger
        self._policy = policy
        self._shared_free = shared_free
        self._clock_ms = clock_ms
        #: node -> the count and shared room it carries (or 404'd with)
        self._written: dict[str, tuple[int, int]] = {}
        loop = Periodic("node-eligibility", self.annotate, interval_s, outage)
        self.start, self.stop = loop.start, loop.stop

    async def annotate(self) -> None:
        """Write the count and shared room of every node where either changed."""
        summaries, now = self._summaries, self._clock_ms()
        summaries.refresh(self._fleet, self._policy, now)
        names = self._fleet.nodes[: summaries.unknown]
        # The extender's width, so both read the ledger's one cached array.
        held = self._ledger.held(self._fleet.node_id, len(self._fleet.nodes), now, exclude="")
        counts = np.maximum(summaries.tally[: len(names), FREE] - held[: len(names)], 0)
        shared = self._shared_free()
        room = np.fromiter((shared.get(n, 0) for n in names), np.int64, len(names))
        old = [self._written.get(n, (-1, -1)) for n in names]
        written = np.array(old, np.int64).reshape(-1, 2)
        changed = (counts != written[:, 0]) | (room != written[:, 1])
        for i in np.flatnonzero(changed).tolist():
            name, count, free = names[i], int(counts[i]), int(room[i])
            values = {ELIGIBLE_ANNOTATION: str(count), SHARED_FREE_ANNOTATION: str(free)}
            body = {"metadata": {"annotations": values}}
            try:
                await self._client.request(
                    "PATCH", f"/api/v1/nodes/{name}", body, content_type=_MERGE_PATCH
                )
            except KubeApiError as exc:
                if exc.status != 404:
                    raise
                log.debug("node %s: not in Kubernetes", name)
            self._written[name] = (count, free)
