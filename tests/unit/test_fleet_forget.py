"""A tombstone on the scores topic removes its GPU from the fleet view (issue 35)."""

from __future__ import annotations

import numpy as np

from fairlane_scheduler.core.fleet import FleetView, StabilityPolicy
from fairlane_scheduler.core.nodes import fleet_gpu_states, node_summaries
from fairlane_scheduler.core.placement import Choice, JobShape, PlacementPolicy, choose
from tests.factories import gpu_score, gpu_speed

NOW = 1_700_000_000_000
POLICY = PlacementPolicy(threshold=0.65, stale_after_s=90)


def _fleet() -> FleetView:
    fleet = FleetView(StabilityPolicy(threshold=0.65, window_s=120), capacity=2)
    for node, scores in (("a", [0.7, 0.99]), ("b", [0.8, 0.9])):
        for i, score in enumerate(scores):
            fleet.apply(gpu_score(node=node, uuid=f"{node}-{i}", index=i, score=score, ts_ms=NOW))
    return fleet


def test_a_forgotten_gpu_leaves_every_column_and_the_last_row_takes_its_place() -> None:
    fleet = _fleet()
    fleet.apply_speed(gpu_speed(uuid="b-1", job_class="c", speed=0.5, ts_ms=NOW))
    fleet.hold("b-1")
    layout = fleet.layout
    fleet.forget("a-1")
    assert len(fleet) == 3
    assert "a-1" not in fleet.row
    assert "a-1" not in fleet.records
    assert sorted(fleet.uuids) == ["a-0", "b-0", "b-1"]
    assert all(fleet.uuids[r] == u for u, r in fleet.row.items())
    r = fleet.row["b-1"]  # the last row, moved into the forgotten one's place
    assert (fleet.nodes[fleet.node[r]], fleet.index[r], fleet.score[r]) == ("b", 1, 0.9)
    assert fleet.held[r]
    speeds = fleet.class_speeds("c")
    assert speeds is not None
    assert speeds[r] == 0.5
    assert fleet.layout > layout
    assert {p.uuid for p in fleet.drain_changed()} == {"a-0", "b-0", "b-1"}
    fleet.forget("a-1")  # again (a restarted scorer tombstones once more): nothing
    assert len(fleet) == 3


def test_placement_and_the_summaries_never_see_a_forgotten_gpu() -> None:
    fleet = _fleet()
    fleet.forget("a-1")
    choice = choose(fleet, JobShape(1), POLICY, set(), NOW)
    assert isinstance(choice, Choice)
    assert [fleet.uuids[r] for r in choice.nodes[0].rows] == ["b-1"]
    assert np.isin(fleet.rows_by_node(), np.arange(len(fleet))).all()
    states = fleet_gpu_states(fleet, set(), POLICY, NOW)
    assert {node: [g.uuid for g in gpus] for node, gpus in states.items()} == {
        "a": ["a-0"],
        "b": ["b-0", "b-1"],
    }
    assert [(s.node, s.gpus) for s in node_summaries(fleet, set(), POLICY, NOW)] == [
        ("a", 1),
        ("b", 2),
    ]


def test_a_forgotten_gpu_that_reports_again_comes_back() -> None:
    fleet = _fleet()
    fleet.forget("b-1")
    fleet.apply(gpu_score(node="c", uuid="b-1", index=0, score=0.95, ts_ms=NOW + 1))
    assert len(fleet) == 4
    assert fleet.nodes[fleet.node[fleet.row["b-1"]]] == "c"
