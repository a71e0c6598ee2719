"""Scenario events in the simulated fleet: what NVML would show, and the hidden truth."""

from __future__ import annotations

import numpy as np
import pytest

from fairlane_events.gpu_models import CATALOG
from fairlane_events.records import GpuSample
from fairlane_scoring.config import ScoreConfig
from fairlane_scoring.reference import reference_score
from fairlane_sim.fleet import FleetSimulator, FleetSpec
from fairlane_sim.physics import (
    CLOCK_EVENT_HW_THERMAL,
    CLOCK_EVENT_SW_POWER_CAP,
    CLOCK_EVENT_SW_THERMAL,
)
from fairlane_sim.scenario import (
    SHIPPED,
    Scenario,
    ScenarioError,
    ScenarioEvent,
    parse_scenario,
    shipped_scenario,
)
from fairlane_sim.variability import measured_speeds

T0 = 1_700_000_000_000


def one_gpu(model: str, *events: ScenarioEvent) -> FleetSimulator:
    spec = FleetSpec(nodes=1, gpus_per_node=1, models=(model,), degraded_fraction=0, seed=5)
    return FleetSimulator(spec, Scenario(events=events))


def at(sim: FleetSimulator, seconds: float) -> tuple[GpuSample, float]:
    (record,) = sim.sample(T0 + int(seconds * 1000))
    (gpu,) = record.gpus
    return gpu, sim.true_speed[gpu.uuid]


def run(sim: FleetSimulator, seconds: list[float]) -> list[tuple[GpuSample, float]]:
    return [at(sim, s) for s in seconds]


def test_thermal_episode_heats_throttles_with_reason_bits_and_recovers() -> None:
    sim = one_gpu("H100", ScenarioEvent("thermal", start_s=60, duration_s=300, ramp_s=60))
    base = sim.gpus["sim-node-0000"][0].base_speed
    (before, _), (hot, hot_speed), (after, after_speed) = run(sim, [0, 200, 500])
    assert before.clock_event_reasons == 0
    assert hot.clock_event_reasons == CLOCK_EVENT_SW_THERMAL | CLOCK_EVENT_HW_THERMAL
    assert hot.temp_c is not None
    assert hot.temp_c >= CATALOG["H100"].slowdown_temp_c
    assert hot.sm_clock_mhz == round(0.55 * 1980)
    assert hot_speed == pytest.approx(0.55 * base, abs=1e-4)
    assert after.clock_event_reasons == 0
    assert after_speed == pytest.approx(base, abs=1e-4)


def test_thermal_ramp_raises_temperature_before_the_clock_drops() -> None:
    sim = one_gpu("V100", ScenarioEvent("thermal", start_s=0, ramp_s=100))
    gpus = [g for g, _ in run(sim, [0, 30, 60, 90])]
    temps = [g.temp_c or 0.0 for g in gpus]
    assert temps == sorted(temps)
    assert gpus[1].clock_event_reasons == 0  # warm, not yet throttling
    assert (gpus[3].clock_event_reasons or 0) & CLOCK_EVENT_SW_THERMAL


def test_power_cap_lowers_the_limit_and_the_clock() -> None:
    sim = one_gpu("A100-80GB", ScenarioEvent("power_cap", start_s=0, limit_fraction=0.5))
    gpu, speed = at(sim, 0)
    assert gpu.power_limit_w == 200.0
    assert gpu.power_w is not None
    assert gpu.power_w <= 200.0
    assert gpu.clock_event_reasons == CLOCK_EVENT_SW_POWER_CAP
    assert speed == pytest.approx(sim.gpus["sim-node-0000"][0].base_speed * 0.5 ** (1 / 3))


def test_noisy_neighbour_loads_a_free_gpu_and_halves_what_a_job_would_get() -> None:
    sim = one_gpu("H100", ScenarioEvent("noisy_neighbour", start_s=10, duration_s=60, share=0.5))
    base = sim.gpus["sim-node-0000"][0].base_speed
    (quiet, _), (noisy, noisy_speed), (gone, _) = run(sim, [0, 30, 100])
    assert quiet.gpu_util_pct is not None
    assert quiet.gpu_util_pct < 5
    assert noisy.gpu_util_pct is not None
    assert noisy.gpu_util_pct >= 70
    assert noisy.sm_active is not None
    assert noisy.sm_active >= 0.7
    assert noisy.mem_used_bytes is not None
    assert noisy.mem_total_bytes is not None
    assert noisy.mem_used_bytes >= 0.4 * noisy.mem_total_bytes
    assert noisy.clock_event_reasons == 0  # busy, not throttled
    assert noisy_speed == pytest.approx(0.5 * base)
    assert gone.gpu_util_pct is not None
    assert gone.gpu_util_pct < 5


def test_spikes_are_isolated_full_utilisation_that_do_not_change_true_speed() -> None:
    sim = one_gpu("H100", ScenarioEvent("spike", probability=0.1))
    readings = run(sim, [i * 5 for i in range(400)])
    spikes = [g for g, _ in readings if g.gpu_util_pct == 100.0]
    assert 20 <= len(spikes) <= 60
    assert {speed for _, speed in readings} == {sim.gpus["sim-node-0000"][0].base_speed}


@pytest.mark.parametrize(("model", "remaps"), [("A100-80GB", True), ("V100", None)])
def test_ecc_errors_count_up_and_stay_rows_pending_only_where_remapping_exists(
    model: str, remaps: bool | None
) -> None:
    sim = one_gpu(model, ScenarioEvent("ecc", start_s=60, duration_s=120, errors=2))
    (before, ok), (during, broken), (after, _) = run(sim, [0, 90, 300])
    assert (before.ecc_uncorrected_volatile, during.ecc_uncorrected_volatile) == (0, 2)
    assert after.ecc_uncorrected_volatile == 2  # volatile: until the GPU is reset
    assert during.remapped_rows_pending is remaps
    assert ok > 0
    assert broken == 0.0


def test_silent_node_stops_reporting_for_the_window_only() -> None:
    spec = FleetSpec(nodes=3, gpus_per_node=2, degraded_fraction=0)
    sim = FleetSimulator(
        spec, Scenario(events=(ScenarioEvent("silent", nodes=(1,), start_s=10, duration_s=20),))
    )
    reporting = [{r.node for r in sim.sample(T0 + s * 1000)} for s in (0, 15, 29, 30)]
    assert reporting[0] == reporting[3] == {"sim-node-0000", "sim-node-0001", "sim-node-0002"}
    assert reporting[1] == reporting[2] == {"sim-node-0000", "sim-node-0002"}


def test_fraction_picks_that_share_of_the_selected_gpus_with_the_seed() -> None:
    spec = FleetSpec(nodes=10, gpus_per_node=8, degraded_fraction=0, seed=2)
    event = ScenarioEvent("noisy_neighbour", fraction=0.25)
    busy = [
        {
            g.uuid
            for r in FleetSimulator(spec, Scenario(events=(event,))).sample(T0)
            for g in r.gpus
            if (g.gpu_util_pct or 0) >= 70
        }
        for _ in range(2)
    ]
    assert len(busy[0]) == 20
    assert busy[0] == busy[1]


def test_same_seed_and_scenario_give_the_same_records_and_truth() -> None:
    def trace() -> tuple[list[object], dict[str, float]]:
        sim = FleetSimulator(FleetSpec(nodes=4, seed=9), shipped_scenario("hot-aisle"))
        return [sim.sample(T0 + i * 30_000) for i in range(20)], dict(sim.true_speed)

    assert trace() == trace()


def test_base_speeds_follow_the_measured_pal_distribution() -> None:
    """Quantiles of 16,000 simulated GPUs within 0.5 % (absolute speed) of PAL's 336."""
    sim = FleetSimulator(FleetSpec(nodes=2000, gpus_per_node=8, degraded_fraction=0, seed=1))
    simulated = np.array([g.base_speed for gpus in sim.gpus.values() for g in gpus])
    measured = np.array(measured_speeds())
    q = [0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99]
    assert np.quantile(simulated, q) == pytest.approx(np.quantile(measured, q), abs=0.005)
    assert simulated.min() >= measured.min()
    assert simulated.max() <= measured.max()


def test_score_falls_during_a_hot_aisle_and_recovers_after() -> None:
    sim = FleetSimulator(FleetSpec(nodes=8, degraded_fraction=0), shipped_scenario("hot-aisle"))
    config = ScoreConfig(interval_s=30.0)
    hot = {g.uuid for g in sim.gpus["sim-node-0000"]}
    history = [
        (T0 + s * 1000, g)
        for s in range(0, 1501, 30)
        for r in sim.sample(T0 + s * 1000)
        for g in r.gpus
        if g.uuid in hot
    ]

    def worst_score(seconds: int) -> float:
        now = T0 + seconds * 1000
        return min(
            reference_score(
                [(t, g) for t, g in history if g.uuid == u and t <= now], now, config
            ).score
            for u in hot
        )

    assert worst_score(150) > 0.85  # heating, not throttling yet
    assert worst_score(630) < config.threshold  # throttled for minutes
    assert worst_score(1500) > 0.9  # cooled down


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_scenarios_parse_and_run(name: str) -> None:
    scenario = shipped_scenario(name)
    sim = FleetSimulator(
        FleetSpec(**{**scenario.fleet, "models": tuple(scenario.fleet["models"])}), scenario
    )
    assert sim.sample(T0)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[[events]]\nkind = 'meteor'", "unknown event kind 'meteor'"),
        ("[[events]]\nkind = 'thermal'\nclock_factor = 2.0", "out of range: clock_factor"),
        ("[[events]]\nkind = 'spike'\nwhen = 3", "unknown keys: events[0].when"),
        ("[[events]]\nstart_s = 3", "events[0]: missing kind"),
        ("[fleet]\nracks = 3", "unknown keys: fleet.racks"),
        ("name = ", "not TOML"),
    ],
)
def test_invalid_scenarios_say_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ScenarioError, match=says.replace("[", r"\[").replace("]", r"\]")):
        parse_scenario(text)


def test_unknown_shipped_scenario_lists_the_shipped_ones() -> None:
    with pytest.raises(ScenarioError, match="shipped: calm, hot-aisle"):
        shipped_scenario("tornado")


def scores_over(
    sim: FleetSimulator, uuids: set[str], seconds: list[int], step_s: int = 30
) -> dict[int, dict[str, float]]:
    """The reference score of each GPU in ``uuids`` at each of ``seconds``."""
    config = ScoreConfig(interval_s=float(step_s))
    history: dict[str, list[tuple[int, GpuSample]]] = {u: [] for u in uuids}
    out: dict[int, dict[str, float]] = {}
    for s in range(0, max(seconds) + 1, step_s):
        ts = T0 + s * 1000
        for g in (g for r in sim.sample(ts) for g in r.gpus if g.uuid in uuids):
            history[g.uuid].append((ts, g))
        if s in seconds:
            out[s] = {u: reference_score(h, ts, config).score for u, h in history.items()}
    return out


def test_noisy_tenant_gpus_score_lower_than_quiet_ones_while_busy() -> None:
    sim = FleetSimulator(FleetSpec(nodes=8, degraded_fraction=0), shipped_scenario("noisy-tenant"))
    every = {g.uuid for gpus in sim.gpus.values() for g in gpus}
    scores = scores_over(sim, every, [240])[240]
    busy = {u for u, speed in sim.true_speed.items() if speed < 0.7}
    assert len(busy) == 16  # a quarter of 64, sharing half of the GPU
    assert max(scores[u] for u in busy) < min(scores[u] for u in every - busy)


def test_failing_gpu_drops_to_zero_and_the_capped_node_scores_lower() -> None:
    sim = FleetSimulator(FleetSpec(nodes=4, degraded_fraction=0), shipped_scenario("failing-gpu"))
    node0, node1, node3 = (sim.gpus[f"sim-node-000{n}"] for n in (0, 1, 3))
    watched = {g.uuid for g in [*node0, *node1, *node3]}
    scores = scores_over(sim, watched, [90, 600, 900])
    assert scores[90][node0[3].uuid] > 0.9
    assert scores[600][node0[3].uuid] < 0.1  # the health gate; healthy samples fading out
    assert scores[900][node0[3].uuid] == 0.0  # only gated samples left in the 10 min window
    assert sim.true_speed[node0[3].uuid] == 0.0
    capped = max(scores[600][g.uuid] for g in node1)
    assert capped < min(scores[600][g.uuid] for g in node3)
