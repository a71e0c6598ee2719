"""The fractional-packing study (issue 29), pure: FGD's own experiment on Alibaba's trace.

Pods drawn from the trace (with replacement, seeded) arrive one after another on the
trace's own GPU nodes until the GPU demand that has arrived reaches ``max_load`` x the
cluster's GPUs; nothing departs. A pod that cannot be placed when it arrives fails
(pending, never retried). At each load checkpoint the run records:

- ``unallocated``: the cluster's free GPU share over its capacity;
- ``fragmented``: the part of it the workload cannot use, ``sum_n F_n / capacity`` with
  FGD's measure (``fragmentation_by_node``) for the trace's own mix;
- ``failed_pods`` and ``failed_demand``: pods (and their GPUs' worth, over capacity)
  that found no room so far.

Only the rule for fractional pods differs between runs: it is the scheduler's own
``rank_rooms`` (fgd, best-fit, first-fit); ``fgd-cpu``, the paper's full FGD: the same
``rank_rooms`` given every node's free CPUs (a table with a CPU view) and a mix whose
shapes carry their CPUs (the caller's, see ``CPU_VIEW_RULES``); or one of two
baselines: ``node-best-fit``, the Best-fit of FGD's paper (the node left with the least
free GPU share, and CPUs when packed, then its tightest GPU), and ``random`` (any GPU
with room, uniformly).
Whole-GPU pods, one or many GPUs, all go by one rule: the node with the fewest entirely
free GPUs that still has enough, then its lowest-index free GPUs (best fit on free GPUs,
which keeps large free nodes for large pods). CPUs are packed only with
``StudyConfig.pack_cpu`` (else ``fgd-cpu`` sees every node's CPUs free), host memory never;
GPU memory follows the share (every ask takes ``floor(share x memory)``), so it never
binds. ``fragmented`` is the GPU-only measure for every rule, CPU view or not.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from fairlane_eval.core.alibaba_gpu import TraceNode, TracePod
from fairlane_scheduler.core.sharing import (
    SHARING_RULES,
    WHOLE_MILLI,
    RoomTable,
    ShareAsk,
    SharingRule,
    WorkloadMix,
    fragmentation_by_node,
    rank_rooms,
)

__all__ = [
    "CPU_VIEW_RULES",
    "STUDY_RULES",
    "LoadPoint",
    "StudyConfig",
    "StudyRule",
    "StudyRun",
    "draw_arrivals",
    "run_study",
]

StudyRule = Literal["fgd", "fgd-cpu", "best-fit", "first-fit", "node-best-fit", "random"]
STUDY_RULES: tuple[StudyRule, ...] = (
    "fgd",
    "fgd-cpu",
    "best-fit",
    "first-fit",
    "node-best-fit",
    "random",
)
#: The rules that see the nodes' free CPUs; their mix should carry the shapes' CPUs.
CPU_VIEW_RULES: tuple[StudyRule, ...] = ("fgd-cpu",)
# The product rule whose ranking each study rule takes: the baselines choose among it,
# node-best-fit breaking its ties by the tightest GPU, random ignoring the order.
_SHARING_RULE_UNDER: dict[StudyRule, SharingRule] = {
    **{rule: rule for rule in SHARING_RULES},
    "fgd-cpu": "fgd",
    "node-best-fit": "best-fit",
    "random": "first-fit",
}
# Memory follows the share here (the trace has no GPU memory requests), so its size only
# needs to be one that ``floor(share x memory)`` keeps exact enough.
_NOMINAL_MEMORY_MIB = 16_384

Ints = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]
Floats = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class StudyConfig:
    max_load: float = 1.3
    load_step: float = 0.05
    pack_cpu: bool = False

    def __post_init__(self) -> None:
        if not 0 < self.load_step <= self.max_load:
            raise ValueError(
                f"want 0 < load_step <= max_load, got {self.load_step}, {self.max_load}"
            )

    def checkpoints(self) -> tuple[float, ...]:
        count = round(self.max_load / self.load_step)
        return tuple(round((i + 1) * self.load_step, 6) for i in range(count))


@dataclass(frozen=True, slots=True)
class LoadPoint:
    load: float
    unallocated: float
    fragmented: float
    failed_pods: int
    failed_demand: float


@dataclass(frozen=True, slots=True)
class StudyRun:
    rule: StudyRule
    seed: int
    arrived_pods: int
    points: tuple[LoadPoint, ...]


def draw_arrivals(
    pods: Sequence[TracePod], capacity_gpus: int, max_load: float, rng: np.random.Generator
) -> list[TracePod]:
    """Pods drawn uniformly with replacement until their GPU demand reaches
    ``max_load x capacity_gpus``."""
    drawn: list[TracePod] = []
    demand, target = 0.0, max_load * capacity_gpus
    while demand < target:
        for index in rng.integers(0, len(pods), size=256):
            if demand >= target:
                break
            drawn.append(pods[int(index)])
            demand += pods[int(index)].gpu_demand
    return drawn


class _Cluster:
    """The GPUs' state, one row per GPU, nodes numbered in the node list's order; with
    ``pack_cpu`` a pod goes only to a node with its CPUs free (kube-scheduler's filter)."""

    def __init__(self, nodes: Sequence[TraceNode], *, pack_cpu: bool) -> None:
        self.node = np.repeat(np.arange(len(nodes)), [n.gpus for n in nodes]).astype(np.int64)
        size = len(self.node)
        self.used_milli = np.zeros(size, dtype=np.int64)
        self.used_memory_mib = np.zeros(size, dtype=np.int64)
        self.tenants = np.zeros(size, dtype=np.int64)
        self.free_cpu_milli = np.array([n.cpu_milli for n in nodes], dtype=np.int64)
        self._pack_cpu = pack_cpu
        self._memory_mib = np.full(size, _NOMINAL_MEMORY_MIB, dtype=np.int64)
        self._capacity = np.ones(size, dtype=np.float64)
        self._largest_gpu_milli = max(n.gpus for n in nodes) * WHOLE_MILLI
        self._largest_cpu_milli = max(n.cpu_milli for n in nodes)

    def table(self, rows: Ints | slice = slice(None), *, cpu_view: bool = False) -> RoomTable:
        return RoomTable(
            self.node[rows],
            self.used_milli[rows],
            self.used_memory_mib[rows],
            self._memory_mib[rows],
            self.tenants[rows],
            self._capacity[rows],
            self.free_cpu_milli if cpu_view else None,
        )

    def place(
        self, pod: TracePod, rule: StudyRule, mix: WorkloadMix, rng: np.random.Generator
    ) -> bool:
        """Places ``pod`` if it fits; whether it did."""
        has_cpu = self.free_cpu_milli >= (pod.cpu_milli if self._pack_cpu else 0)
        if pod.is_fractional:
            rows = self._choose_share(pod, has_cpu, rule, mix, rng)
        else:
            rows = self._choose_whole(pod.gpus, has_cpu)
        if rows is None:
            return False
        self.used_milli[rows] += pod.milli
        self.used_memory_mib[rows] += (pod.milli * self._memory_mib[rows]) // WHOLE_MILLI
        self.tenants[rows] += int(pod.is_fractional)
        if self._pack_cpu:
            self.free_cpu_milli[self.node[rows[0]]] -= pod.cpu_milli
        return True

    def _choose_whole(self, gpus: int, has_cpu: Bools) -> Ints | None:
        free = self.used_milli == 0
        free_per_node = np.bincount(self.node, weights=free, minlength=len(has_cpu))
        fitting = np.flatnonzero((free_per_node >= gpus) & has_cpu)
        if len(fitting) == 0:
            return None
        node = fitting[np.argmin(free_per_node[fitting])]
        return np.flatnonzero(free & (self.node == node))[:gpus]

    def _choose_share(
        self,
        pod: TracePod,
        has_cpu: Bools,
        rule: StudyRule,
        mix: WorkloadMix,
        rng: np.random.Generator,
    ) -> Ints | None:
        allowed = np.flatnonzero(has_cpu[self.node])
        table = self.table(allowed, cpu_view=rule in CPU_VIEW_RULES)
        ask = ShareAsk(pod.milli, cpu_milli=pod.cpu_milli)
        ranked = rank_rooms(table, ask, mix, _SHARING_RULE_UNDER[rule])
        if len(ranked) == 0:
            return None
        if rule == "random":
            pick = int(rng.choice(ranked))
        elif rule == "node-best-fit":
            pick = int(ranked[np.argmin(self._left_after(pod)[table.node[ranked]])])
        else:
            pick = int(ranked[0])
        return allowed[pick : pick + 1]

    def _left_after(self, pod: TracePod) -> Floats:
        """FGD's paper's Best-fit score per node: what the pod would leave of the node's
        GPU share (and CPUs, when packed), each over the largest node's, weighted
        equally; lower fits better."""
        free_milli = np.bincount(
            self.node, weights=WHOLE_MILLI - self.used_milli, minlength=len(self.free_cpu_milli)
        )
        gpu_left: Floats = (free_milli - pod.milli) / self._largest_gpu_milli
        if not self._pack_cpu:
            return gpu_left
        cpu_left = (self.free_cpu_milli - pod.cpu_milli) / self._largest_cpu_milli
        return 0.5 * gpu_left + 0.5 * cpu_left


def _pods_between_checkpoints(
    arrivals: Sequence[TracePod], checkpoints: Sequence[float], capacity_gpus: int
) -> Iterator[tuple[TracePod, list[float]]]:
    """Each arrival, with the checkpoint loads its demand reaches (often none)."""
    demand, pending = 0.0, list(checkpoints)
    for pod in arrivals:
        demand += pod.gpu_demand
        reached = []
        while pending and demand >= pending[0] * capacity_gpus - 1e-9:
            reached.append(pending.pop(0))
        yield pod, reached


def run_study(
    nodes: Sequence[TraceNode],
    arrivals: Sequence[TracePod],
    *,
    mix: WorkloadMix,
    rule: StudyRule,
    seed: int,
    config: StudyConfig,
) -> StudyRun:
    """One run: ``arrivals`` placed in order under ``rule`` (module doc); ``seed`` only
    feeds the ``random`` rule."""
    cluster = _Cluster(nodes, pack_cpu=config.pack_cpu)
    capacity = len(cluster.node)
    rng = np.random.default_rng([seed, 29])
    failed_pods, failed_demand, points = 0, 0.0, list[LoadPoint]()
    for pod, reached in _pods_between_checkpoints(arrivals, config.checkpoints(), capacity):
        if not cluster.place(pod, rule, mix, rng):
            failed_pods += 1
            failed_demand += pod.gpu_demand
        if reached:
            table = cluster.table()
            total_milli = capacity * WHOLE_MILLI
            unallocated = float(table.free_milli.sum()) / total_milli
            fragmented = float(fragmentation_by_node(table, mix).sum()) / total_milli
            points.extend(
                LoadPoint(load, unallocated, fragmented, failed_pods, failed_demand / capacity)
                for load in reached
            )
    return StudyRun(rule, seed, len(arrivals), tuple(points))
