"""The placement decision alone (not a test): CPU per decision of the full scan
(``choose``) and of the ranked per-node summaries (``NodeRankings.choose``) on fleets of
8-GPU nodes, in the placement benchmark's pattern: jobs of 1-4 GPUs, each one's GPUs
held once decided, 16 of them live at a time (the oldest released as a new one comes),
so every decision sees the holds of the one before. Scores as bench/scheduler_place.py
draws them (uniform 0.5-1.0, so about 30 % of the GPUs are below the threshold).
``--release-batch 8`` frees the released GPUs 8 placements at a time, as the service's
group commit does (bench/scheduler_place.py: several nodes change between two decisions).
``--replicas 3`` decides as replica 0 of 3 does (its share of the nodes first).
``--job-class`` gives every GPU a learned speed under one class (uniform 0.8-1.05) and
every job that class (issue 27: score x learned speed, the speed step).

    .venv/bin/python -m bench.scheduler_decision --sizes 1000,10000,100000
"""

from __future__ import annotations

import argparse
import collections
import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from bench.scheduler_place import GPUS_PER_NODE, synthetic_score
from fairlane_eval.core.policy_view import speed_record
from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.core.node_ranking import NodeRankings
from fairlane_scheduler.core.placement import Choice, JobShape, NoPlacement, PlacementPolicy, choose
from fairlane_scheduler.core.replica_share import ReplicaShare

NOW_MS = 1_700_000_000_000
POLICY = PlacementPolicy(stale_after_s=3600)


_CLASS = "bert"


def fleet_of(gpus: int, job_class: str | None = None) -> FleetView:
    fleet = FleetView()
    rng = np.random.default_rng(0)
    for i in range(gpus):
        score = synthetic_score("node", i, float(rng.uniform(0.5, 1.0)), NOW_MS)
        fleet.apply(score)
        if job_class is not None:
            speed = float(rng.uniform(0.8, 1.05))
            learned = speed_record(
                score.uuid, score.node, score.model, job_class=job_class, speed=speed, ts_ms=NOW_MS
            )
            fleet.apply_speed(learned)
    return fleet


def cpu_per_decision_us(
    fleet: FleetView,
    decide: Callable[[JobShape, int], Choice | NoPlacement],
    calls: int,
    release_batch: int = 1,
    job_class: str | None = None,
) -> float:
    """Mean CPU per decision after a warm-up (the rankings' first build excluded)."""
    live: collections.deque[list[str]] = collections.deque()
    released: list[str] = []
    spent = 0.0
    for n in range(calls + 100):
        started = time.process_time()
        choice = decide(JobShape(gpus_per_node=1 + n % 4, job_class=job_class), NOW_MS + n)
        if n >= 100:
            spent += time.process_time() - started
        assert isinstance(choice, Choice), choice
        gpus = [fleet.uuids[r] for node in choice.nodes for r in node.rows]
        for uuid in gpus:
            fleet.hold(uuid)
        live.append(gpus)
        if len(live) > 16:
            released += live.popleft()
        if n % release_batch == 0:
            for uuid in released:
                fleet.hold(uuid, held=False)
            released.clear()
    return 1e6 * spent / calls


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--release-batch", type=int, default=1, help="placements freed at once")
    parser.add_argument("--replicas", type=int, default=1, help="decide as replica 0 of these")
    parser.add_argument("--job-class", action="store_true", help="learned speeds and a class")
    args = parser.parse_args()
    policy = replace(POLICY, share=ReplicaShare(args.replicas, 0))
    job_class = _CLASS if args.job_class else None
    for gpus in (int(s) for s in args.sizes.split(",")):
        fleet = fleet_of(gpus, job_class)
        scan, ranked = both_ways(fleet, args.calls, args.release_batch, policy, job_class)
        nodes = -(-gpus // GPUS_PER_NODE)
        print(
            f"{gpus:>7,} GPUs ({nodes:,} nodes): full scan {scan:,.0f} us, "
            f"ranked summaries {ranked:,.0f} us CPU per decision"
        )


def both_ways(
    fleet: FleetView,
    calls: int,
    release_batch: int = 1,
    policy: PlacementPolicy = POLICY,
    job_class: str | None = None,
) -> tuple[float, float]:
    """CPU per decision of the full scan, then of the ranked summaries, on ``fleet``."""
    rankings = NodeRankings()

    def scan(shape: JobShape, now_ms: int) -> Choice | NoPlacement:
        return choose(fleet, shape, policy, fleet.held_rows(), now_ms)

    def ranked(shape: JobShape, now_ms: int) -> Choice | NoPlacement:
        return rankings.choose(fleet, shape, policy, now_ms)

    return (
        cpu_per_decision_us(fleet, scan, calls, release_batch, job_class),
        cpu_per_decision_us(fleet, ranked, calls, release_batch, job_class),
    )


if __name__ == "__main__":
    main()
