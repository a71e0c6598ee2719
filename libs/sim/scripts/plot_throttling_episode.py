"""Draw one simulated thermal throttling episode: SM clock, temperature, true speed.

    .venv/bin/python libs/sim/scripts/plot_throttling_episode.py docs/sim-throttling-episode.png

One H100 in the hot-aisle shape: heats up over 120 s from t = 60 s, throttles for ten
minutes, cools over 120 s; a sample every 5 s. Needs matplotlib (a dev dependency).
"""

from __future__ import annotations

import sys

import matplotlib as mpl

mpl.use("Agg")
import matplotlib.pyplot as plt

from fairlane_sim.fleet import FleetSimulator, FleetSpec
from fairlane_sim.physics import CLOCK_EVENT_HW_THERMAL, CLOCK_EVENT_SW_THERMAL
from fairlane_sim.scenario import Scenario, ScenarioEvent

T0 = 1_700_000_000_000
EPISODE = ScenarioEvent("thermal", start_s=60, duration_s=600, ramp_s=120, clock_factor=0.5)


def main(out: str) -> None:
    spec = FleetSpec(nodes=1, gpus_per_node=1, models=("H100",), degraded_fraction=0, seed=3)
    sim = FleetSimulator(spec, Scenario(name="one episode", events=(EPISODE,)))
    times, clock, temp, speed, reasons = [], [], [], [], []
    for s in range(0, 1021, 5):
        (gpu,) = sim.sample(T0 + s * 1000)[0].gpus
        times.append(s)
        clock.append(gpu.sm_clock_mhz)
        temp.append(gpu.temp_c)
        speed.append(sim.true_speed[gpu.uuid])
        reasons.append(gpu.clock_event_reasons or 0)
    g = sim.gpus["sim-node-0000"][0]

    fig, (ax_clock, ax_temp, ax_speed) = plt.subplots(3, 1, sharex=True, figsize=(8, 6.5))
    fig.suptitle("Simulated thermal throttling episode (H100, fairlane_sim)")
    ax_clock.plot(times, clock, color="tab:blue")
    ax_clock.axhline(g.spec.max_sm_clock_mhz, ls="--", color="grey", lw=0.8, label="max SM clock")
    ax_clock.set_ylabel("SM clock (MHz)")
    ax_clock.legend(loc="lower right", fontsize=8)
    ax_temp.plot(times, temp, color="tab:red")
    ax_temp.axhline(g.spec.slowdown_temp_c, ls="--", color="grey", lw=0.8, label="slowdown")
    ax_temp.set_ylabel("temperature (°C)")
    ax_temp.legend(loc="lower right", fontsize=8)
    ax_speed.plot(times, speed, color="tab:green", label="true speed (hidden)")
    ax_speed.axhline(g.base_speed, ls="--", color="grey", lw=0.8, label="base speed (PAL draw)")
    ax_speed.set_ylim(0, 1.2)
    ax_speed.set_ylabel("true speed")
    ax_speed.set_xlabel("seconds since first sample")
    ax_speed.legend(loc="lower right", fontsize=8)
    for bit, colour, label in (
        (CLOCK_EVENT_SW_THERMAL, "orange", "SW thermal slowdown"),
        (CLOCK_EVENT_HW_THERMAL, "red", "HW thermal slowdown"),
    ):
        on = [t for t, r in zip(times, reasons, strict=True) if r & bit]
        if on:
            ax_clock.axvspan(min(on), max(on), color=colour, alpha=0.12, label=label)
    ax_clock.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1])
