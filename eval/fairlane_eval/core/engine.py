"""The trace-driven cluster simulator: discrete events in simulated time.

Events are job arrivals, job completions and sampling ticks (every ``interval_s``, only
while some GPU's samples or speed are changing). A job is placed by the policy's view
of the fleet through the scheduler's own ``choose``; a synchronous job then advances at
the speed of its slowest GPU:

    rate(t) = min over its GPUs g of  throughput(job type, model of g, GPUs) x speed_g(t)

where ``speed_g(t)`` is the GPU's hidden true speed (persistent factor x episodes),
re-read at every tick while it changes. A job waits in a queue, tried by priority then
arrival whenever capacity may have appeared (an arrival, a completion, a GPU readmitted
after cooling); a job that fits nowhere now does not block the ones behind it.
Deterministic: no wall clock, every random number from the seeds.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from fairlane_eval.core.cluster import HiddenFleet
from fairlane_eval.core.policies import PolicySpec
from fairlane_eval.core.telemetry import EPOCH_MS, ScoreKeeper
from fairlane_eval.core.workload import Job
from fairlane_events.records import GpuScore
from fairlane_scheduler.core.fleet import FleetView, StabilityPolicy
from fairlane_scheduler.core.placement import (
    Choice,
    JobShape,
    PlacementPolicy,
    choose,
    qualifying,
    rejection_masks,
)
from fairlane_scoring.config import ScoreConfig
from fairlane_sim.fleet import JOB_RAMP_S

__all__ = ["JobOutcome", "SimConfig", "SimResult", "Throughputs", "simulate"]

_SLOW = 0.9  # a GPU slower than this x its model's median is a straggler at placement
_UNUSABLE = 0.01  # the oracle's threshold: below it a GPU is broken, not slow


class Throughputs(Protocol):
    def steps_per_s(self, job_type: str, model: str, gpus: int) -> float: ...


@dataclass(frozen=True)
class SimConfig:
    score: ScoreConfig = field(default_factory=lambda: ScoreConfig(interval_s=60.0))
    stabilization_s: float = 120.0
    max_time_s: float = math.inf  # stop here even if jobs remain (they count as unfinished)

    @property
    def interval_s(self) -> float:
        return self.score.interval_s


@dataclass(frozen=True)
class JobOutcome:
    job: Job
    start_s: float | None  # None: never placed
    end_s: float | None  # None: did not finish
    rows: tuple[int, ...]  # the GPUs it ran on
    held_s: float  # waited although GPUs that the health filter held out would have fit it
    lost_gpu_s: float  # GPU-seconds below the speed its GPUs give it when healthy
    slow_gpus: int  # its GPUs slower than 0.9 x their model's median when it was placed
    healthy_s: float  # how long it would have run on its GPUs without any episode

    @property
    def jct_s(self) -> float | None:
        return None if self.end_s is None else self.end_s - self.job.arrival_s

    @property
    def queued_s(self) -> float | None:
        return None if self.start_s is None else self.start_s - self.job.arrival_s


@dataclass(frozen=True)
class SimResult:
    policy: str
    outcomes: tuple[JobOutcome, ...]
    gpus: int
    end_s: float
    samples_taken: int


@dataclass
class _Running:
    rows: tuple[int, ...]
    rate: float
    healthy_rate: float
    done: float = 0.0
    since_s: float = 0.0
    version: int = 0
    lost_gpu_s: float = 0.0


@dataclass(frozen=True)
class _Started:
    at_s: float
    rows: tuple[int, ...]
    slow_gpus: int
    held_s: float


@dataclass
class _Waiting:
    held_since: float | None = None
    held_s: float = 0.0


_ARRIVE, _TICK, _COMPLETE = 0, 1, 2  # same-time order: arrivals, then ticks, then ends


class _Simulation:
    def __init__(
        self,
        jobs: Sequence[Job],
        fleet: HiddenFleet,
        spec: PolicySpec,
        throughputs: Throughputs,
        config: SimConfig,
        *,
        seed: int,
    ) -> None:
        self.jobs, self.fleet, self.spec = jobs, fleet, spec
        self.throughputs, self.config = throughputs, config
        self.dt = config.interval_s
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
            **({"capacity_resolution": 0.0} if spec.exact_ranking else {}),
        )
        self.keeper = ScoreKeeper(fleet, config.score, seed) if spec.view == "scores" else None
        n = len(fleet.gpus)
        self.speed = np.array([fleet.true_speed(r, 0.0) for r in range(n)])
        self.owner: list[int | None] = [None] * n
        self.allocated: set[str] = set()
        self.running: dict[int, _Running] = {}
        self.waiting: dict[int, _Waiting] = {}
        self.shapes: dict[int, JobShape] = {}
        self.starts: dict[int, _Started] = {}
        self.outcomes: dict[int, JobOutcome] = {}
        self.score_dirty: dict[int, float] = {}  # row -> sample it until then
        self.speed_dirty: dict[int, float] = {}  # row -> re-read its speed until then
        self.points = sorted(
            (t, r) for r in range(n) for t in fleet.breakpoints(r) if t < config.max_time_s
        )
        self.next_point = 0
        self.ramp_s = [
            max((e.ramp_s for e in fleet.episodes[r] if e.kind == "thermal"), default=0.0)
            for r in range(n)
        ]
        self.events: list[tuple[float, int, int, int]] = []
        self.arrivals_left = len(jobs)
        self.tick_at: float | None = None
        self.now = 0.0
        self.qualified = np.zeros(0, dtype=bool)

    # ------------------------------------------------------------------ the view
    def _publish(self, row: int, score: float, ts_s: float) -> None:
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

    def _sample(self, row: int, tick: int) -> None:
        assert self.keeper is not None
        for record in self.keeper.advance(row, tick):
            self.view.apply(record)

    def _start_view(self) -> None:
        for row in range(len(self.fleet.gpus)):
            if self.keeper is not None:
                self._sample(row, 0)
                self.score_dirty[row] = self.keeper.settle_s
            else:
                truth = self.spec.view == "truth"
                self._publish(row, min(1.0, float(self.speed[row])) if truth else 1.0, 0.0)

    # ------------------------------------------------------------------ events
    def _push(self, t: float, kind: int, payload: int) -> None:
        heapq.heappush(self.events, (t, kind, payload, 0))

    def _schedule_tick(self) -> None:
        """The next tick: the next grid point while something changes, else the grid point
        of the next breakpoint."""
        if self.score_dirty or self.speed_dirty:
            at = (math.floor(self.now / self.dt + 1e-9) + 1) * self.dt
        elif self.next_point < len(self.points):
            at = math.ceil(self.points[self.next_point][0] / self.dt - 1e-9) * self.dt
            at = max(at, (math.floor(self.now / self.dt + 1e-9) + 1) * self.dt)
        else:
            return
        if self.tick_at is None or at < self.tick_at:
            self.tick_at = at
            self._push(at, _TICK, 0)

    def run(self, progress: Callable[[float], None] | None) -> SimResult:
        self._start_view()
        for i, job in enumerate(self.jobs):
            self._push(job.arrival_s, _ARRIVE, i)
        self._schedule_tick()
        while self.events and (self.running or self.waiting or self.arrivals_left):
            t, kind, payload, version = heapq.heappop(self.events)
            if t > self.config.max_time_s:
                break
            self.now = t
            if kind == _ARRIVE:
                self.arrivals_left -= 1
                self.waiting[payload] = _Waiting()
                self._try(payload)
            elif kind == _COMPLETE:
                running = self.running.get(payload)
                if running is not None and running.version == version:
                    self._finish(payload)
                    self._try_waiting()
            elif t == self.tick_at:
                self.tick_at = None
                self._tick()
                self._schedule_tick()
            if progress is not None:
                progress(t)
        return self._result()

    # ------------------------------------------------------------------ ticks
    def _tick(self) -> None:
        t = self.now
        tick = round(t / self.dt)
        while self.next_point < len(self.points) and self.points[self.next_point][0] <= t:
            p, row = self.points[self.next_point]
            self.next_point += 1
            until = p + self.ramp_s[row] + self.dt  # a thermal ramp moves the clock throughout
            self.speed_dirty[row] = max(self.speed_dirty.get(row, 0.0), until)
            if self.keeper is not None:
                self.score_dirty[row] = max(
                    self.score_dirty.get(row, 0.0), p + self.keeper.settle_s
                )
        changed_jobs: set[int] = set()
        for row, until in list(self.speed_dirty.items()):
            speed = self.fleet.true_speed(row, t)
            if speed != self.speed[row]:
                self.speed[row] = speed
                self.speed_dirty[row] = max(until, t + self.dt)  # still moving: keep reading
                if self.spec.view == "truth":
                    self._publish(row, min(1.0, speed), t)
                if (job := self.owner[row]) is not None:
                    changed_jobs.add(job)
            elif until < t:
                del self.speed_dirty[row]
        for job in sorted(changed_jobs):
            self._rerate(job)
        for row, until in list(self.score_dirty.items()):
            if self.owner[row] is not None:  # sampled at its release, as the scorer masks it
                del self.score_dirty[row]
                continue
            self._sample(row, tick)
            if until < t:
                del self.score_dirty[row]
        if self.waiting:
            self._try_waiting(only_if_more_qualify=True)

    # ------------------------------------------------------------------ placement
    def _shape(self, job: Job) -> JobShape:
        """The request a launcher would send: models the job cannot run on (no measured
        throughput) are not allowed, whatever the policy."""
        speeds = {
            key: self.throughputs.steps_per_s(job.job_type, key, job.gpus)
            for key in self.view.models
        }
        runnable = frozenset(key for key, speed in speeds.items() if speed > 0)
        return JobShape(
            job.gpus_per_node,
            job.nodes,
            models=None if len(runnable) == len(speeds) else runnable,
            policy=self.spec.pack,
            model_speeds=speeds if self.spec.job_speeds else None,
        )

    def _qualifying(self) -> np.ndarray:
        n = len(self.view)
        masks = rejection_masks(
            self.view, JobShape(1), self.placement, self.view.rows_of(self.allocated), self._ms()
        )
        ok, _ = qualifying(masks, n)
        return ok

    def _try_waiting(self, *, only_if_more_qualify: bool = False) -> None:
        if not self.waiting:
            return
        ok = self._qualifying()
        more = len(self.qualified) != len(ok) or bool((ok & ~self.qualified).any())
        self.qualified = ok
        if only_if_more_qualify and not more:
            return
        free = int(ok.sum())
        order = sorted(
            self.waiting, key=lambda i: (-self.jobs[i].priority, self.jobs[i].arrival_s, i)
        )
        for i in order:
            if self.jobs[i].gpus <= free and self._try(i):
                free -= self.jobs[i].gpus

    def _try(self, i: int) -> bool:
        job = self.jobs[i]
        wait = self.waiting[i]
        if wait.held_since is not None:
            wait.held_s += self.now - wait.held_since
            wait.held_since = None
        if i not in self.shapes:
            self.shapes[i] = self._shape(job)
        result = choose(self.view, self.shapes[i], self.placement, self.allocated, self._ms())
        if not isinstance(result, Choice):
            return False
        if result.fallback:  # only GPUs the health filter holds out would fit it
            wait.held_since = self.now
            return False
        # View rows are fleet rows: the view took every GPU's first record in fleet order.
        self._start(i, tuple(r for node in result.nodes for r in node.rows))
        return True

    def _start(self, i: int, rows: tuple[int, ...]) -> None:
        job = self.jobs[i]
        held_s = self.waiting.pop(i).held_s
        del self.shapes[i]
        self.allocated.update(self.fleet.gpus[r].uuid for r in rows)
        for row in rows:
            self.owner[row] = i
            if self.keeper is not None:
                self.keeper.job_started(row, self.now)
        healthy = self._rate(job, rows, [self.fleet.gpus[r].base_speed for r in rows])
        self.running[i] = _Running(rows, 0.0, healthy, since_s=self.now)
        slow = sum(1 for r in rows if self.speed[r] < _SLOW)
        self.starts[i] = _Started(self.now, rows, slow, held_s)
        self._rerate(i)

    def _rate(self, job: Job, rows: Sequence[int], speeds: Sequence[float]) -> float:
        return min(
            self.throughputs.steps_per_s(job.job_type, self.fleet.gpus[r].spec.key, job.gpus) * s
            for r, s in zip(rows, speeds, strict=True)
        )

    def _rerate(self, i: int) -> None:
        """Bring job ``i``'s progress up to now and give it the rate of its GPUs now."""
        run = self.running[i]
        elapsed = self.now - run.since_s
        run.done += run.rate * elapsed
        if run.healthy_rate > 0:
            run.lost_gpu_s += elapsed * len(run.rows) * max(0.0, 1 - run.rate / run.healthy_rate)
        run.since_s = self.now
        run.rate = self._rate(self.jobs[i], run.rows, [float(self.speed[r]) for r in run.rows])
        run.version += 1
        if run.rate > 0:
            left = max(0.0, self.jobs[i].work_steps - run.done)
            heapq.heappush(self.events, (self.now + left / run.rate, _COMPLETE, i, run.version))

    def _finish(self, i: int) -> None:
        self._rerate(i)  # accounts the last stretch; the completion it schedules is moot
        run = self.running.pop(i)
        job = self.jobs[i]
        started = self.starts.pop(i)
        rows = started.rows
        tick = math.floor(self.now / self.dt + 1e-9)
        for row in rows:
            self.owner[row] = None
            self.allocated.discard(self.fleet.gpus[row].uuid)
            if self.keeper is not None:
                self.keeper.job_ended(row, self.now)
                self._sample(row, tick)  # what the scorer said while the job ran
                settle = self.now + JOB_RAMP_S + self.keeper.settle_s
                self.score_dirty[row] = max(self.score_dirty.get(row, 0.0), settle)
        self.outcomes[i] = JobOutcome(
            job=job,
            start_s=started.at_s,
            end_s=self.now,
            rows=rows,
            held_s=started.held_s,
            lost_gpu_s=run.lost_gpu_s,
            slow_gpus=started.slow_gpus,
            healthy_s=job.work_steps / run.healthy_rate if run.healthy_rate else math.inf,
        )
        self._schedule_tick()

    def _ms(self) -> int:
        return EPOCH_MS + round(self.now * 1000)

    def _result(self) -> SimResult:
        outcomes = []
        for i, job in enumerate(self.jobs):
            if i in self.outcomes:
                outcomes.append(self.outcomes[i])
                continue
            started = self.starts.get(i)
            run = self.running.get(i)
            outcomes.append(
                JobOutcome(
                    job=job,
                    start_s=None if started is None else started.at_s,
                    end_s=None,
                    rows=() if started is None else started.rows,
                    held_s=self.waiting[i].held_s if i in self.waiting else 0.0,
                    lost_gpu_s=0.0 if run is None else run.lost_gpu_s,
                    slow_gpus=0 if started is None else started.slow_gpus,
                    healthy_s=math.inf,
                )
            )
        samples = 0 if self.keeper is None else self.keeper.samples_taken
        return SimResult(self.spec.name, tuple(outcomes), len(self.fleet.gpus), self.now, samples)


def simulate(
    jobs: Sequence[Job],
    fleet: HiddenFleet,
    spec: PolicySpec,
    throughputs: Throughputs,
    config: SimConfig | None = None,
    *,
    seed: int = 0,
    progress: Callable[[float], None] | None = None,
) -> SimResult:
    """Run ``jobs`` (sorted by arrival) on ``fleet`` under ``spec``; ``seed`` drives the
    samples' noise. ``progress`` is called with the simulated time after each event."""
    ordered = sorted(jobs, key=lambda j: (j.arrival_s, j.job_id))
    return _Simulation(ordered, fleet, spec, throughputs, config or SimConfig(), seed=seed).run(
        progress
    )
