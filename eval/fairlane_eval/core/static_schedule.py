"""The live run's static baseline (pure): first fit with every GPU worth 1.0, decided by
the scheduler core's own ``choose`` on the scheduler's fleet listing, in the engine's
event order.

The API has no score-blind policy, and a second scheduler would still rank by score, so
the live driver runs this beside the live scheduler: it is what the offline ``static``
policy does, and the two are compared like for like.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from fairlane_eval.core.cluster import HiddenFleet
from fairlane_eval.core.live_prediction import Placed, job_end_s
from fairlane_eval.core.policies import policy
from fairlane_eval.core.workload import Job
from fairlane_events.gpu_models import CATALOG
from fairlane_events.records import GpuScore
from fairlane_scheduler.core.fleet import FleetView, StabilityPolicy
from fairlane_scheduler.core.placement import Choice, JobShape, PlacementPolicy, choose

__all__ = ["ListedGpu", "StaticFirstFit", "StaticSchedule", "capacity_resolution"]


@dataclass(frozen=True)
class ListedGpu:
    """One GPU as the scheduler's fleet listing (``GET /v1/nodes/{name}``) shows it."""

    node: str
    uuid: str
    index: int
    model: str  # catalogue key


def capacity_resolution(policy_name: str) -> float:
    """The ``capacity_resolution`` the offline policy ``policy_name`` places with (the live
    scheduler is started with Fairlane's)."""
    exact = policy(policy_name).exact_ranking
    return 0.0 if exact else PlacementPolicy().capacity_resolution


@dataclass
class StaticFirstFit:
    """Static allocation at the live run's instants: every GPU worth 1.0 (times its
    model's catalogue speed, as the offline ``static`` policy's view has it), chosen by
    the scheduler core's ``choose`` as the offline ``static`` policy chooses: ``fastest``
    ranked exactly, which on equal scores is first fit by node name, then GPU index."""

    allocated: set[str] = field(default_factory=set)
    _policy: PlacementPolicy = field(
        default_factory=lambda: PlacementPolicy(
            threshold=0.0,
            stale="last_known",
            below_threshold="best_available",
            capacity_resolution=capacity_resolution("static"),
        )
    )

    def place(self, listing: Sequence[ListedGpu], job: Job) -> tuple[str, ...] | None:
        """The uuids job ``job`` gets now (and holds until released), or None."""
        view = FleetView(StabilityPolicy(0.0, 0.0), capacity=max(1, len(listing)))
        for gpu in listing:
            spec = CATALOG[gpu.model]
            view.apply(
                GpuScore(
                    schema_="gpu-score/1",
                    node=gpu.node,
                    uuid=gpu.uuid,
                    index=gpu.index,
                    model=gpu.model,
                    score=1.0,
                    speed=spec.relative_speed,
                    effective_capacity=spec.relative_speed,
                    components={},
                    samples_in_window=0,
                    stale=False,
                    mem_total_bytes=int(spec.mem_gib * 1024**3),
                    ts_ms=1,
                )
            )
        shape = JobShape(job.gpus_per_node, job.nodes, policy=policy("static").pack)
        result = choose(view, shape, self._policy, self.allocated, 1)
        if not isinstance(result, Choice):
            return None
        uuids = tuple(view.uuids[r] for node in result.nodes for r in node.rows)
        self.allocated.update(uuids)
        return uuids

    def release(self, uuids: Iterable[str]) -> None:
        self.allocated.difference_update(uuids)


_ARRIVE, _END = 0, 1  # at equal times arrivals go first, as in the engine


class StaticSchedule:
    """The static baseline's own event loop in scenario time, as the engine runs it: an
    arrival tries its job; an end frees the job's GPUs and tries the waiting jobs by
    priority, then arrival. The live driver sleeps until :meth:`next_s` and calls
    :meth:`step` with the fleet listing of that instant, so wall-clock jitter never
    reorders two events."""

    def __init__(
        self, fleet: HiddenFleet, jobs: Sequence[Job], interval_s: float, horizon_s: float
    ) -> None:
        self._fleet, self._jobs = fleet, tuple(jobs)
        self._interval_s, self._horizon_s = interval_s, horizon_s
        self._rows = {g.uuid: g.row for g in fleet.gpus}
        self._events = [(j.arrival_s, _ARRIVE, i) for i, j in enumerate(self._jobs)]
        heapq.heapify(self._events)
        self._waiting: list[int] = []
        self._held: dict[int, tuple[str, ...]] = {}
        self._first_fit = StaticFirstFit()
        self.placed: list[Placed] = []

    def next_s(self) -> float | None:
        """When the next event happens, or None when none is left before the horizon."""
        if not self._events or self._events[0][0] > self._horizon_s:
            return None
        return self._events[0][0]

    def needs_listing(self) -> bool:
        """Whether the next event places anything (an arrival, or an end with jobs waiting)."""
        return bool(self._events) and (self._events[0][1] == _ARRIVE or bool(self._waiting))

    def step(self, listing: Sequence[ListedGpu]) -> None:
        """Handle the next event, placing on ``listing`` (GPUs of other fleets: KeyError)."""
        t, kind, i = heapq.heappop(self._events)
        if kind == _ARRIVE:
            self._waiting.append(i)
            candidates = [i]
        else:
            self._first_fit.release(self._held.pop(i))
            candidates = sorted(
                self._waiting, key=lambda w: (-self._jobs[w].priority, self._jobs[w].arrival_s, w)
            )
        for c in candidates:
            job = self._jobs[c]
            uuids = self._first_fit.place(listing, job)
            if uuids is None:
                continue
            self._waiting.remove(c)
            self._held[c] = uuids
            rows = tuple(self._rows[u] for u in uuids)
            self.placed.append(Placed(job.job_id, t, rows))
            end = job_end_s(self._fleet, rows, t, job.work_steps, self._interval_s)
            heapq.heappush(self._events, (end, _END, c))
