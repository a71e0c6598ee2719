"""Which GPUs of running placements turned slow (pure): the decision behind the
``degraded`` event on ``fairlane.placements.v1``, which tells a job's launcher to
checkpoint and move.

A GPU of a running placement is slow

- by what was *learned* (placements with a job class) when the upper end of its learned
  speed's 95 % interval under the placement's class is below ``DegradedPolicy.speed``:
  confidently that much slower than its model's typical GPU, not a noisy estimate
  around it;
- by its *score* when its latest fresh score is below the placement threshold (the GPU
  would not be chosen now; held, its load is masked, so this is its health).

The store records each (placement, GPU, source) it announced, so the event is said once
per such triple whatever the replicas and restarts (adapters/store.py); this module
only finds candidates, and a round costs a few vector operations over the fleet's
columns, not a pass over the placements.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fairlane_events.records import PlacementEvent, SlowGpu
from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.core.placements import Placement, event_fields

__all__ = ["DegradedPolicy", "degraded_event", "slow_gpus", "suspects"]


@dataclass(frozen=True)
class DegradedPolicy:
    """``speed``: a learned speed whose 95 % upper bound is below this is slow (0.85: a
    synchronous gang loses at least 15 % to it, which outweighs a checkpoint and a move;
    the learner's per-report noise is ~3 %). ``threshold``: the placement threshold;
    ``stale_after_s``: an older score says nothing. 0 turns ``speed`` off."""

    speed: float = 0.85
    threshold: float = 0.65
    stale_after_s: float = 180.0


def suspects(fleet: FleetView, policy: DegradedPolicy, now_ms: int) -> set[str]:
    """Held GPUs slow under some class or by score: the only ones whose placements need
    looking up."""
    n = len(fleet)
    fresh = ~fleet.stale[:n] & (fleet.ts_ms[:n] >= now_ms - policy.stale_after_s * 1000)
    slow = (fresh & (fleet.score[:n] < policy.threshold)) | fleet.learned_slow(policy.speed)
    return {fleet.uuids[r] for r in np.flatnonzero(fleet.held[:n] & slow).tolist()}


def slow_gpus(
    fleet: FleetView,
    placement: Placement,
    job_class: str | None,
    policy: DegradedPolicy,
    now_ms: int,
) -> list[SlowGpu]:
    """The placement's GPUs slow now, each by each source that says so (learned first,
    under ``job_class``; None: by score only), in the placement's node and GPU order."""
    found = []
    stale_before_ms = now_ms - policy.stale_after_s * 1000
    for node in placement.nodes:
        for gpu in node.gpus:
            learned = (
                None if job_class is None else fleet.speed_records.get(gpu.uuid, {}).get(job_class)
            )
            if learned is not None and learned.high < policy.speed:
                slow = SlowGpu(uuid=gpu.uuid, node=node.node, speed=learned.speed, source="learned")
                found.append(slow)
            row = fleet.row.get(gpu.uuid)
            if (
                row is not None
                and not fleet.stale[row]
                and fleet.ts_ms[row] >= stale_before_ms
                and (score := float(fleet.score[row])) < policy.threshold
            ):
                found.append(SlowGpu(uuid=gpu.uuid, node=node.node, speed=score, source="score"))
    return found


def degraded_event(placement: Placement, slow: list[SlowGpu], ts_ms: int) -> PlacementEvent:
    """The ``degraded`` record of ``placement``: its assignment unchanged, ``slow``."""
    return PlacementEvent(
        **event_fields(placement, ts_ms),
        event="degraded",
        reason=", ".join(f"{s.uuid} {s.source} {s.speed:.3f}" for s in slow),
        slow_gpus=slow,
    )
