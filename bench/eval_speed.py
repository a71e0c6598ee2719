"""The evaluator's own speed: the 10,000-job Philly trace on a 1,000-GPU cluster.

    .venv/bin/python -m bench.eval_speed [--policies static,fairlane-fastest,oracle-fastest]

Prints, per policy, the wall time of one trial (the target: under 5 minutes on this
2-core machine), the simulated NVML samples it scored, and its samples per second as a
ratio to the bare per-sample path measured in the same run (physics + the scorer's
window + the score record, the product code every sample goes through): what the event
loop, the placement decisions and the laziness cost or save beyond it.
"""

from __future__ import annotations

import argparse
import time

from fairlane_eval.core.cluster import ClusterSpec, HiddenFleet
from fairlane_eval.core.engine import simulate
from fairlane_eval.core.experiment import Setup, hidden_fleet
from fairlane_eval.core.faults import FaultModel
from fairlane_eval.core.fleet_variability import default_variability
from fairlane_eval.core.metrics import summarise
from fairlane_eval.core.policies import policy
from fairlane_eval.core.sim_types import SimConfig
from fairlane_eval.core.telemetry import ScoreKeeper
from fairlane_eval.core.throughputs import shipped_throughputs
from fairlane_eval.core.traces import load_shipped_trace

TARGET_S = 300.0


def bare_samples_per_s(config: SimConfig, gpus: int = 64, ticks: int = 200) -> float:
    """Samples per second through physics, the scorer's window and the score record
    alone, on a fleet with episodes, every tick of every GPU."""
    fleet = HiddenFleet.build(
        ClusterSpec((("V100", gpus // 8),)),
        default_variability(),
        FaultModel(rate_scale=20),
        ticks * config.interval_s,
        1,
    )
    keeper = ScoreKeeper(fleet, config.score, 1)
    started = time.perf_counter()
    taken = 0
    for row in range(len(fleet.gpus)):
        taken += len(keeper.advance(row, ticks))
    return taken / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--policies", default="static,fairlane-fastest,oracle-fastest")
    parser.add_argument("--nodes", type=int, default=125, help="V100 nodes of 8 (1,000 GPUs)")
    parser.add_argument("--rate", type=float, default=1.0, help="fail-slow rate x default")
    args = parser.parse_args()
    throughputs = shipped_throughputs()
    jobs = tuple(load_shipped_trace("philly-10k", throughputs, 0))
    config = SimConfig()
    setup = Setup(
        "philly-10k",
        jobs,
        ClusterSpec((("V100", args.nodes),)),
        throughputs,
        default_variability(),
        FaultModel(rate_scale=args.rate),
        config,
    )
    bare = bare_samples_per_s(config)
    print(f"{len(jobs)} jobs on {setup.cluster.gpus} GPUs, fail-slow rate x{args.rate:g}")
    print(f"bare per-sample path: {bare:,.0f} samples/s")
    for name in args.policies.split(","):
        started = time.perf_counter()
        fleet = hidden_fleet(setup, 0)
        result = simulate(setup.jobs, fleet, policy(name), throughputs, config, seed=0)
        wall = time.perf_counter() - started
        summary = summarise(result)
        rate = result.samples_taken / wall
        print(
            f"{name:18s} wall {wall:6.1f} s = {wall / TARGET_S:.2f} x the 5-minute target; "
            f"{summary.finished} jobs finished; {result.samples_taken:,} samples scored, "
            f"{rate:,.0f}/s = {rate / bare:.2f} x the bare path"
        )


if __name__ == "__main__":
    main()
