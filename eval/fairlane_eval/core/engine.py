"""The trace-driven cluster simulator: discrete events in simulated time.

Events are job arrivals, job completions and sampling ticks (every ``interval_s``, only
while some GPU's samples or speed are changing). A job is placed by the policy's view
of the fleet through the scheduler's own ``choose``; a synchronous job then advances at
the speed of its slowest GPU:

    rate(t) = min over its GPUs g of  throughput(job type, model of g, GPUs) x speed_g(t)
                                      x class_g(job type)

where ``speed_g(t)`` is the GPU's hidden true speed (persistent factor x episodes),
``class_g`` its persistent factor for the job's class (1.0 unless the fleet has class
speeds, :meth:`HiddenFleet.class_factor`); speed is re-read at every tick while it
changes. A job waits in a queue, tried by priority then arrival whenever capacity may
have appeared (an arrival, a completion, a GPU readmitted after cooling); a job that
fits nowhere now does not block the ones behind it.

Under a learning policy every running gang (and, when it learns across jobs, every
one-GPU job) also reports, every ``report_interval_s`` from its start, each rank's
compute time per step (:meth:`_Simulation._report`) to the product's learner in the
policy's view. Deterministic: no wall clock, every random
number from the seeds.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from fairlane_eval.core.cluster import HiddenFleet
from fairlane_eval.core.feasibility import ideal_rate
from fairlane_eval.core.job_classes import job_class
from fairlane_eval.core.policies import PolicySpec
from fairlane_eval.core.policy_view import PolicyView
from fairlane_eval.core.sim_types import JobOutcome, SimConfig, SimResult, Throughputs
from fairlane_eval.core.telemetry import EPOCH_MS
from fairlane_eval.core.workload import Job
from fairlane_scheduler.core.placement import Choice, JobShape
from fairlane_scoring.learned_speed import ProgressReport, RankReport
from fairlane_sim.fleet import JOB_RAMP_S

__all__ = ["simulate"]

_SLOW = 0.9  # a GPU slower than this x its model's median is a straggler at placement


@dataclass
class _Running:
    rows: tuple[int, ...]
    rate: float
    median_rate: float  # on median GPUs of its models: what a straggler falls short of
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


_ARRIVE, _TICK, _COMPLETE, _REPORT = 0, 1, 2, 3  # same-time order: arrivals, ticks, ends


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
        self.seen = PolicyView(fleet, spec, config, seed)
        self.keeper = self.seen.keeper
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
        self.groups = fleet.groups()
        self.ideal_rates: dict[tuple[str, int, int], float] = {}
        self.report_noise = np.random.default_rng([seed, 27])
        self.seed = seed
        self.unknown_cost: dict[int, float] = {}  # job -> its cost's unknown factor
        self.reports: dict[int, int] = {}  # job -> reports sent

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
        self.seen.start(self.speed, self.score_dirty)
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
            elif kind == _REPORT:
                if payload in self.running:  # a job runs once: no report outlives it
                    self._report(payload)
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
                    self.seen.publish(row, speed, t)
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
            self.seen.sample(row, tick)
            if until < t:
                del self.score_dirty[row]
        if self.waiting:
            self._try_waiting(only_if_more_qualify=True)

    # ------------------------------------------------------------------ placement
    def _try_waiting(self, *, only_if_more_qualify: bool = False) -> None:
        if not self.waiting:
            return
        ok = self.seen.qualifying(self.allocated, self._ms())
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
            self.shapes[i] = self.seen.shape(job, self.throughputs)
        result = self.seen.choose(self.shapes[i], self.allocated, self._ms(), job.job_type)
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
        # Lost GPU-time counts persistent slowness too: the reference is the median GPU
        # of each model (speed 1.0, class factor 1.0), not this GPU's own speeds.
        median = self._rate(job, rows, [1.0] * len(rows), classes=False)
        self.running[i] = _Running(rows, 0.0, median, since_s=self.now)
        slow = sum(1 for r in rows if self.speed[r] < _SLOW)
        self.starts[i] = _Started(self.now, rows, slow, held_s)
        self._rerate(i)
        # One rank alone teaches nothing within its job, only across jobs.
        if self.spec.learns and (len(rows) > 1 or self.spec.cross_job):
            # Drawn per job, not per start, so every policy sees the same job alike.
            draw = np.random.default_rng([self.seed, 2729, i]).normal()
            self.unknown_cost[i] = math.exp(self.config.job_cost_sigma * draw)
            self._push(self.now + self.config.report_interval_s, _REPORT, i)

    def _report(self, i: int) -> None:
        """Job ``i``'s ranks' compute time per step over the last window, to the learner:

            t_r = 1 / (steps_per_s(job, model of r) x class_r x speed_r(now)) x e^(sigma z)

        (the job's step cost is 1 / steps_per_s on a median GPU of the model; ``speed_r``
        the GPU's true speed now, z standard normal), with the model's speed as the
        learner knows it: ``steps_per_s x u_j``, ``u_j`` the job's unknown cost factor
        (``job_cost_sigma``). A window in which a GPU cannot run (speed 0) is not
        reported."""
        job, rows = self.jobs[i], self.running[i].rows
        interval = self.config.report_interval_s
        self.reports[i] = self.reports.get(i, 0) + 1
        # A one-GPU job teaches only across jobs, and its class speaks of it about once
        # (its k-th report weighs 1 / k^2 of its first): its reports after the
        # ``lone_reports``-th (15) would together weigh under 7 % of its first, and cost most
        # of a trial.
        if len(rows) > 1 or self.reports[i] < self.config.lone_reports:
            self._push(self.now + interval, _REPORT, i)
        noise = self.report_noise.normal(0.0, self.config.report_noise_sigma, len(rows))
        ranks = []
        for r, z in zip(rows, noise, strict=True):
            gpu = self.fleet.gpus[r]
            model_rate = self.throughputs.steps_per_s(job.job_type, gpu.spec.key, job.gpus)
            rate = model_rate * self.fleet.class_factor(r, job.job_type) * self.speed[r]
            if rate <= 0:
                return
            known_rate = model_rate * self.unknown_cost[i]
            ranks.append(RankReport(gpu.uuid, math.exp(z) / rate, known_rate))
        report = ProgressReport(job_class(job.job_type), interval, tuple(ranks), job=str(i))
        self.seen.report(report, self._ms())

    def _rate(
        self, job: Job, rows: Sequence[int], speeds: Sequence[float], *, classes: bool = True
    ) -> float:
        """The gang's rate at these speeds; ``classes``: times each GPU's class factor."""
        return min(
            self.throughputs.steps_per_s(job.job_type, self.fleet.gpus[r].spec.key, job.gpus)
            * s
            * (self.fleet.class_factor(r, job.job_type) if classes else 1.0)
            for r, s in zip(rows, speeds, strict=True)
        )

    def _rerate(self, i: int) -> None:
        """Bring job ``i``'s progress up to now and give it the rate of its GPUs now."""
        run = self.running[i]
        elapsed = self.now - run.since_s
        run.done += run.rate * elapsed
        if run.median_rate > 0:
            run.lost_gpu_s += elapsed * len(run.rows) * max(0.0, 1 - run.rate / run.median_rate)
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
                self.seen.sample(row, tick)  # what the scorer said while the job ran
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
            ideal_s=self._ideal_s(job),
        )
        self._schedule_tick()

    def _ideal_s(self, job: Job) -> float:
        """The job's run time on its ideal allocation: policy-independent (the fleet's
        node groups and the throughputs, nothing the policy chose)."""
        key = (job.job_type, job.gpus_per_node, job.nodes)
        if key not in self.ideal_rates:
            self.ideal_rates[key] = ideal_rate(job, self.groups, self.throughputs)
        rate = self.ideal_rates[key]
        return job.work_steps / rate if rate > 0 else math.inf

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
                    ideal_s=self._ideal_s(job),
                )
            )
        gpus, samples = len(self.fleet.gpus), self.seen.samples_taken
        return SimResult(self.spec.name, tuple(outcomes), gpus, self.now, samples)


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
