"""The dashboard's frames: the API's GPU states, drawn once for the whole fleet, and
diffs that carry only the rows whose visible values moved."""

from __future__ import annotations

from typing import Any

from fairlane_scheduler.core.dashboard import ScoreHistory, diff_frames, rows_of
from fairlane_scheduler.core.fleet import FleetView, StabilityPolicy
from fairlane_scheduler.core.nodes import fleet_gpu_states, gpu_states
from fairlane_scheduler.core.placement import PlacementPolicy
from tests.factories import gpu_score, gpu_speed

NOW = 1_700_000_000_000
POLICY = PlacementPolicy(threshold=0.65, stale_after_s=60)


def fleet_of(*scores: tuple[str, int, float], **extra: object) -> FleetView:
    fleet = FleetView(StabilityPolicy(0.65, 120))
    for node, index, score in scores:
        fleet.apply(
            gpu_score(node=node, uuid=f"GPU-{node}-{index}", index=index, score=score, ts_ms=NOW)
        )
    return fleet


def rows(
    fleet: FleetView, allocated: frozenset[str] = frozenset(), now: int = NOW
) -> dict[str, list[dict[str, Any]]]:
    return rows_of(fleet, fleet_gpu_states(fleet, allocated, POLICY, now))


def test_fleet_states_are_the_per_node_api_answer_for_every_node() -> None:
    fleet = fleet_of(("b", 1, 0.9), ("a", 0, 0.4), ("b", 0, 0.8), ("a", 1, 0.95))
    allocated = frozenset({"GPU-b-1"})
    whole = fleet_gpu_states(fleet, allocated, POLICY, NOW)
    assert list(whole) == ["a", "b"]
    for node in ("a", "b"):
        assert whole[node] == gpu_states(fleet, node, allocated, POLICY, NOW)


def test_cells_name_each_state_the_page_shows() -> None:
    fleet = fleet_of(("a", 0, 0.9), ("a", 1, 0.9), ("a", 2, 0.3), ("a", 3, 0.9))
    fleet.apply(
        gpu_score(
            node="a", uuid="GPU-a-4", index=4, score=0.0, ts_ms=NOW, components={"health_gate": 0.0}
        )
    )
    fleet.apply(gpu_score(node="a", uuid="GPU-a-5", index=5, score=0.9, ts_ms=NOW - 120_000))
    # GPU 3 fell below and came back 10 s ago: cooling for the rest of the window.
    fleet.apply(gpu_score(node="a", uuid="GPU-a-3", index=3, score=0.5, ts_ms=NOW + 1))
    fleet.apply(gpu_score(node="a", uuid="GPU-a-3", index=3, score=0.9, ts_ms=NOW + 2))
    cells = rows(fleet, frozenset({"GPU-a-1"}), now=NOW + 10_000)["a"]
    assert [c["st"] for c in cells] == [
        "free",
        "allocated",
        "below threshold",
        "cooling",
        "health-gated",
        "stale",
    ]
    assert cells[3]["r"] == NOW + 2 + 120_000  # back at the end of the window
    assert cells[4]["c"] == {"health_gate": 0.0}


def test_a_diff_holds_only_rows_that_visibly_changed() -> None:
    fleet = fleet_of(("a", 0, 0.9), ("b", 0, 0.9))
    first = rows(fleet)
    assert diff_frames(None, first) == (first, [])
    # A newer sample with the same score (to the page's precision) changes nothing.
    fleet.apply(gpu_score(node="a", uuid="GPU-a-0", index=0, score=0.90001, ts_ms=NOW + 5000))
    fleet.apply(gpu_score(node="b", uuid="GPU-b-0", index=0, score=0.5, ts_ms=NOW + 5000))
    changed, removed = diff_frames(first, rows(fleet, now=NOW + 5000))
    assert list(changed) == ["b"]
    assert removed == []
    assert changed["b"][0]["st"] == "below threshold"


def test_a_node_that_left_is_named_as_removed() -> None:
    assert diff_frames(
        rows(fleet_of(("a", 0, 0.9), ("b", 0, 0.9))), rows(fleet_of(("a", 0, 0.9)))
    ) == (
        {},
        ["b"],
    )


def test_history_keeps_one_point_per_new_record_and_a_bounded_past() -> None:
    history = ScoreHistory(points=3)
    for ts, score in [(1, 0.9), (1, 0.9), (2, 0.8), (3, 0.7), (4, 0.6)]:
        history.observe([gpu_score(uuid="GPU-x", score=score, ts_ms=NOW + ts)])
    assert history.of("GPU-x") == [(NOW + 2, 0.8), (NOW + 3, 0.7), (NOW + 4, 0.6)]
    assert history.of("GPU-unknown") is None


def test_a_cell_shows_its_learned_speeds_per_class_and_their_change_is_a_diff() -> None:
    fleet = fleet_of(("a", 0, 0.9), ("a", 1, 0.9))
    before = rows(fleet)
    assert "ls" not in before["a"][0]  # nothing learned: nothing on the wire
    for job_class, speed, reports in (("bert", 0.8123, 14), ("resnet50", 1.02, 3)):
        record = gpu_speed(uuid="GPU-a-0", node="a", job_class=job_class, speed=speed)
        fleet.apply_speed(record.model_copy(update={"reports": reports, "confidence": 0.456}))
    after = rows(fleet)
    assert after["a"][0]["ls"] == {"bert": [0.812, 14, 0.46], "resnet50": [1.02, 3, 0.46]}
    assert diff_frames(before, after) == ({"a": after["a"]}, [])
