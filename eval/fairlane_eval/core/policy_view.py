"""The fleet as one policy sees it, and its choices through the scheduler's own code.

A ``scores`` policy sees what Fairlane's scorer would publish (a :class:`ScoreKeeper`
over simulated samples) behind the scheduler's stabilization window; ``truth`` (the
oracle) sees each GPU's true speed, and ``constant`` (static allocation) sees 1.0.

A per-class policy gives the view, beside the scores, each GPU's factor for every job
class as a learned speed (``FleetView.apply_speed``, capped at 1.0): for
``fairlane-learned`` the speed the product's learner (:mod:`fairlane_scoring.learned_speed`)
learned from running jobs' reports, read against the same model's GPUs
(``peer_relative``); for ``oracle-learned`` the true class factor. A job is placed
through ``choose`` with its class (``JobShape.job_class``): the scheduler's own
class-aware path, effective capacity = score x factor x model speed, the gang's slowest
learned speed ranked in its own step after the capacity's (docs/scheduler.md, "Learned
speeds"). The threshold and stability window judge the score alone, as in the product.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from fairlane_eval.core.cluster import HiddenFleet
from fairlane_eval.core.job_classes import job_class
from fairlane_eval.core.policies import PolicySpec
from fairlane_eval.core.sim_types import SimConfig, Throughputs
from fairlane_eval.core.telemetry import EPOCH_MS, ScoreKeeper
from fairlane_eval.core.workload import Job
from fairlane_events.records import GpuScore, GpuSpeed
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
from fairlane_scoring.class_reference import ClassReference, ReferenceConfig
from fairlane_scoring.learned_speed import (
    LearnerConfig,
    ProgressReport,
    SpeedState,
    estimate,
    observe_across,
    peer_relative,
)
from fairlane_sim.class_speeds import CLASSES

__all__ = ["PolicyView", "relative_speeds", "speed_record"]

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


def speed_record(
    uuid: str, node: str, model: str, *, job_class: str, speed: float, ts_ms: int
) -> GpuSpeed:
    """A learned speed known exactly (its interval the speed itself), as a simulation
    hands the scheduler's fleet view what a learner would publish."""
    return GpuSpeed.model_construct(
        schema_="gpu-speed/1",
        uuid=uuid,
        node=node,
        model=model,
        job_class=job_class,
        speed=speed,
        low=speed,
        high=speed,
        reports=0,
        confidence=1.0,
        ts_ms=ts_ms,
    )


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
        n = len(fleet.gpus)
        self.factors: dict[str, npt.NDArray[np.float64]] = {}
        true_factors = fleet.class_speeds if spec.view == "truth" else None
        for c, job_cls in enumerate(CLASSES if spec.per_class else ()):
            self.factors[job_cls] = (
                np.ones(n) if true_factors is None else true_factors[:, c].copy()
            )
            for row in np.flatnonzero(self.factors[job_cls] != 1.0).tolist():
                self._learn(row, job_cls, EPOCH_MS)
        self.learner = LearnerConfig(cross_job=ReferenceConfig() if spec.cross_job else None)
        self.references: dict[str, ClassReference] = {}  # job class -> its jobs' costs
        self.learned: dict[tuple[str, str], SpeedState] | None = {} if spec.learns else None
        self.dirty_classes: set[str] = set()
        self.rows = {g.uuid: g.row for g in fleet.gpus}
        self.last: list[GpuScore | None] = [None] * n
        self.models: dict[str, list[int]] = {}
        for g in fleet.gpus:
            self.models.setdefault(g.spec.key, []).append(g.row)

    @property
    def samples_taken(self) -> int:
        return 0 if self.keeper is None else self.keeper.samples_taken

    def publish(self, row: int, score: float, ts_s: float) -> None:
        """Tell the view GPU ``row``'s score (capped at 1.0), as a score record at ``ts_s``."""
        self._apply(self._record(row, score, ts_s))

    def _learn(self, row: int, job_cls: str, ts_ms: int) -> None:
        """GPU ``row``'s factor for ``job_cls`` to the view, as a learned speed record."""
        gpu, speed = self.fleet.gpus[row], min(1.0, float(self.factors[job_cls][row]))
        learned = speed_record(
            gpu.uuid, gpu.node, gpu.spec.key, job_class=job_cls, speed=speed, ts_ms=ts_ms
        )
        self.view.apply_speed(learned)

    def _record(self, row: int, score: float, ts_s: float) -> GpuScore:
        gpu = self.fleet.gpus[row]
        speed = gpu.spec.relative_speed
        return GpuScore.model_construct(
            schema_="gpu-score/1",
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

    def _apply(self, record: GpuScore) -> None:
        """``record`` to the view, its score capped at 1.0."""
        self.last[self.rows[record.uuid]] = record
        if record.score > 1.0:
            record = record.model_copy(update={"score": 1.0, "effective_capacity": record.speed})
        self.view.apply(record)

    def report(self, report: ProgressReport, now_ms: int) -> None:
        """A running job's report, to the learner; its class's view is refreshed before
        the next choice."""
        assert self.learned is not None
        reference = self.references.get(report.job_class)
        learned, reference = observe_across(
            self.learned, reference, report, now_ms, config=self.learner
        )
        self.learned.update(learned)
        if reference is not None:
            self.references[report.job_class] = reference
        self.dirty_classes.add(report.job_class)

    def learned_speed(self, row: int, job_cls: str) -> float:
        """GPU ``row``'s learned speed for ``job_cls`` against its model's GPUs, as last
        published (1.0 before any report)."""
        return float(self.factors[job_cls][row]) if job_cls in self.factors else 1.0

    def _refresh(self, now_ms: int) -> None:
        """Re-read the learned speeds of the classes reported on, peer-relative per model,
        and publish those that moved."""
        assert self.learned is not None
        for job_cls in sorted(self.dirty_classes):
            factors = self.factors[job_cls]
            for rows in self.models.values():
                uuids = [self.fleet.gpus[r].uuid for r in rows]
                learned = {
                    u: estimate(self.learned.get((u, job_cls)), now_ms, self.learner).speed
                    for u in uuids
                }
                relative = peer_relative(learned)
                for row, uuid in zip(rows, uuids, strict=True):
                    if abs(relative[uuid] - factors[row]) > 1e-9:
                        factors[row] = relative[uuid]
                        self._learn(row, job_cls, now_ms)
        self.dirty_classes.clear()

    def sample(self, row: int, tick: int) -> None:
        """Sample GPU ``row`` up to ``tick`` and apply the scores the scorer would emit."""
        assert self.keeper is not None
        for record in self.keeper.advance(row, tick):
            self._apply(record)

    def start(self, speed: npt.NDArray[np.float64], score_dirty: dict[int, float]) -> None:
        """Each GPU's first record, in fleet order (so view rows are fleet rows); a scored
        GPU is marked to be sampled until its score has settled."""
        for row in range(len(self.fleet.gpus)):
            if self.keeper is not None:
                self.sample(row, 0)
                score_dirty[row] = self.keeper.settle_s
            else:
                truth = self.spec.view == "truth"
                self.publish(row, float(speed[row]) if truth else 1.0, 0.0)

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
        self, shape: JobShape, allocated: Collection[str], now_ms: int, job_type: str = ""
    ) -> Choice | NoPlacement:
        """The scheduler's choice for ``shape``; a per-class policy's job names
        ``job_type``'s class."""
        if self.spec.per_class:
            if self.dirty_classes:
                self._refresh(now_ms)
            shape = replace(shape, job_class=job_class(job_type))
        return choose(self.view, shape, self.placement, allocated, now_ms)
