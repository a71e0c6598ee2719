"""Jobs Fairlane places load the simulated GPUs they run on (the loop DESIGN closes)."""

from __future__ import annotations

import pytest

from fairlane_events.records import GpuSample
from fairlane_sim.errors import ScenarioError
from fairlane_sim.fleet import JOB_RAMP_S, FleetSimulator, FleetSpec
from fairlane_sim.scenario import ScenarioEvent

T0 = 1_700_000_000_000


def fleet() -> FleetSimulator:
    return FleetSimulator(
        FleetSpec(nodes=1, gpus_per_node=2, models=("H100",), degraded_fraction=0)
    )


def gpu_at(sim: FleetSimulator, seconds: float, index: int = 0) -> GpuSample:
    return sim.sample(T0 + int(seconds * 1000))[0].gpus[index]


def test_a_placed_job_loads_its_gpu_warms_it_and_leaves_the_other_idle() -> None:
    sim = fleet()
    job_gpu = sim.gpus["sim-node-0000"][0]
    idle = gpu_at(sim, 0)
    sim.start_job("p-1", [job_gpu.uuid], T0 + 10_000)
    busy = gpu_at(sim, 10 + JOB_RAMP_S)
    other = gpu_at(sim, 10 + JOB_RAMP_S + 1, index=1)
    assert (busy.gpu_util_pct or 0) >= 92
    assert (busy.sm_active or 0) >= 0.92
    assert (busy.mem_used_bytes or 0) >= 0.6 * (busy.mem_total_bytes or 1)
    assert (busy.temp_c or 0) == pytest.approx(80, abs=1)  # 10 degrees under slowdown (90)
    assert (busy.temp_c or 0) > (idle.temp_c or 0) + 30
    assert busy.clock_event_reasons == 0  # warm, not throttling
    assert sim.true_speed[job_gpu.uuid] == job_gpu.base_speed
    assert (other.gpu_util_pct or 0) < 5


def test_an_ended_job_frees_the_gpu_which_then_cools_down() -> None:
    sim = fleet()
    uuid = sim.gpus["sim-node-0000"][0].uuid
    sim.start_job("p-1", [uuid], T0)
    gpu_at(sim, 0)
    sim.end_job("p-1", T0 + 300_000)
    just_after = gpu_at(sim, 301)
    cooled = gpu_at(sim, 300 + JOB_RAMP_S + 1)
    assert (just_after.gpu_util_pct or 0) < 5
    assert (just_after.temp_c or 0) > 70  # still warm
    assert (cooled.temp_c or 0) < 50


def test_finished_jobs_are_forgotten_and_replays_are_ignored() -> None:
    sim = fleet()
    uuid = sim.gpus["sim-node-0000"][0].uuid
    for i in range(50):
        sim.start_job(f"p-{i}", [uuid], T0 + i * 1000)
        sim.start_job(f"p-{i}", [uuid], T0 + i * 1000)  # a replayed event
        sim.end_job(f"p-{i}", T0 + i * 1000 + 500)
    sim.end_job("never-started", T0)
    gpu_at(sim, 0)
    gpu_at(sim, 50 + JOB_RAMP_S + 1)
    assert len(sim._touched) == 1  # only the (empty) degraded-GPU event is left


def test_jobs_for_gpus_of_another_fleet_change_nothing() -> None:
    a, b = fleet(), fleet()
    b.start_job("p-1", ["GPU-somewhere-else"], T0)
    assert [a.sample(T0 + s * 1000) for s in range(3)] == [
        b.sample(T0 + s * 1000) for s in range(3)
    ]


def test_fractional_jobs_load_their_gpu_in_proportion_to_their_shares_added_up() -> None:
    sim, whole = fleet(), fleet()
    uuid = sim.gpus["sim-node-0000"][0].uuid
    for started in (sim, whole):
        gpu_at(started, 0)  # the simulation's clock starts at its first sample
    sim.start_job("quarter", [uuid], T0, share=0.25)
    quarter = gpu_at(sim, JOB_RAMP_S)
    assert 0.23 <= (quarter.sm_active or 0) <= 0.25
    assert (quarter.mem_used_bytes or 0) <= 0.25 * (quarter.mem_total_bytes or 1)
    sim.start_job("half", [uuid], T0 + int(JOB_RAMP_S * 1000), share=0.5)
    both = gpu_at(sim, 2 * JOB_RAMP_S + 1)
    assert 0.69 <= (both.sm_active or 0) <= 0.75  # three quarters of a whole job's load
    whole.start_job("whole", [uuid], T0)
    hotter = gpu_at(whole, 2 * JOB_RAMP_S + 1)
    assert (quarter.temp_c or 0) < (both.temp_c or 0) < (hotter.temp_c or 0)
    sim.end_job("quarter", T0 + int(2 * JOB_RAMP_S * 1000) + 2000)
    sim.end_job("half", T0 + int(2 * JOB_RAMP_S * 1000) + 2000)
    assert (gpu_at(sim, 2 * JOB_RAMP_S + 3).sm_active or 0) < 0.05


def test_a_job_share_out_of_range_is_refused() -> None:
    with pytest.raises(ScenarioError, match="job_share"):
        ScenarioEvent("job", job_share=0.0)
