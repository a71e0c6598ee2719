"""The live run's offline twin: what counts as throttled, when a job ends, the static
baseline the live driver computes, and the agreement test (docs/evaluation-live.md)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fairlane_eval.core.agreement import Agreement, agreement, wilson_interval
from fairlane_eval.core.cluster import HiddenFleet, HiddenGpu
from fairlane_eval.core.engine import simulate
from fairlane_eval.core.live_prediction import (
    JOB_TYPE,
    LiveSetup,
    Placed,
    Prediction,
    Share,
    UnitThroughput,
    hot_aisle_setup,
    is_throttled,
    job_end_s,
    live_jobs,
    predict,
    same_choices,
    short_setup,
    throttled_share,
)
from fairlane_eval.core.policies import policy
from fairlane_eval.core.static_schedule import ListedGpu, StaticFirstFit, StaticSchedule
from fairlane_eval.core.workload import Job
from fairlane_events.gpu_models import CATALOG
from fairlane_sim.scenario import ScenarioEvent

# A thermal episode from 10 s: heats over 10 s (clock falls once heat > 0.7, i.e. from
# 17 s), holds until 40 s, cools over 10 s (clock back once heat <= 0.7, i.e. at 43 s).
THERMAL = ScenarioEvent("thermal", start_s=10, duration_s=30, ramp_s=10, clock_factor=0.5)
STEP = ScenarioEvent("thermal", start_s=10, ramp_s=0, clock_factor=0.5)  # 0.5 from 10 s on


def fleet_of(*episodes: tuple[ScenarioEvent, ...], base_speed: float = 1.0) -> HiddenFleet:
    """One node, one GPU per episode list; GPU ``i`` has the episodes ``episodes[i]``."""
    gpus = [
        HiddenGpu(i, "n-0", i, f"GPU-{i}", CATALOG["H100"], base_speed, 40.0)
        for i in range(len(episodes))
    ]
    return HiddenFleet(gpus, episodes)


def job(job_id: str, arrival_s: float, gpus: int = 1, work_s: float = 10.0) -> Job:
    return Job(job_id, arrival_s, gpus, 1, JOB_TYPE, work_s)


# ----------------------------------------------------------------- what counts


@pytest.mark.parametrize(
    ("t_s", "throttled"),
    [
        (5.0, False),  # before the episode
        (12.0, False),  # heating, the clock still at max
        (17.5, True),
        (39.0, True),
        (42.5, True),  # cooling, still above the slowdown point
        (43.5, False),  # cooling, clock back
        (60.0, False),  # over
    ],
)
def test_throttled_means_the_clock_is_held_down_by_a_thermal_episode(
    t_s: float, throttled: bool
) -> None:
    assert is_throttled(fleet_of((THERMAL,)), 0, t_s) is throttled


def test_a_slow_but_healthy_gpu_is_not_throttled() -> None:
    assert not is_throttled(fleet_of((), base_speed=0.8), 0, 20.0)


def test_a_placement_counts_once_whatever_number_of_its_gpus_is_throttled() -> None:
    fleet = fleet_of((THERMAL,), (THERMAL,), ())
    placed = [
        Placed("a", 20.0, (0, 1)),  # both throttled
        Placed("b", 20.0, (1, 2)),  # one of two
        Placed("c", 20.0, (2,)),  # healthy
        Placed("d", 5.0, (0,)),  # before the episode
    ]
    share = throttled_share(fleet, placed)
    assert share == Share(placements=4, on_throttled=2, gpus=6, gpus_on_throttled=3)
    assert share.share == 0.5
    assert share.gpu_share == 0.5


# ----------------------------------------------------------------- job durations


@pytest.mark.parametrize(
    ("episodes", "start_s", "work_s", "end_s"),
    [
        (((),), 3.0, 20.0, 23.0),  # healthy: work = seconds
        (((STEP,),), 0.0, 20.0, 30.0),  # 10 s at 1.0, then 10 steps at 0.5
        (((STEP,),), 12.0, 10.0, 32.0),  # all at 0.5
        (((), (STEP,)), 0.0, 20.0, 30.0),  # a gang runs at its slowest GPU
        (((STEP,),), 7.0, 5.0, 14.0),  # speed read at ticks: 3 s at 1.0 (tick 5), then 0.5
    ],
)
def test_a_job_ends_when_its_slowest_gpu_has_done_the_work(
    episodes: tuple[tuple[ScenarioEvent, ...], ...], start_s: float, work_s: float, end_s: float
) -> None:
    fleet = fleet_of(*episodes)
    rows = tuple(range(len(episodes)))
    assert job_end_s(fleet, rows, start_s, work_s, interval_s=5.0) == pytest.approx(end_s)


def test_a_job_on_a_gpu_that_stopped_never_ends() -> None:
    ecc = ScenarioEvent("ecc", start_s=0.0)
    assert job_end_s(fleet_of((ecc,)), (0,), 0.0, 10.0, interval_s=5.0) == math.inf


def test_job_ends_are_the_engines_for_the_same_gpus_and_start() -> None:
    setup = short_setup()
    fleet = setup.hidden_fleet()
    result = simulate(
        setup.jobs, fleet, policy("static"), UnitThroughput(), setup.sim_config(), seed=0
    )
    finished = [o for o in result.outcomes if o.end_s is not None and o.start_s is not None]
    assert len(finished) > 20
    for o in finished:
        assert o.start_s is not None
        end = job_end_s(fleet, o.rows, o.start_s, o.job.work_steps, setup.interval_s)
        assert end == pytest.approx(o.end_s, abs=1e-6), o.job.job_id


# ----------------------------------------------------------------- static baseline


def listing(*nodes: tuple[str, str, int]) -> list[ListedGpu]:
    return [
        ListedGpu(node, f"{node}-{i}", i, model)
        for node, model, count in nodes
        for i in range(count)
    ]


def test_static_is_first_fit_by_node_then_index_and_holds_what_it_gave() -> None:
    gpus = listing(("b", "H100", 4), ("a", "H100", 4))
    static = StaticFirstFit()
    assert static.place(gpus, job("j1", 0, gpus=3)) == ("a-0", "a-1", "a-2")
    assert static.place(gpus, job("j2", 0, gpus=2)) == ("b-0", "b-1")  # a has one left
    assert static.place(gpus, job("j3", 0, gpus=1)) == ("a-3",)
    assert static.place(gpus, job("j4", 0, gpus=4)) is None
    static.release(("a-0", "a-1", "a-2"))
    assert static.place(gpus, job("j4", 0, gpus=3)) == ("a-0", "a-1", "a-2")


def test_static_knows_the_models_catalogue_speed_and_nothing_else() -> None:
    gpus = listing(("a", "A100-80GB", 2), ("b", "H100", 2))
    assert StaticFirstFit().place(gpus, job("j", 0, gpus=2)) == ("b-0", "b-1")


@pytest.mark.parametrize("setup", [short_setup(), hot_aisle_setup()], ids=lambda s: s.name)
def test_the_live_static_schedule_makes_the_offline_static_policys_choices(
    setup: LiveSetup,
) -> None:
    """The event loop the live driver runs, on the fleet's own listing, gives every job
    the GPUs and the start the engine's ``static`` policy gave it."""
    fleet = setup.hidden_fleet()
    offline = predict(setup, "static", [0]).placed[0]
    listing = [ListedGpu(g.node, g.uuid, g.index, g.spec.key) for g in fleet.gpus]
    schedule = StaticSchedule(fleet, setup.jobs, setup.interval_s, setup.horizon_s)
    while schedule.next_s() is not None:
        schedule.step(listing if schedule.needs_listing() else [])
    assert same_choices(schedule.placed, offline) == len(offline) == len(setup.jobs)
    starts = {p.job_id: p.start_s for p in offline}
    assert all(p.start_s == pytest.approx(starts[p.job_id]) for p in schedule.placed)


def test_a_static_job_that_does_not_fit_waits_for_an_end() -> None:
    fleet = fleet_of((), ())
    jobs = [job("a", 0.0, gpus=2, work_s=10.0), job("b", 1.0, gpus=1), job("c", 2.0, gpus=2)]
    schedule = StaticSchedule(fleet, jobs, interval_s=5.0, horizon_s=100.0)
    listing = [ListedGpu(g.node, g.uuid, g.index, g.spec.key) for g in fleet.gpus]
    while schedule.next_s() is not None:
        schedule.step(listing)
    started = {p.job_id: (p.start_s, p.rows) for p in schedule.placed}
    assert started == {"a": (0.0, (0, 1)), "b": (10.0, (0,)), "c": (20.0, (0, 1))}


# ----------------------------------------------------------------- jobs and setups


def test_live_jobs_arrive_at_distinct_mid_interval_instants() -> None:
    jobs = live_jobs(
        np.random.default_rng(3),
        count=20,
        first_s=10,
        last_s=200,
        interval_s=5.0,
        gpus=((1, 0.5), (4, 0.5)),
        work_s=(30, 60),
    )
    arrivals = [j.arrival_s for j in jobs]
    assert arrivals == sorted(set(arrivals))
    assert all(10 <= a <= 200 and (a / 5.0) % 1 == 0.5 for a in arrivals)
    assert {j.gpus_per_node for j in jobs} <= {1, 4}
    assert all(30 <= j.work_steps <= 60 and j.job_type == JOB_TYPE for j in jobs)


def test_live_jobs_refuse_more_jobs_than_arrival_slots() -> None:
    with pytest.raises(ValueError, match="do not fit"):
        live_jobs(
            np.random.default_rng(0),
            count=5,
            first_s=0,
            last_s=10,
            interval_s=5.0,
            gpus=((1, 1.0),),
            work_s=(1, 2),
        )


@pytest.mark.parametrize("setup", [short_setup(), hot_aisle_setup()], ids=lambda s: s.name)
def test_setups_are_seeded_and_throttle_some_gpus_inside_their_horizon(setup: LiveSetup) -> None:
    again = short_setup() if setup.name == "short" else hot_aisle_setup()
    assert again.jobs == setup.jobs
    fleet = setup.hidden_fleet()
    assert len(fleet.gpus) == setup.fleet.nodes * setup.fleet.gpus_per_node
    throttled = {
        r for r in range(len(fleet.gpus)) for t in range(0, int(setup.horizon_s), 5)
        if is_throttled(fleet, r, t)
    }  # fmt: skip
    assert 0 < len(throttled) < len(fleet.gpus) / 2
    assert max(j.arrival_s for j in setup.jobs) < setup.horizon_s


def test_the_short_setup_separates_fairlane_from_static() -> None:
    setup = short_setup()
    fairlane = predict(setup, "fairlane-fastest", [0, 1])
    static = predict(setup, "static", [0])
    assert fairlane.share < static.share
    assert not agreement(static.shares[0], fairlane).agrees  # the tolerance tells them apart


# ----------------------------------------------------------------- agreement


@pytest.mark.parametrize(
    ("k", "n", "low", "high"),
    [
        (0, 10, 0.0, 0.2775),
        (5, 10, 0.2366, 0.7634),
        (10, 10, 0.7225, 1.0),
        (1, 32, 0.0055, 0.1574),
        (39, 100, 0.3002, 0.4880),
    ],
)
def test_wilson_interval(k: int, n: int, low: float, high: float) -> None:
    assert wilson_interval(k, n) == pytest.approx((low, high), abs=1e-4)


def test_wilson_interval_of_nothing_is_everything() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)


def prediction(*shares: float, n: int = 100) -> Prediction:
    parts = tuple(Share(n, round(s * n), n, round(s * n)) for s in shares)
    return Prediction("p", tuple(range(len(shares))), parts, tuple(() for _ in shares))


@pytest.mark.parametrize(
    ("on_throttled", "predicted", "agrees"),
    [
        (39, (0.39,), True),
        (39, (0.31, 0.33), True),  # mean 0.32, inside [0.300, 0.488]
        (39, (0.29,), False),
        (39, (0.50,), False),
        (0, (0.02,), True),  # nothing live: inside [0, 0.037]
        (0, (0.05,), False),
    ],
)
def test_the_prediction_agrees_when_inside_the_live_shares_interval(
    on_throttled: int, predicted: tuple[float, ...], agrees: bool
) -> None:
    result = agreement(Share(100, on_throttled, 100, on_throttled), prediction(*predicted))
    assert isinstance(result, Agreement)
    assert result.agrees is agrees
