import pytest

from fairlane_events.records import GpuScore
from fairlane_scheduler.core.placement import (
    Choice,
    JobShape,
    NoPlacement,
    PlacementPolicy,
    choose_node,
    gpu_rejection,
)
from fairlane_scheduler.core.ports import next_free_port
from tests.factories import GIB, gpu_score

NOW = 1_700_000_000_000
POLICY = PlacementPolicy(threshold=0.65, stale_after_s=90)


def node(name: str, scores: list[float], model: str = "NVIDIA H100 80GB HBM3") -> list[GpuScore]:
    return [
        gpu_score(node=name, uuid=f"{name}-{i}", index=i, model=model, score=s, ts_ms=NOW)
        for i, s in enumerate(scores)
    ]


@pytest.mark.parametrize(
    ("overrides", "shape", "allocated", "reason"),
    [
        ({}, JobShape(1), set(), None),
        ({}, JobShape(1), {"GPU-0000"}, "allocated"),
        ({"stale": True}, JobShape(1), set(), "stale"),
        ({"ts_ms": NOW - 91_000}, JobShape(1), set(), "stale"),
        ({}, JobShape(1, models=frozenset({"A100-80GB"})), set(), "model not allowed"),
        (
            {"model": "Mystery GPU"},
            JobShape(1, models=frozenset({"H100"})),
            set(),
            "model not allowed",
        ),
        ({}, JobShape(1, min_gpu_memory_gib=81), set(), "too little memory"),
        ({"mem_total_bytes": None}, JobShape(1, min_gpu_memory_gib=1), set(), "too little memory"),
        ({"score": 0.64}, JobShape(1), set(), "score below threshold"),
        ({"score": 0.65}, JobShape(1), set(), None),
    ],
)
def test_gpu_rejection_reasons(overrides, shape, allocated, reason) -> None:  # type: ignore[no-untyped-def]
    assert gpu_rejection(gpu_score(**overrides), shape, POLICY, allocated, NOW) == reason


def test_fastest_node_is_the_one_with_the_best_slowest_gpu() -> None:
    fleet = node("a", [0.99, 0.99, 0.70, 0.70]) + node("b", [0.90, 0.90, 0.90, 0.20])
    choice = choose_node(fleet, JobShape(3), POLICY, set(), NOW)
    assert isinstance(choice, Choice)
    assert choice.node == "b"
    assert {g.index for g in choice.gpus} == {0, 1, 2}


def test_faster_model_wins_at_equal_scores() -> None:
    fleet = node("v", [0.9] * 4, "Tesla V100-SXM2-32GB") + [
        gpu_score(node="h", uuid=f"h-{i}", index=i, score=0.9, speed=2.6, ts_ms=NOW)
        for i in range(4)
    ]
    v = [g.model_copy(update={"speed": 0.5, "effective_capacity": 0.45}) for g in fleet[:4]]
    choice = choose_node(v + fleet[4:], JobShape(2), POLICY, set(), NOW)
    assert isinstance(choice, Choice)
    assert choice.node == "h"


def test_best_gpus_within_the_node_are_taken_and_allocated_ones_skipped() -> None:
    fleet = node("a", [0.70, 0.95, 0.99, 0.80])
    choice = choose_node(fleet, JobShape(2), POLICY, {"a-2"}, NOW)
    assert isinstance(choice, Choice)
    assert [g.uuid for g in choice.gpus] == ["a-1", "a-3"]


def test_no_placement_counts_reasons() -> None:
    fleet = node("a", [0.9, 0.3]) + node("b", [0.2])
    result = choose_node(fleet, JobShape(2), POLICY, set(), NOW)
    assert isinstance(result, NoPlacement)
    assert result.reasons == {
        "score below threshold": 2,
        "on a node without enough qualifying GPUs": 1,
    }
    assert "2 score below threshold" in result.summary()


def test_ties_break_by_node_name() -> None:
    fleet = node("b", [0.9]) + node("a", [0.9]) + node("ab", [0.9])
    choice = choose_node(fleet, JobShape(1), POLICY, set(), NOW)
    assert isinstance(choice, Choice)
    assert choice.node == "a"


def test_memory_filter_uses_gib() -> None:
    assert (
        gpu_rejection(gpu_score(mem_total_bytes=80 * GIB), JobShape(1, 80), POLICY, (), NOW) is None
    )


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
    assert next_free_port(used, 29500, 29502) == expected
