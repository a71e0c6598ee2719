import pytest

from fairlane_events.records import GpuScore
from fairlane_scheduler.core.fleet import FleetView, StabilityPolicy
from fairlane_scheduler.core.master_port import PortRange, next_free_port
from fairlane_scheduler.core.placement import (
    NOT_ENOUGH_ON_NODE,
    Choice,
    JobShape,
    NoPlacement,
    PlacementPolicy,
    choose,
)
from tests.factories import GIB, gpu_score

NOW = 1_700_000_000_000
POLICY = PlacementPolicy(threshold=0.65, stale_after_s=90)
H100 = "NVIDIA H100 80GB HBM3"


def node(name: str, scores: list[float], model: str = H100, speed: float = 2.6) -> list[GpuScore]:
    return [
        gpu_score(
            node=name, uuid=f"{name}-{i}", index=i, model=model, score=s, speed=speed, ts_ms=NOW
        )
        for i, s in enumerate(scores)
    ]


def fleet_of(*groups: list[GpuScore]) -> FleetView:
    fleet = FleetView(StabilityPolicy(threshold=0.65, window_s=120))
    for group in groups:
        for record in group:
            fleet.apply(record)
    return fleet


def placed(result: Choice | NoPlacement) -> Choice:
    assert isinstance(result, Choice), result
    return result


def chosen_uuids(fleet: FleetView, choice: Choice) -> list[list[str]]:
    return [[fleet.uuids[r] for r in n.rows] for n in choice.nodes]


@pytest.mark.parametrize(
    ("overrides", "shape", "allocated", "reason"),
    [
        ({}, JobShape(1), {"GPU-0000"}, "allocated"),
        ({"stale": True}, JobShape(1), set(), "stale"),
        ({"ts_ms": NOW - 91_000}, JobShape(1), set(), "stale"),
        ({}, JobShape(1, models=frozenset({"A100-80GB"})), set(), "model not allowed"),
        ({"model": "Mystery"}, JobShape(1, models=frozenset({"H100"})), set(), "model not allowed"),
        ({}, JobShape(1, min_gpu_memory_gib=81), set(), "too little memory"),
        ({"mem_total_bytes": None}, JobShape(1, min_gpu_memory_gib=1), set(), "too little memory"),
        ({"score": 0.64}, JobShape(1), set(), "score below threshold"),
    ],
)
def test_each_rejection_reason_is_reported(overrides, shape, allocated, reason) -> None:  # type: ignore[no-untyped-def]
    record = gpu_score(**{"ts_ms": NOW, **overrides})
    result = choose(fleet_of([record]), shape, POLICY, allocated, NOW)
    assert isinstance(result, NoPlacement)
    assert result.reasons == {reason: 1}


def test_a_gpu_at_the_threshold_with_enough_memory_qualifies() -> None:
    fleet = fleet_of([gpu_score(score=0.65, mem_total_bytes=80 * GIB, ts_ms=NOW)])
    placed(choose(fleet, JobShape(1, min_gpu_memory_gib=80), POLICY, set(), NOW))


def test_fastest_node_is_the_one_with_the_best_slowest_gpu() -> None:
    fleet = fleet_of(node("a", [0.99, 0.99, 0.70, 0.70]), node("b", [0.90, 0.90, 0.90, 0.20]))
    choice = placed(choose(fleet, JobShape(3), POLICY, set(), NOW))
    assert chosen_uuids(fleet, choice) == [["b-0", "b-1", "b-2"]]


def test_faster_model_wins_at_equal_scores() -> None:
    fleet = fleet_of(node("v", [0.9] * 4, "Tesla V100-SXM2-32GB", speed=0.5), node("h", [0.9] * 4))
    assert placed(choose(fleet, JobShape(2), POLICY, set(), NOW)).nodes[0].node == "h"


def test_best_gpus_within_the_node_are_taken_and_allocated_ones_skipped() -> None:
    fleet = fleet_of(node("a", [0.70, 0.95, 0.99, 0.80]))
    choice = placed(choose(fleet, JobShape(2), POLICY, {"a-2"}, NOW))
    assert chosen_uuids(fleet, choice) == [["a-1", "a-3"]]


def test_no_placement_counts_reasons() -> None:
    fleet = fleet_of(node("a", [0.9, 0.3]), node("b", [0.2]))
    result = choose(fleet, JobShape(2), POLICY, set(), NOW)
    assert isinstance(result, NoPlacement)
    assert result.reasons == {"score below threshold": 2, NOT_ENOUGH_ON_NODE: 1}
    assert "2 score below threshold" in result.summary()


def test_ties_break_by_node_name() -> None:
    fleet = fleet_of(node("b", [0.9]), node("ab", [0.9]), node("a", [0.9]))
    assert placed(choose(fleet, JobShape(1), POLICY, set(), NOW)).nodes[0].node == "a"


def test_gang_takes_the_best_nodes_or_nothing() -> None:
    fleet = fleet_of(node("a", [0.9, 0.9]), node("b", [0.8, 0.8]), node("c", [0.95, 0.3]))
    gang = placed(choose(fleet, JobShape(2, nodes=2), POLICY, set(), NOW))
    assert [n.node for n in gang.nodes] == ["a", "b"]
    assert gang.min_capacity == pytest.approx(0.8 * 2.6)
    refused = choose(fleet, JobShape(2, nodes=3), POLICY, set(), NOW)
    assert isinstance(refused, NoPlacement)
    assert "need 3 node(s)" in refused.summary()


def test_binpack_fills_partly_used_nodes_and_spread_avoids_them() -> None:
    fleet = fleet_of(node("busy", [0.9] * 4), node("idle", [0.95] * 4))
    allocated = {"busy-0", "busy-1"}
    packed = placed(choose(fleet, JobShape(1, policy="binpack"), POLICY, allocated, NOW))
    assert packed.nodes[0].node == "busy"
    spread = placed(choose(fleet, JobShape(1, policy="spread"), POLICY, allocated, NOW))
    assert spread.nodes[0].node == "idle"
    fastest = placed(choose(fleet, JobShape(1, policy="fastest"), POLICY, allocated, NOW))
    assert fastest.nodes[0].node == "idle"


def test_a_gpu_that_dipped_below_cools_for_the_whole_window() -> None:
    fleet = fleet_of(node("a", [0.9]))
    fleet.apply(gpu_score(node="a", uuid="a-0", score=0.5, ts_ms=NOW + 1000))
    fleet.apply(gpu_score(node="a", uuid="a-0", score=0.9, ts_ms=NOW + 2000))
    shape = JobShape(1)
    policy = PlacementPolicy(threshold=0.65, stale_after_s=3600)
    inside = choose(fleet, shape, policy, set(), NOW + 2000 + 119_999)
    assert isinstance(inside, NoPlacement)
    assert inside.reasons == {"cooling": 1}
    placed(choose(fleet, shape, policy, set(), NOW + 2000 + 120_000))


def test_an_older_record_does_not_roll_a_gpu_back() -> None:
    fleet = fleet_of(node("a", [0.9]))
    assert not fleet.apply(gpu_score(node="a", uuid="a-0", score=0.1, ts_ms=NOW - 1))
    assert fleet.records["a-0"].score == 0.9


def test_the_fleet_grows_past_its_initial_capacity() -> None:
    fleet = FleetView(capacity=2)
    for record in node("a", [0.9] * 5):
        fleet.apply(record)
    assert len(fleet) == 5
    assert fleet.mem_bytes[4] == 80 * GIB
    assert placed(choose(fleet, JobShape(5), POLICY, set(), NOW)).nodes[0].node == "a"


@pytest.mark.parametrize(
    ("used", "expected"),
    [
        (set(), 29500),
        ({29500, 29501}, 29502),
        ({29500, 29502}, 29501),
        (set(range(29500, 29503)), None),
    ],
)
def test_next_free_port(used: set[int], expected: int | None) -> None:
    assert next_free_port(used, PortRange(29500, 29502)) == expected


def test_next_free_port_takes_the_hint_when_it_is_free() -> None:
    assert next_free_port({29500}, PortRange(29500, 29502), hint=29502) == 29502
    assert next_free_port({29502}, PortRange(29500, 29502), hint=29502) == 29500


def test_fail_closed_by_default_and_best_available_falls_back_marked() -> None:
    fleet = fleet_of(node("a", [0.5, 0.6]), node("b", [0.4, 0.3]))
    refused = choose(fleet, JobShape(2), POLICY, set(), NOW)
    assert isinstance(refused, NoPlacement)
    assert refused.reasons == {"score below threshold": 4}
    lenient = PlacementPolicy(threshold=0.65, stale_after_s=90, below_threshold="best_available")
    fallback = placed(choose(fleet, JobShape(2), lenient, set(), NOW))
    assert fallback.fallback
    assert fallback.nodes[0].node == "a"
    healthy = fleet_of(node("c", [0.9, 0.9]))
    assert not placed(choose(healthy, JobShape(2), lenient, set(), NOW)).fallback


def test_fallback_still_respects_allocations_models_and_memory() -> None:
    fleet = fleet_of(node("a", [0.5, 0.6]))
    lenient = PlacementPolicy(threshold=0.65, stale_after_s=90, below_threshold="best_available")
    result = choose(fleet, JobShape(2), lenient, {"a-0"}, NOW)
    assert isinstance(result, NoPlacement)
    wrong_model = choose(fleet, JobShape(1, models=frozenset({"T4"})), lenient, set(), NOW)
    assert isinstance(wrong_model, NoPlacement)


def test_stale_policy_last_known_places_on_old_scores() -> None:
    fleet = fleet_of(node("a", [0.9]))
    later = NOW + 3600_000
    assert isinstance(choose(fleet, JobShape(1), POLICY, set(), later), NoPlacement)
    trusting = PlacementPolicy(threshold=0.65, stale_after_s=90, stale="last_known")
    assert placed(choose(fleet, JobShape(1), trusting, set(), later)).nodes[0].node == "a"


def test_cordoned_nodes_take_no_new_placements() -> None:
    fleet = fleet_of(node("a", [0.99, 0.99]), node("b", [0.8, 0.8]))
    fleet.cordoned = frozenset({"a", "not-in-fleet"})
    choice = placed(choose(fleet, JobShape(2), POLICY, set(), NOW))
    assert choice.nodes[0].node == "b"
    refused = choose(fleet, JobShape(2, nodes=2), POLICY, set(), NOW)
    assert isinstance(refused, NoPlacement)
    assert refused.reasons["cordoned"] == 2
