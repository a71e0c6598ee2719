"""Invariants of the decision core, on random fleets (hypothesis)."""

import itertools
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.core.placement import Choice, JobShape, NoPlacement, PlacementPolicy, choose
from tests.factories import gpu_score

NOW = 1_700_000_000_000
POLICY = PlacementPolicy(threshold=0.65, stale_after_s=90)

scores = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
fleets = st.lists(st.lists(scores, min_size=1, max_size=6), min_size=1, max_size=6)
shapes = st.builds(
    JobShape,
    gpus_per_node=st.integers(1, 4),
    nodes=st.integers(1, 3),
    policy=st.sampled_from(["fastest", "binpack", "spread"]),
)


def build(fleet_scores: list[list[float]], speeds: list[float]) -> FleetView:
    fleet = FleetView()
    for n, node_scores in enumerate(fleet_scores):
        speed = speeds[n % len(speeds)]
        for i, s in enumerate(node_scores):
            fleet.apply(
                gpu_score(node=f"n{n}", uuid=f"n{n}-{i}", index=i, score=s, speed=speed, ts_ms=NOW)
            )
    return fleet


def feasible_nodes(
    fleet: FleetView, shape: JobShape, allocated: set[str]
) -> dict[str, list[float]]:
    """Brute force: per node, the capacities of its qualifying GPUs, best first."""
    per_node: dict[str, list[float]] = {}
    for uuid, r in fleet.row.items():
        if uuid not in allocated and fleet.score[r] >= POLICY.threshold:
            per_node.setdefault(fleet.nodes[fleet.node[r]], []).append(float(fleet.capacity[r]))
    return {
        n: sorted(c, reverse=True) for n, c in per_node.items() if len(c) >= shape.gpus_per_node
    }


@settings(max_examples=300, deadline=None)
@given(fleets, st.lists(st.floats(0.2, 6.0), min_size=1, max_size=3), shapes, st.data())
def test_placement_invariants(fleet_scores, speeds, shape, data) -> None:  # type: ignore[no-untyped-def]
    fleet = build(fleet_scores, speeds)
    allocated = set(data.draw(st.sets(st.sampled_from(fleet.uuids))))
    result = choose(fleet, shape, POLICY, allocated, NOW)
    feasible = feasible_nodes(fleet, shape, allocated)
    if isinstance(result, NoPlacement):
        # All or nothing: refused only when fewer nodes than the gang needs can take it.
        assert len(feasible) < shape.nodes
        return
    assert isinstance(result, Choice)
    rows = [r for n in result.nodes for r in n.rows]
    uuids = [fleet.uuids[r] for r in rows]
    assert len(set(uuids)) == len(uuids) == shape.nodes * shape.gpus_per_node  # no GPU twice
    assert len({n.node for n in result.nodes}) == shape.nodes  # one slot per node of the gang
    assert not set(uuids) & allocated
    assert all(fleet.score[r] >= POLICY.threshold for r in rows)
    for n in result.nodes:
        assert {fleet.nodes[fleet.node[r]] for r in n.rows} == {n.node}
    if shape.policy == "fastest":
        # No other feasible gang has a better slowest GPU, beyond the capacity resolution
        # (differences inside one step count as ties, packed as binpack does).
        best = max(
            min(feasible[n][shape.gpus_per_node - 1] for n in combo)
            for combo in itertools.combinations(feasible, shape.nodes)
        )
        step = POLICY.capacity_resolution
        assert math.floor(result.min_capacity / step + 1e-9) >= math.floor(best / step + 1e-9)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 400), scores), min_size=1, max_size=20),
    st.integers(0, 600),
)
def test_cooling_never_readmits_inside_the_window(steps, probe_after_s) -> None:  # type: ignore[no-untyped-def]
    """After the last record below the threshold, the GPU stays out until it has been
    at or above it for the whole window (120 s)."""
    fleet = FleetView()
    ts = NOW
    history = []
    for gap_s, score in steps:
        ts += gap_s * 1000
        fleet.apply(gpu_score(score=score, ts_ms=ts))
        history.append((ts, score))
    now = ts + probe_after_s * 1000
    result = choose(fleet, JobShape(1), PlacementPolicy(0.65, 10**9), set(), now)
    below = [t for t, s in history if s < 0.65]
    if history[-1][1] < 0.65:
        assert isinstance(result, NoPlacement)
    elif below:
        recovered = min(t for t, s in history if t > below[-1])
        assert isinstance(result, Choice) == (now - recovered >= 120_000)
    else:
        assert isinstance(result, Choice)
