"""The live run's offline twin: its scenarios, jobs, prediction and agreement test (pure).

``make eval-live`` drives the real stack (agent simulator -> Kafka -> scorer -> scheduler
API) through a scenario and counts how many placements landed on a GPU that the scenario
was throttling at that moment. This module says what the offline simulator predicts for
the very same run, with the scheduler's own code:

- the fleet is the agent's (:meth:`HiddenFleet.from_simulator` on the same spec, seed and
  scenario: same uuids, base speeds, episodes), the jobs are the same (arrival, size,
  work), the score and scheduler settings are the same (interval, windows, threshold,
  stabilization);
- a job advances at its slowest GPU's true speed, re-read every collection interval, as
  in the engine; the live driver uses :func:`job_end_s` to release a job when the engine
  would have finished it on the GPUs the live scheduler gave it;
- the static baseline is :mod:`~fairlane_eval.core.static_schedule`'s first fit, run in
  the engine's event order.

Whether the live share agrees with the prediction is
:func:`fairlane_eval.core.agreement.agreement`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources

import numpy as np

from fairlane_eval.core.cluster import HiddenFleet
from fairlane_eval.core.engine import simulate
from fairlane_eval.core.policies import policy
from fairlane_eval.core.sim_types import SimConfig
from fairlane_eval.core.workload import Job
from fairlane_scoring.config import ScoreConfig
from fairlane_sim.fleet import FleetSpec
from fairlane_sim.scenario import Scenario, parse_scenario

__all__ = [
    "JOB_TYPE",
    "SHORT_SCENARIO_TOML",
    "LiveSetup",
    "Placed",
    "Prediction",
    "Share",
    "UnitThroughput",
    "hot_aisle_setup",
    "is_throttled",
    "job_end_s",
    "live_jobs",
    "predict",
    "same_choices",
    "short_setup",
    "throttled_share",
]

#: The one job type of the live runs: 1 step/s on a median GPU, so work = healthy seconds.
JOB_TYPE = "live"

#: The CI version of the hot aisle: one node of four throttles for about a minute.
SHORT_SCENARIO_TOML = """\
name = "hot aisle, short"

[fleet]
nodes = 4
gpus_per_node = 4
models = ["H100"]
degraded_fraction = 0.0

[[events]]
kind = "thermal"
nodes = [0]
start_s = 8
duration_s = 60
ramp_s = 8
clock_factor = 0.5

[[events]]
kind = "spike"
probability = 0.01
"""


class UnitThroughput:
    """Every job type runs 1 step/s on a median GPU of any model (work = seconds)."""

    def steps_per_s(self, job_type: str, model: str, gpus: int) -> float:
        return 1.0


@dataclass(frozen=True)
class LiveSetup:
    """One live run: fleet, scenario, jobs and the settings both sides share."""

    name: str
    fleet: FleetSpec
    scenario_toml: str
    jobs: tuple[Job, ...]
    score: ScoreConfig  # the scorer's settings; ``threshold`` is the scheduler's
    stabilization_s: float
    horizon_s: float  # placements after this (scenario seconds) do not count
    heartbeat_s: float  # the scorer's; the scheduler's stale_after_s is 3x this

    @property
    def scenario(self) -> Scenario:
        return parse_scenario(self.scenario_toml)

    @property
    def interval_s(self) -> float:
        return self.score.interval_s

    def sim_config(self) -> SimConfig:
        return SimConfig(
            score=self.score, stabilization_s=self.stabilization_s, max_time_s=self.horizon_s
        )

    def hidden_fleet(self) -> HiddenFleet:
        return HiddenFleet.from_simulator(self.fleet, self.scenario)


def live_jobs(
    rng: np.random.Generator,
    *,
    count: int,
    first_s: float,
    last_s: float,
    interval_s: float,
    gpus: Sequence[tuple[int, float]],
    work_s: tuple[float, float],
) -> tuple[Job, ...]:
    """``count`` single-node jobs arriving at distinct mid-interval instants in
    ``[first_s, last_s]``, ``gpus`` drawn from (GPUs, probability), work uniform in
    ``work_s``. Mid-interval: a live request then sees the sample the simulator's does
    whatever the pipeline's latency, up to half an interval."""
    first = math.ceil(first_s / interval_s - 0.5)
    last = math.floor(last_s / interval_s - 0.5)
    if last - first + 1 < count:
        raise ValueError(f"{count} jobs do not fit in {last - first + 1} arrival slots")
    slots = np.sort(rng.choice(np.arange(first, last + 1), size=count, replace=False))
    sizes, weights = zip(*gpus, strict=True)
    drawn = rng.choice(np.array(sizes), size=count, p=np.array(weights) / sum(weights))
    works = rng.uniform(*work_s, size=count)
    return tuple(
        Job(f"j{i:03d}", (int(s) + 0.5) * interval_s, int(g), 1, JOB_TYPE, round(float(w), 1))
        for i, (s, g, w) in enumerate(zip(slots, drawn, works, strict=True))
    )


def hot_aisle_setup(seed: int = 0, jobs: int = 100) -> LiveSetup:
    """The shipped hot-aisle scenario on its own fleet (8 nodes x 8 GPUs, H100 and
    A100-80GB), the demo's 5 s interval and the product's default score and scheduler
    settings; jobs arrive from 20 s to 780 s (the throttling lasts from 144 s to 696 s)."""
    text = resources.files("fairlane_sim").joinpath("scenarios", "hot-aisle.toml").read_text()
    fleet = FleetSpec(8, 8, ("H100", "A100-80GB"), degraded_fraction=0.0, seed=seed)
    rng = np.random.default_rng(seed)
    gpus = ((1, 0.5), (2, 0.3), (4, 0.2))
    work = live_jobs(
        rng, count=jobs, first_s=20, last_s=780, interval_s=5.0, gpus=gpus, work_s=(30, 120)
    )
    score = ScoreConfig(interval_s=5.0)
    return LiveSetup("hot-aisle", fleet, text, work, score, 120.0, 785.0, heartbeat_s=15.0)


def short_setup(seed: int = 0, jobs: int = 32) -> LiveSetup:
    """:data:`SHORT_SCENARIO_TOML` on 4 x 4 H100, a 2 s interval and windows scaled down
    (history 60 s, 70 % of the weight in the last 30 s, stabilization 20 s): the same
    mechanics in about 90 s of wall time, for CI."""
    fleet = FleetSpec(4, 4, ("H100",), degraded_fraction=0.0, seed=seed)
    rng = np.random.default_rng(seed)
    work = live_jobs(
        rng,
        count=jobs,
        first_s=6,
        last_s=78,
        interval_s=2.0,
        gpus=((1, 0.6), (2, 0.4)),
        work_s=(4, 14),
    )
    score = ScoreConfig(interval_s=2.0, history_s=60.0, recent_window_s=30.0)
    return LiveSetup("short", fleet, SHORT_SCENARIO_TOML, work, score, 20.0, 80.0, heartbeat_s=5.0)


# ----------------------------------------------------------------------- what counts


def is_throttled(fleet: HiddenFleet, row: int, t_s: float) -> bool:
    """Is a thermal episode of the scenario holding GPU ``row``'s clock down at ``t_s``?
    Heating before the clock falls and cooling after it recovered do not count: nothing
    is slow then, and no score could tell."""
    touched = any(e.kind == "thermal" for e, _ in fleet.events_at(row, t_s))
    return touched and fleet.true_speed(row, t_s) < fleet.gpus[row].base_speed * (1 - 1e-9)


@dataclass(frozen=True)
class Placed:
    job_id: str
    start_s: float  # scenario seconds
    rows: tuple[int, ...]  # fleet rows


@dataclass(frozen=True)
class Share:
    """How many placements had a throttled GPU among theirs when they started."""

    placements: int
    on_throttled: int
    gpus: int
    gpus_on_throttled: int

    @property
    def share(self) -> float:
        return self.on_throttled / self.placements if self.placements else 0.0

    @property
    def gpu_share(self) -> float:
        return self.gpus_on_throttled / self.gpus if self.gpus else 0.0


def throttled_share(fleet: HiddenFleet, placed: Iterable[Placed]) -> Share:
    """A placement counts once if any of its GPUs was throttled at its start: a
    synchronous job runs at the pace of its slowest GPU."""
    placements = hit = gpus = gpus_hit = 0
    for p in placed:
        slow = sum(is_throttled(fleet, r, p.start_s) for r in p.rows)
        placements, hit = placements + 1, hit + (slow > 0)
        gpus, gpus_hit = gpus + len(p.rows), gpus_hit + slow
    return Share(placements, hit, gpus, gpus_hit)


def job_end_s(
    fleet: HiddenFleet, rows: Sequence[int], start_s: float, work_s: float, interval_s: float
) -> float:
    """When a job of ``work_s`` healthy seconds started at ``start_s`` on ``rows`` ends:
    it advances at its slowest GPU's true speed, read at each tick and held until the
    next one, as the engine does::

        work = sum over ticks k of  min_g speed_g(k x interval) x time spent in tick k

    A job whose GPUs all stop (ECC) never ends: ``inf``."""
    done, t = 0.0, start_s
    idle_ticks = 0
    while idle_ticks < 10_000:
        tick = math.floor(t / interval_s + 1e-9)
        rate = min(fleet.true_speed(r, tick * interval_s) for r in rows)
        step_end = (tick + 1) * interval_s
        if rate > 0 and done + rate * (step_end - t) >= work_s:
            return t + (work_s - done) / rate
        idle_ticks = idle_ticks + 1 if rate == 0 else 0
        done += rate * (step_end - t)
        t = step_end
    return math.inf


# ------------------------------------------------------------------ static baseline


# ----------------------------------------------------------------- prediction


@dataclass(frozen=True)
class Prediction:
    policy: str
    seeds: tuple[int, ...]
    shares: tuple[Share, ...]  # one per noise seed
    placed: tuple[tuple[Placed, ...], ...]  # one per noise seed, by job

    @property
    def share(self) -> float:
        """The mean over seeds: the expected share, what the live run is compared with."""
        return sum(s.share for s in self.shares) / len(self.shares)

    @property
    def share_range(self) -> tuple[float, float]:
        values = [s.share for s in self.shares]
        return min(values), max(values)

    @property
    def placements(self) -> float:
        return sum(s.placements for s in self.shares) / len(self.shares)


def predict(setup: LiveSetup, policy_name: str, seeds: Sequence[int]) -> Prediction:
    """The simulator's share for ``setup`` under ``policy_name``, once per sample-noise
    seed (the live samples' noise is another draw: only the distribution is shared)."""
    fleet = setup.hidden_fleet()
    shares, runs = [], []
    for seed in seeds:
        result = simulate(
            setup.jobs, fleet, policy(policy_name), UnitThroughput(), setup.sim_config(), seed=seed
        )
        placed = [
            Placed(o.job.job_id, o.start_s, o.rows)
            for o in result.outcomes
            if o.start_s is not None
        ]
        shares.append(throttled_share(fleet, placed))
        runs.append(tuple(placed))
    return Prediction(policy_name, tuple(seeds), tuple(shares), tuple(runs))


def same_choices(live: Iterable[Placed], offline: Iterable[Placed]) -> int:
    """How many jobs got the same GPUs live as in the offline run (a diagnostic: the
    shares are what must agree, single choices follow the samples' noise)."""
    chosen = {p.job_id: frozenset(p.rows) for p in offline}
    return sum(chosen.get(p.job_id) == frozenset(p.rows) for p in live)
