"""Shares of GPUs that fractional Kubernetes pods hold while in flight (pure).

A pod the extender passed for a share is bound a moment later, in the background: until
then its share counts on the GPU the packing rule chose on each node it passed (one of
them will be kube-scheduler's pick), so the next pod's filter does not offer the same
room twice. Once bound, the share is a placement in Postgres and the ledger
(core/ledger.py) counts it; the flight ends then, when a new filter for the pod replaces
it, when the pod is gone, or after ``in_flight_s`` (it failed a later stage).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from fairlane_scheduler.core.pod import PodShare
from fairlane_scheduler.core.pod_ledger import IN_FLIGHT_S
from fairlane_scheduler.core.shares import GpuUse

__all__ = ["ShareFlights", "add_uses"]


def add_uses(placed: Mapping[str, GpuUse], flying: Mapping[str, GpuUse]) -> dict[str, GpuUse]:
    """What placements and flights hold together, per GPU."""
    use = dict(placed)
    for uuid, more in flying.items():
        was = use.get(uuid, GpuUse(0, 0, 0))
        use[uuid] = GpuUse(
            was.milli + more.milli, was.memory_mib + more.memory_mib, was.tenants + more.tenants
        )
    return use


@dataclass(frozen=True)
class _Flight:
    pod: PodShare
    gpus: Mapping[str, int]  # uuid -> the share's memory on it (MiB), one per node passed
    expires_ms: int


class ShareFlights:
    def __init__(self, in_flight_s: float = IN_FLIGHT_S) -> None:
        self._in_flight_ms = round(in_flight_s * 1000)
        self._flights: dict[str, _Flight] = {}

    def approve(self, uid: str, pod: PodShare, gpus: Mapping[str, int], now_ms: int) -> None:
        """The filter passed ``uid`` with these GPUs (uuid -> MiB): hold their room."""
        self._flights[uid] = _Flight(pod, dict(gpus), now_ms + self._in_flight_ms)

    def flying(self, uid: str) -> PodShare | None:
        """What a pod in flight asked for (None: not in flight here)."""
        flight = self._flights.get(uid)
        return None if flight is None else flight.pod

    def land(self, uid: str) -> None:
        """The pod's flight is over: bound (its placement counts now), gone or failed."""
        self._flights.pop(uid, None)

    def use(self, now_ms: int, exclude: str) -> dict[str, GpuUse]:
        """The room flights hold per GPU, not counting pod ``exclude`` (a pod judged
        again must not compete with its own hold)."""
        for uid in [u for u, f in self._flights.items() if f.expires_ms <= now_ms]:
            del self._flights[uid]
        use: dict[str, GpuUse] = {}
        for uid, flight in self._flights.items():
            if uid != exclude:
                mine = {gpu: GpuUse(flight.pod.milli, mib, 1) for gpu, mib in flight.gpus.items()}
                use = add_uses(use, mine)
        return use

    def unshared_per_node(
        self,
        use: Mapping[str, GpuUse],
        shared: Collection[str],
        node_of: Callable[[str], int | None],
        width: int,
    ) -> npt.NDArray[np.int64]:
        """Per fleet node id, the GPUs flights hold that no placement shares yet: whole
        pods must not count on them."""
        per_node = np.zeros(width, dtype=np.int64)
        for uuid in use.keys() - set(shared):
            if (node := node_of(uuid)) is not None and node < width:
                per_node[node] += 1
        return per_node
