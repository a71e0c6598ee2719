"""The dashboard's frames: the API's GPU states, drawn once for the whole fleet, and
diffs that carry only the rows whose visible values moved; a GPU that fractional
placements share shows their share, count and memory, from the placement ledger."""

from __future__ import annotations

from typing import Any

from fairlane_scheduler.core.dashboard import ScoreHistory, diff_frames, placement_row, rows_of
from fairlane_scheduler.core.fleet import FleetView, StabilityPolicy
from fairlane_scheduler.core.ledger import Holding, Ledger
from fairlane_scheduler.core.nodes import fleet_gpu_states, gpu_states
from fairlane_scheduler.core.placement import PlacementPolicy
from fairlane_scheduler.core.placements import Placement
from fairlane_scheduler.core.shares import GpuUse
from tests.factories import gpu_score, gpu_speed, single_gpu_placement

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


def holding(pid: str, uuid: str, share: GpuUse | None = None) -> Holding:
    return Holding(pid, "team", "a", 29500, (uuid,), ("H100-80GB",), share)


def ledger_rows(fleet: FleetView, ledger: Ledger) -> dict[str, list[dict[str, Any]]]:
    return rows_of(fleet, fleet_gpu_states(fleet, ledger.gpus, POLICY, NOW), ledger)


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


def test_a_shared_gpu_shows_its_tenants_share_and_memory_and_a_whole_one_does_not() -> None:
    fleet = fleet_of(("a", 0, 0.9), ("a", 1, 0.9), ("a", 2, 0.9))
    ledger = Ledger(fleet)
    ledger.commit(holding("s1", "GPU-a-0", GpuUse(300, 4096, 1)))
    ledger.reserve(holding("s2", "GPU-a-0", GpuUse(250, 2048, 1)))  # in flight: counted
    ledger.commit(holding("w1", "GPU-a-1"))
    before = ledger_rows(fleet, ledger)
    shared, whole, free = before["a"]
    assert shared["sh"] == [0.55, 2, 6144, 80 * 1024]  # memory as the score record reports
    assert shared["st"] == whole["st"] == "allocated"  # the filter's state, as the API says
    assert "sh" not in whole
    assert "sh" not in free
    # A tenant leaving is a visible change; the last one leaving frees the GPU.
    ledger.release("s1")
    after = ledger_rows(fleet, ledger)
    assert after["a"][0]["sh"] == [0.25, 1, 2048, 80 * 1024]
    assert diff_frames(before, after) == ({"a": after["a"]}, [])
    ledger.unreserve("s2")
    assert ledger_rows(fleet, ledger)["a"][0] == rows(fleet)["a"][0]


def test_a_shared_gpu_without_a_reported_memory_shows_its_models() -> None:
    fleet = FleetView(StabilityPolicy(0.65, 120))
    fleet.apply(
        gpu_score(
            node="a", uuid="GPU-a-0", model="A100-40GB", mem_total_bytes=0, score=0.9, ts_ms=NOW
        )
    )
    ledger = Ledger(fleet)
    ledger.commit(holding("s1", "GPU-a-0", GpuUse(500, 20480, 1)))
    ledger.commit(holding("s2", "GPU-gone", GpuUse(500, 1, 1)))  # not in the fleet: no cell
    assert ledger_rows(fleet, ledger)["a"][0]["sh"] == [0.5, 1, 20480, 40 * 1024]


def test_a_fractional_placement_is_listed_with_its_share_and_memory() -> None:
    def placement(share: float | None) -> Placement:
        event = single_gpu_placement("a", "GPU-a-0", "created", NOW, share=share)
        return Placement("p", "job", "team", "placed", NOW, tuple(event.nodes), "f")

    fractional = placement_row(placement(0.3))
    assert (fractional["gpus"], fractional["share"], fractional["memory_mib"]) == (1, 0.3, 24576)
    whole = placement_row(placement(None))
    assert (whole["gpus"], whole["share"], whole["memory_mib"]) == (1, None, None)
