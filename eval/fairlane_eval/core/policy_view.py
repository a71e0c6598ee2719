"""The fleet as one policy sees it, and its choices through the scheduler's own code.

A ``scores`` policy sees what Fairlane's scorer would publish (a :class:`ScoreKeeper`
over simulated samples) behind the scheduler's stabilization window; ``truth`` (the
oracle) sees each GPU's true speed, and ``constant`` (static allocation) sees 1.0.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import numpy as np
import numpy.typing as npt

from fairlane_eval.core.cluster import HiddenFleet
from fairlane_eval.core.policies import PolicySpec
from fairlane_eval.core.sim_types import SimConfig, Throughputs
from fairlane_eval.core.telemetry import EPOCH_MS, ScoreKeeper
from fairlane_eval.core.workload import Job
from fairlane_events.records import GpuScore
from fairlane_scheduler.core.fleet import FleetView, StabilityPolicy
from fairlane_scheduler.core.placement import (
    Choice,
    JobShape,
    NoPlacement,
    PlacementPolicy,
    choose,
    qualifying,
    rejection_masks,
)

__all__ = ["PolicyView", "relative_speeds"]

_UNUSABLE = 0.01  # the oracle's threshold: below it a GPU is broken, not slow


def relative_speeds(speeds: Mapping[str, float]) -> dict[str, float]:
    """A job's per-model speeds over its fastest model's: ``speed(m) / max_m speed(m)``.

    Throughputs are in the job's own unit (steps/s: 7 for one type, 600 for another);
    effective capacity is score x this speed, and the scheduler treats capacities within
    one ``capacity_resolution`` step (0.1) as equal. On the job's scale the step would be
    a hair's breadth and ``fastest`` would rank by score noise; scaled so the fastest
    model is 1.0 the step means what it means for the catalogue's speeds. All 0 (the job
    runs nowhere) stays all 0.
    """
    fastest = max(speeds.values(), default=0.0)
    if fastest <= 0:
        return dict(speeds)
    return {model: speed / fastest for model, speed in speeds.items()}


class PolicyView:
    def __init__(self, fleet: HiddenFleet, spec: PolicySpec, config: SimConfig, seed: int):
        self.fleet, self.spec = fleet, spec
        window = config.stabilization_s if spec.view == "scores" else 0.0
        # The oracle never holds a job back for a slow GPU (only for one that cannot run):
        # it knows the speed, and a threshold is a guess about the future it need not make.
        thresholds = {"constant": 0.0, "scores": config.score.threshold, "truth": _UNUSABLE}
        threshold = thresholds[spec.view]
        self.view = FleetView(StabilityPolicy(threshold, window), capacity=len(fleet.gpus))
        self.placement = PlacementPolicy(
            threshold=threshold,
            stale="last_known",
            below_threshold="best_available",
            capacity_resolution=0.0
            if spec.exact_ranking
            else PlacementPolicy().capacity_resolution,
        )
        self.keeper = ScoreKeeper(fleet, config.score, seed) if spec.view == "scores" else None

    @property
    def samples_taken(self) -> int:
        return 0 if self.keeper is None else self.keeper.samples_taken

    def publish(self, row: int, score: float, ts_s: float) -> None:
        """Tell the view GPU ``row``'s score, as a score record at ``ts_s``."""
        gpu = self.fleet.gpus[row]
        speed = gpu.spec.relative_speed
        self.view.apply(
            GpuScore.model_construct(
                node=gpu.node,
                uuid=gpu.uuid,
                index=gpu.index,
                model=gpu.spec.key,
                score=score,
                speed=speed,
                effective_capacity=score * speed,
                components={},
                samples_in_window=0,
                stale=False,
                mem_total_bytes=int(gpu.spec.mem_gib * 1024**3),
                ts_ms=EPOCH_MS + round(ts_s * 1000),
            )
        )

    def sample(self, row: int, tick: int) -> None:
        """Sample GPU ``row`` up to ``tick`` and apply the scores the scorer would emit."""
        assert self.keeper is not None
        for record in self.keeper.advance(row, tick):
            self.view.apply(record)

    def start(self, speed: npt.NDArray[np.float64], score_dirty: dict[int, float]) -> None:
        """Each GPU's first record, in fleet order (so view rows are fleet rows); a scored
        GPU is marked to be sampled until its score has settled."""
        for row in range(len(self.fleet.gpus)):
            if self.keeper is not None:
                self.sample(row, 0)
                score_dirty[row] = self.keeper.settle_s
            else:
                truth = self.spec.view == "truth"
                self.publish(row, min(1.0, float(speed[row])) if truth else 1.0, 0.0)

    def shape(self, job: Job, throughputs: Throughputs) -> JobShape:
        """The request a launcher would send: models the job cannot run on (no measured
        throughput) are not allowed, whatever the policy. A policy that ranks by the
        job's own speeds gets them relative to its fastest model (:func:`relative_speeds`)."""
        speeds = {
            key: throughputs.steps_per_s(job.job_type, key, job.gpus) for key in self.view.models
        }
        runnable = frozenset(key for key, speed in speeds.items() if speed > 0)
        return JobShape(
            job.gpus_per_node,
            job.nodes,
            models=None if len(runnable) == len(speeds) else runnable,
            policy=self.spec.pack,
            model_speeds=relative_speeds(speeds) if self.spec.job_speeds else None,
        )

    def qualifying(self, allocated: Collection[str], now_ms: int) -> npt.NDArray[np.bool_]:
        """Which GPUs a 1-GPU job could be given now."""
        rows = self.view.rows_of(allocated)
        masks = rejection_masks(self.view, JobShape(1), self.placement, rows, now_ms)
        return qualifying(masks, len(self.view))

    def choose(
        self, shape: JobShape, allocated: Collection[str], now_ms: int
    ) -> Choice | NoPlacement:
        return choose(self.view, shape, self.placement, allocated, now_ms)
