"""The few-node paths of the ranked decision (core/node_summary.py ``_refresh_few`` and
``_update_holds``, core/node_ranking.py ``_rank_few`` and ``head``) choose as the full
scan does, on a fleet big enough for both ways of each to run: batches of holds and
releases of 1 to 40 nodes (as a group commit frees them), score records, cordons and a
clock that turns records stale, between decisions of several shapes in turn, so a
ranking catches up over one or many refreshes. Scores repeat on purpose (ties to the
GPU index and node name), and gangs of up to 8 nodes compare the order of the ranking
beyond its head (a gang reads the ranking of its shape with one node)."""

from __future__ import annotations

import random

import pytest

from fairlane_events.records import GpuScore
from fairlane_scheduler.core.fleet import FleetView, StabilityPolicy
from fairlane_scheduler.core.node_ranking import NodeRankings
from fairlane_scheduler.core.placement import Choice, JobShape, PlacementPolicy, choose
from tests.factories import gpu_score

NOW = 1_700_000_000_000
NODES, SLOTS = 48, 4
SHAPES = (
    JobShape(1),
    JobShape(2, nodes=3),
    JobShape(1, nodes=8, policy="binpack"),
    JobShape(3, policy="spread"),
    JobShape(2, nodes=2, policy="binpack"),
    JobShape(1, nodes=5, model_speeds={"H100": 2.0}),
)


@pytest.mark.parametrize("resolution", [0.1, 0.0])
def test_few_node_paths_choose_as_the_full_scan(resolution: float) -> None:
    rng = random.Random(int(resolution * 10) + 1)
    policy = PlacementPolicy(stale_after_s=60, capacity_resolution=resolution)
    fleet = FleetView(StabilityPolicy(threshold=0.65, window_s=20))
    now = NOW
    for node in range(NODES):
        for gpu in range(SLOTS):
            fleet.apply(_score(rng, node, gpu, now))
    uuids = [f"n{n}-{g}" for n in range(NODES) for g in range(SLOTS)]
    names = [f"n{n:02}" for n in range(NODES)]
    # The defaults (few nodes in plain Python), and every refresh and ranking with numpy.
    kept = [NodeRankings(), NodeRankings(few_nodes=0, few_ranked=0)]
    decided = 0
    for step in range(400):
        action = rng.random()
        if action < 0.6:  # a batch of holds and releases over up to 40 nodes
            for uuid in rng.sample(uuids, rng.choice([1, 1, 2, 3, 6, 12, 40])):
                fleet.hold(uuid, held=rng.random() < 0.5)
        elif action < 0.8:
            for _ in range(rng.choice([1, 2, 20])):
                fleet.apply(_score(rng, rng.randrange(NODES), rng.randrange(SLOTS), now))
        elif action < 0.85:
            fleet.cordoned = frozenset(rng.sample(names, rng.randrange(3)))
        else:  # records turn stale (60 s) as time goes by
            now += rng.choice([1_000, 10_000, 30_000])
        for shape in rng.sample(SHAPES, rng.randrange(1, 3)):
            want = choose(fleet, shape, policy, fleet.held_rows(), now)
            for rankings in kept:
                assert rankings.choose(fleet, shape, policy, now) == want, (step, shape)
            decided += isinstance(want, Choice)
    assert decided > 300  # mostly placements, not refusals


def _score(rng: random.Random, node: int, gpu: int, ts_ms: int) -> GpuScore:
    score = rng.choice([0.5, 0.7, 0.7, 0.8, 0.9, 0.9, 1.0])
    return gpu_score(
        node=f"n{node:02}",
        uuid=f"n{node}-{gpu}",
        index=gpu,
        score=score,
        speed=2.0,
        effective_capacity=score * 2.0,
        stale=rng.random() < 0.03,
        ts_ms=ts_ms,
    )
