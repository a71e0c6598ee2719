"""Single-node placement on live scores (pure).

Filter: a GPU qualifies when it is free, fresh (not stale, sample younger than
``stale_after_s``), of an allowed model, with enough memory, and scores at or above the
threshold. Choose: a job runs at the speed of its slowest GPU, so among nodes with enough
qualifying GPUs the one whose best ``gpus`` GPUs have the highest minimum effective
capacity wins (ties: more total capacity, then node name); within it the best-scoring
GPUs are taken.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from fairlane_events.gpu_models import find_model
from fairlane_events.records import GpuScore

__all__ = ["Choice", "JobShape", "NoPlacement", "PlacementPolicy", "choose_node", "gpu_rejection"]

_GIB = 1024**3


@dataclass(frozen=True)
class JobShape:
    gpus: int
    min_gpu_memory_gib: float | None = None
    models: frozenset[str] | None = None  # catalogue keys; None = any


@dataclass(frozen=True)
class PlacementPolicy:
    threshold: float = 0.65
    stale_after_s: float = 180.0


@dataclass(frozen=True)
class Choice:
    node: str
    gpus: tuple[GpuScore, ...]  # best first

    @property
    def min_effective_capacity(self) -> float:
        return min(g.effective_capacity for g in self.gpus)


@dataclass(frozen=True)
class NoPlacement:
    """Why nothing fits: how many GPUs were rejected for each reason."""

    reasons: Mapping[str, int]

    def summary(self) -> str:
        parts = ", ".join(f"{n} {why}" for why, n in sorted(self.reasons.items()))
        return f"no node has enough qualifying GPUs ({parts or 'no GPUs known'})"


def gpu_rejection(
    gpu: GpuScore,
    shape: JobShape,
    policy: PlacementPolicy,
    allocated: Collection[str],
    now_ms: int,
) -> str | None:
    """The reason ``gpu`` cannot take part in ``shape``, or None when it can."""
    if gpu.uuid in allocated:
        return "allocated"
    if gpu.stale or now_ms - gpu.ts_ms > policy.stale_after_s * 1000:
        return "stale"
    if shape.models is not None:
        spec = find_model(gpu.model)
        if spec is None or spec.key not in shape.models:
            return "model not allowed"
    if shape.min_gpu_memory_gib is not None and (
        gpu.mem_total_bytes is None or gpu.mem_total_bytes < shape.min_gpu_memory_gib * _GIB
    ):
        return "too little memory"
    if gpu.score < policy.threshold:
        return "score below threshold"
    return None


def choose_node(
    gpus: Iterable[GpuScore],
    shape: JobShape,
    policy: PlacementPolicy,
    allocated: Collection[str],
    now_ms: int,
) -> Choice | NoPlacement:
    by_node: dict[str, list[GpuScore]] = defaultdict(list)
    rejected: Counter[str] = Counter()
    for gpu in gpus:
        reason = gpu_rejection(gpu, shape, policy, allocated, now_ms)
        if reason is None:
            by_node[gpu.node].append(gpu)
        else:
            rejected[reason] += 1
    candidates = []
    for node, qualifying in by_node.items():
        if len(qualifying) < shape.gpus:
            rejected["on a node without enough qualifying GPUs"] += len(qualifying)
            continue
        best = sorted(qualifying, key=lambda g: (-g.score, g.index))[: shape.gpus]
        candidates.append(Choice(node, tuple(best)))
    if not candidates:
        return NoPlacement(dict(rejected))
    return min(
        candidates,
        key=lambda c: (
            -c.min_effective_capacity,
            -sum(g.effective_capacity for g in c.gpus),
            c.node,
        ),
    )
