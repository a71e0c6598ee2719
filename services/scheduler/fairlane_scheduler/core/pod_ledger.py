"""Which Kubernetes pods hold GPUs on which node, as far as the extender knows (pure).

kube-scheduler judges one pod at a time and binds it later, in the background, so the
next pod's filter can come before the previous pod's binding. Two kinds of entry keep
Fairlane from offering the same GPUs twice:

- *bound*: the pod has a node (Fairlane bound it, or the pod watch saw ``spec.nodeName``);
  its GPUs count on that node until the pod ends.
- *in flight*: Fairlane passed the pod in a filter and no binding came yet; its GPUs count
  on every node it passed (kube-scheduler will pick one of them), until it is bound, a
  new filter for the same pod replaces it, or ``in_flight_s`` passes (the pod failed a
  later stage and was never bound). Pessimistic for those few seconds, never over-committed.

A bound pod's device plugin may pick any free GPU of its node, so its GPUs are counted
against the node's qualifying ones: a node with 5 qualifying GPUs takes two 2-GPU pods,
not four. Node ids are the fleet view's (append-only, so stable).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["IN_FLIGHT_S", "PodGpus", "PodLedger"]

IN_FLIGHT_S = 15.0


@dataclass(frozen=True)
class PodGpus:
    """What one pod asks: GPUs on its node, and the gang it belongs to (``ns/name``)."""

    gpus: int
    gang: str | None = None


@dataclass(frozen=True)
class _InFlight:
    pod: PodGpus
    node_ids: npt.NDArray[np.intp]
    expires_ms: int


class PodLedger:
    def __init__(self, in_flight_s: float = IN_FLIGHT_S) -> None:
        self._in_flight_ms = round(in_flight_s * 1000)
        self._bound: dict[str, tuple[str, PodGpus]] = {}  # uid -> (node, pod)
        self._in_flight: dict[str, _InFlight] = {}
        self._per_node: Counter[str] = Counter()  # GPUs of bound pods, per node name
        self._version = 0  # bumped when bound pods change
        self._cache: tuple[int, int, npt.NDArray[np.int64]] | None = None

    def __len__(self) -> int:
        return len(self._bound)

    def bound_on(self, node: str) -> int:
        """GPUs that bound pods hold on ``node``."""
        return self._per_node[node]

    def approve(self, uid: str, pod: PodGpus, node_ids: npt.NDArray[np.intp], now_ms: int) -> None:
        """The filter passed ``uid`` for these nodes: hold its GPUs there until bound."""
        if uid not in self._bound:
            self._in_flight[uid] = _InFlight(pod, node_ids, now_ms + self._in_flight_ms)

    def flying(self, uid: str) -> PodGpus | None:
        """What a pod in flight asked for (None: not in flight here)."""
        flight = self._in_flight.get(uid)
        return None if flight is None else flight.pod

    def bind(self, uid: str, node: str, pod: PodGpus) -> None:
        self._in_flight.pop(uid, None)
        held = self._bound.get(uid)
        if held == (node, pod):
            return
        if held is not None:
            self._per_node[held[0]] -= held[1].gpus
        self._bound[uid] = (node, pod)
        self._per_node[node] += pod.gpus
        self._version += 1

    def release(self, uid: str) -> None:
        """The pod ended (or is gone, or never got GPUs)."""
        self._in_flight.pop(uid, None)
        held = self._bound.pop(uid, None)
        if held is not None:
            self._per_node[held[0]] -= held[1].gpus
            if self._per_node[held[0]] <= 0:
                del self._per_node[held[0]]
            self._version += 1

    def replace_bound(self, pods: dict[str, tuple[str, PodGpus]]) -> None:
        """Start over from a full listing (the pod watch relisted)."""
        for uid in set(self._bound) - set(pods):
            self.release(uid)
        for uid, (node, pod) in pods.items():
            self.bind(uid, node, pod)

    def held(
        self, node_id: Callable[[str], int | None], width: int, now_ms: int, exclude: str
    ) -> npt.NDArray[np.int64]:
        """GPUs held per fleet node id (bound and in flight), not counting pod ``exclude``
        (a pod filtered again must not compete with its own earlier hold)."""
        if self._cache is None or self._cache[:2] != (self._version, width):
            bound = np.zeros(width, dtype=np.int64)
            for name, gpus in self._per_node.items():
                if (i := node_id(name)) is not None and i < width:
                    bound[i] += gpus
            self._cache = (self._version, width, bound)
        held = self._cache[2]
        expired = [uid for uid, f in self._in_flight.items() if f.expires_ms <= now_ms]
        for uid in expired:
            del self._in_flight[uid]
        others = [f for uid, f in self._in_flight.items() if uid != exclude]
        excluded = self._bound.get(exclude)
        if not others and excluded is None:
            return held
        held = held.copy()
        for flight in others:
            np.add.at(held, flight.node_ids[flight.node_ids < width], flight.pod.gpus)
        if excluded is not None and (i := node_id(excluded[0])) is not None and i < width:
            held[i] -= excluded[1].gpus
        return held

    def gang_members(self, gang: str, exclude: str) -> int:
        """Pods of ``gang`` bound or in flight, other than ``exclude``."""
        bound = sum(1 for uid, (_, p) in self._bound.items() if p.gang == gang and uid != exclude)
        flying = sum(
            1 for uid, f in self._in_flight.items() if f.pod.gang == gang and uid != exclude
        )
        return bound + flying
