"""Per-node summaries kept current (core/node_summary.py): a decision made from
summaries that were refreshed after every change equals one made from summaries built
from scratch, through score records, holds, cordons, moves and a clock that ends
cooling windows and turns records stale."""

import random
from collections.abc import Iterator

import numpy as np
import pytest

from fairlane_events.records import GpuScore
from fairlane_scheduler.core import few_nodes, node_summary
from fairlane_scheduler.core import fleet as fleet_module
from fairlane_scheduler.core.extender import judge_nodes
from fairlane_scheduler.core.fleet import FleetView, StabilityPolicy
from fairlane_scheduler.core.node_ranking import NodeRankings
from fairlane_scheduler.core.node_summary import NodeSummaries
from fairlane_scheduler.core.placement import JobShape, PlacementPolicy, choose
from tests.factories import GIB, gpu_score

POLICIES = (
    PlacementPolicy(threshold=0.65, stale_after_s=30),
    PlacementPolicy(threshold=0.5, stale="last_known"),
)
SHAPES = (
    JobShape(1),
    JobShape(2),
    JobShape(3, models=frozenset({"H100"})),
    JobShape(2, min_gpu_memory_gib=60),
)
MODELS = ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB")
NOW = 1_700_000_000_000


def _record(rng: random.Random, node: int, gpu: int, ts_ms: int) -> GpuScore:
    mixed = node % 3 == 0  # every third node mixes models and sizes
    model = MODELS[gpu % 2 if mixed else 0]
    return gpu_score(
        node=f"n{node}",
        uuid=f"n{node}-{gpu}",
        index=gpu,
        model=model,
        score=rng.choice([0.0, 0.3, 0.6, 0.7, 0.9, 1.0]),
        stale=rng.random() < 0.05,
        mem_total_bytes=(40 if "40GB" in model else 80) * GIB,
        ts_ms=ts_ms,
    )


def _same(fleet: FleetView, kept: list[NodeSummaries], names: list[str], now_ms: int) -> None:
    """``kept``: one per policy (a summary follows one policy at a time)."""
    held = np.array([i % 2 for i in range(len(fleet.nodes))], dtype=np.int64)
    for policy, summaries in zip(POLICIES, kept, strict=True):
        for shape in SHAPES:
            got, want = (
                judge_nodes(
                    fleet, s, shape=shape, policy=policy, held=held, now_ms=now_ms, node_names=names
                )
                for s in (summaries, NodeSummaries(few_nodes=0))
            )
            assert got.fits.tolist() == want.fits.tolist(), (shape, policy)
            assert got.unresolvable.tolist() == want.unresolvable.tolist()
            assert got.min_capacity.tolist() == want.min_capacity.tolist()
            assert got.reasons == want.reasons


def _changes(rng: random.Random, fleet: FleetView, names: list[str], steps: int) -> Iterator[int]:
    """Random score records, holds, cordons, moves, forgotten GPUs and clock steps on
    ``fleet`` (8 nodes of 4 GPUs first): the clock after each."""
    for n in range(8):
        for g in range(4):
            fleet.apply(_record(rng, n, g, NOW))
    now = NOW
    for _ in range(steps):
        action = rng.random()
        if action < 0.5:
            n, g = rng.randrange(8), rng.randrange(4)
            fleet.apply(_record(rng, n, g, now))
        elif action < 0.65:
            fleet.hold(f"n{rng.randrange(8)}-{rng.randrange(4)}", held=rng.random() < 0.6)
        elif action < 0.72:
            fleet.cordoned = frozenset(rng.sample(names, 2))
        elif action < 0.75:  # a snapshot of the committed rows: many holds change at once
            held = {f"n{rng.randrange(8)}-{g}" for g in range(2)}
            for uuid in list(fleet.row):
                fleet.hold(uuid, held=uuid in held)
        elif action < 0.77:  # a GPU shows up on another node (or a new one)
            fleet.apply(_record(rng, rng.randrange(9), 5, now))
        elif action < 0.79:  # a GPU is forgotten (a tombstone), maybe to come back
            fleet.forget(rng.choice(fleet.uuids))
        else:
            now += rng.choice([1000, 5000, 15_000])  # cooling windows end, records age
        yield now


@pytest.mark.parametrize("logs", ["default", "tiny"])
def test_summaries_refreshed_after_each_change_equal_ones_built_afresh(
    logs: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if logs == "tiny":  # the fleet's and the summaries' logs of changes overflow often
        monkeypatch.setattr(fleet_module, "TOUCH_LOG", 2)
        monkeypatch.setattr(node_summary, "RECENT_REFRESHES", 1)
    rng = random.Random(7)
    fleet = FleetView(StabilityPolicy(threshold=0.65, window_s=20))
    kept = [NodeSummaries() for _ in POLICIES]
    names = [f"n{n}" for n in range(9)]  # n8: never scored
    for now in _changes(rng, fleet, names, 150):
        _same(fleet, kept, names, now)


def test_few_nodes_in_plain_python_equal_the_numpy_summaries() -> None:
    """Each node's summary from core/few_nodes.py, value for value, as the numpy way of
    a whole-fleet refresh computes it (cooling, stale, held, cordoned, mixed, moved)."""
    rng = random.Random(11)
    fleet = FleetView(StabilityPolicy(threshold=0.65, window_s=20))
    names = [f"n{n}" for n in range(9)]
    for step, now in enumerate(_changes(rng, fleet, names, 300)):
        policy = POLICIES[step % 2]
        summaries = NodeSummaries(few_nodes=0)
        summaries.refresh(fleet, policy, now)  # every node with numpy
        nodes = list(range(len(fleet.nodes)))
        rows = summaries.rows[nodes].tolist()
        cordoned = summaries.cordoned[nodes].tolist()
        found = few_nodes.summarise(fleet, policy, rows, cordoned, now)
        for node, got in zip(nodes, found, strict=True):
            assert got.tally == summaries.tally[node].tolist(), (step, node)
            assert got.capacity == summaries.capacity[node].tolist()
            assert got.ranked == summaries.ranked[:, node].tolist()
            assert (got.size, got.model) == (summaries.size[node], summaries.model[node])
            assert (got.mem_lo, got.mem_hi) == (summaries.mem_lo[node], summaries.mem_hi[node])
            assert got.due == summaries.due[node]


@pytest.mark.parametrize("logs", ["default", "tiny"])
def test_rankings_kept_across_changes_choose_as_the_full_scan(
    logs: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rankings that follow the summaries by their log of recomputed nodes (or, too far
    behind, by every node's stamp) choose what the full scan does."""
    if logs == "tiny":
        monkeypatch.setattr(fleet_module, "TOUCH_LOG", 2)
        monkeypatch.setattr(node_summary, "RECENT_REFRESHES", 1)
    rng = random.Random(5)
    fleet = FleetView(StabilityPolicy(threshold=0.65, window_s=20))
    names = [f"n{n}" for n in range(9)]
    rankings, policy = NodeRankings(), POLICIES[0]
    for step, now in enumerate(_changes(rng, fleet, names, 300)):
        # Two shapes in turn for a few decisions, then another two: rankings one, two
        # and many refreshes behind.
        k = (step // 7 + step % 2) % 3
        shape = JobShape(1 + k, nodes=1 + k % 2, policy=("fastest", "binpack")[k % 2])
        want = choose(fleet, shape, policy, fleet.held_rows(), now)
        assert rankings.choose(fleet, shape, policy, now) == want, step


def _fields(summaries: NodeSummaries) -> list[list[object]]:
    return [
        getattr(summaries, name).tolist()
        for name in ("tally", "capacity", "ranked", "due", "size", "model", "mem_lo", "mem_hi")
    ]


@pytest.mark.parametrize("few", [0, node_summary.FEW_NODES])
def test_holds_and_releases_updated_in_place_equal_summaries_built_afresh(
    few: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches of holds and releases over several nodes (as a group commit frees them),
    between records, cordons and clock steps: summaries that update the held nodes in
    place hold every value a summary built from scratch does, and did update in place."""
    in_place: list[int] = []
    update = NodeSummaries._update_holds

    def counted(self: NodeSummaries, fleet: FleetView, nodes: list[int]) -> list[int]:
        left = update(self, fleet, nodes)
        in_place.append(len(nodes) - len(left))
        return left

    monkeypatch.setattr(NodeSummaries, "_update_holds", counted)
    rng = random.Random(3)
    fleet = FleetView(StabilityPolicy(threshold=0.65, window_s=20))
    names = [f"n{n}" for n in range(9)]
    kept = [NodeSummaries(few_nodes=few) for _ in POLICIES]
    uuids = [f"n{n}-{g}" for n in range(8) for g in range(4)]
    for step, now in enumerate(_changes(rng, fleet, names, 200)):
        if step % 3 == 0:  # a batch: some GPUs held, others freed, on up to 8 nodes
            for uuid in rng.sample(uuids, rng.randrange(1, 12)):
                fleet.hold(uuid, held=rng.random() < 0.5)
        for policy, summaries in zip(POLICIES, kept, strict=True):
            summaries.refresh(fleet, policy, now)
            afresh = NodeSummaries(few_nodes=0)
            afresh.refresh(fleet, policy, now)
            assert _fields(summaries) == _fields(afresh), (step, policy)
    assert sum(in_place) > 50


def test_a_fleet_with_no_scores_yet_is_summarised_as_empty() -> None:
    """As at a scheduler's start, before the first score record: no node, no error."""
    fleet = FleetView(StabilityPolicy(threshold=0.65, window_s=20))
    for policy in POLICIES:
        summaries = NodeSummaries()
        summaries.refresh(fleet, policy, NOW)
        assert summaries.unknown == 0
