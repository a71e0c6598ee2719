"""The choice read from the ranked per-node summaries (core/node_ranking.py,
core/placement_summary.py) equals the full scan's (core/placement.py ``choose`` on the
held GPUs), on random fleets and through random changes between decisions: score
records, holds, cordons, GPUs that move or appear, and a clock that ends cooling
windows, turns records stale and goes back, learned speeds; for single nodes and gangs,
with and without model and memory constraints, the job's own model speeds and a job
class, for one replica
and for replicas' shares, with rankings kept across decisions (and evicted: few shapes
at once) and made afresh."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fairlane_scheduler.core.fleet import FleetView, StabilityPolicy
from fairlane_scheduler.core.node_ranking import NodeRankings
from fairlane_scheduler.core.partial_sort import smallest_by
from fairlane_scheduler.core.placement import JobShape, PlacementPolicy, choose
from fairlane_scheduler.core.replica_share import ALONE, ReplicaShare
from tests.factories import GIB, gpu_score, gpu_speed

NOW = 1_700_000_000_000
MODELS = ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB")
NODES, SLOTS = 6, 5

policies = st.builds(
    PlacementPolicy,
    threshold=st.sampled_from([0.5, 0.65]),
    stale_after_s=st.sampled_from([20.0, 600.0]),
    stale=st.sampled_from(["exclude", "last_known"]),
    below_threshold=st.sampled_from(["fail", "best_available"]),
    capacity_resolution=st.sampled_from([0.0, 0.1, 0.5]),
    speed_resolution=st.sampled_from([0.0, 0.05]),
    share=st.sampled_from([ALONE, ALONE, ReplicaShare(2, 1), ReplicaShare(3, 0)]),
)
shapes = st.builds(
    JobShape,
    gpus_per_node=st.integers(1, 3),
    nodes=st.integers(1, 3),
    min_gpu_memory_gib=st.sampled_from([None, None, 60.0]),
    models=st.sampled_from([None, None, frozenset({"H100"}), frozenset({"A100-40GB", "H100"})]),
    policy=st.sampled_from(["fastest", "binpack", "spread"]),
    model_speeds=st.sampled_from([None, None, {"H100": 3.0, "A100-40GB": 1.0}]),
    job_class=st.sampled_from([None, "bert", "bert"]),
)
records = st.tuples(
    st.integers(0, NODES - 1),  # node
    st.integers(0, SLOTS - 1),  # GPU on it
    st.sampled_from([0.0, 0.6, 0.7, 0.7, 0.9, 0.9, 1.0]),  # score (ties on purpose)
    st.integers(0, 1),  # model
    st.sampled_from([False, False, False, True]),  # flagged stale
)
changes = st.one_of(
    st.tuples(st.just("record"), records),
    st.tuples(st.just("hold"), st.integers(0, NODES * SLOTS - 1), st.booleans()),
    st.tuples(st.just("cordon"), st.sets(st.integers(0, NODES - 1), max_size=2)),
    st.tuples(st.just("move"), st.integers(0, NODES * SLOTS - 1), st.integers(0, NODES)),
    st.tuples(st.just("clock"), st.sampled_from([-5_000, 1_000, 15_000, 21_000, 40_000])),
    st.tuples(
        st.just("speed"),
        st.integers(0, NODES * SLOTS - 1),
        st.sampled_from([0.5, 0.8, 0.92, 0.985, 1.0, 1.05]),
    ),
)


def _apply(fleet: FleetView, record: tuple[int, int, float, int, bool], now_ms: int) -> None:
    node, gpu, score, model, stale = record
    _put(fleet, f"n{node}", f"n{node}-{gpu}", gpu, score, model, stale, now_ms)


def _put(
    fleet: FleetView,
    node: str,
    uuid: str,
    index: int,
    score: float,
    model: int,
    stale: bool,
    ts: int,
) -> None:
    speed = (3.0, 1.0)[model]
    fleet.apply(
        gpu_score(
            node=node,
            uuid=uuid,
            index=index,
            model=MODELS[model],
            score=score,
            speed=speed,
            effective_capacity=score * speed,
            stale=stale,
            mem_total_bytes=(80, 40)[model] * GIB,
            ts_ms=ts,
        )
    )


def _same(
    fleet: FleetView,
    kept: list[NodeRankings],
    shape: JobShape,
    policy: PlacementPolicy,
    now: int,
) -> None:
    want = choose(fleet, shape, policy, fleet.held_rows(), now)
    for rankings in (*kept, NodeRankings()):
        assert rankings.choose(fleet, shape, policy, now) == want


@settings(max_examples=250, deadline=None)
@given(
    st.lists(records, min_size=NODES * SLOTS // 2, max_size=3 * NODES * SLOTS),
    policies,
    st.lists(st.tuples(changes, shapes), max_size=25),
)
def test_the_summary_choice_equals_the_full_scan(initial, policy, steps) -> None:  # type: ignore[no-untyped-def]
    fleet = FleetView(StabilityPolicy(threshold=policy.threshold, window_s=30))
    now = NOW
    for record in initial:
        _apply(fleet, record, now)
    # Changed nodes re-ranked as the default does, always with numpy, always one by one.
    kept = [NodeRankings(), NodeRankings(max_shapes=2), NodeRankings(few_nodes=0, few_ranked=0)]
    kept.append(NodeRankings(few_nodes=10**6, few_ranked=10**6))
    for change, shape in steps:
        kind = change[0]
        if kind == "record":
            _apply(fleet, change[1], now)
        elif kind == "hold":
            fleet.hold(f"n{change[1] // SLOTS}-{change[1] % SLOTS}", held=change[2])
        elif kind == "cordon":
            fleet.cordoned = frozenset(f"n{n}" for n in change[1])
        elif kind == "speed":  # learned under bert (maybe before the GPU's first score)
            uuid = f"n{change[1] // SLOTS}-{change[1] % SLOTS}"
            fleet.apply_speed(gpu_speed(uuid=uuid, speed=change[2], ts_ms=now))
        elif kind == "move":  # a GPU shows up on another node (NODES: a new node)
            gpu = change[1] % SLOTS
            _put(fleet, f"n{change[2]}", f"n{change[1] // SLOTS}-{gpu}", gpu, 0.9, 0, False, now)
        else:
            now += change[1]
        _same(fleet, kept, shape, policy, now)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=1, max_size=40),
    st.integers(1, 40),
)
def test_smallest_is_the_head_of_a_lexsort(pairs, count) -> None:  # type: ignore[no-untyped-def]
    first = np.array([a for a, _ in pairs], dtype=float)
    second = np.array([b for _, b in pairs])
    count = min(count, len(pairs))
    for keys in ((first,), (first, second), (second, -first)):
        want = np.lexsort(keys[::-1])[:count]
        assert smallest_by(keys, count).tolist() == want.tolist()


def test_a_clock_that_goes_back_makes_a_stale_gpu_fresh_again() -> None:
    fleet, policy, kept = FleetView(), PlacementPolicy(stale_after_s=20), NodeRankings()
    _put(fleet, "n0", "n0-0", 0, 1.0, 0, False, NOW)
    _put(fleet, "n1", "n1-0", 0, 0.7, 0, False, NOW + 10_000)
    for now, best in ((NOW + 21_000, "n1"), (NOW + 16_000, "n0")):
        choice = kept.choose(fleet, JobShape(1), policy, now)
        assert choice == choose(fleet, JobShape(1), policy, fleet.held_rows(), now)
        assert [n.node for n in choice.nodes] == [best]  # type: ignore[union-attr]
