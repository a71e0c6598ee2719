"""Placement events -> the node-allocations table row -> allocation intervals."""

from typing import Any

from fairlane_events.records import GpuSlot, NodeAssignment, PlacementEvent, SlowGpu
from fairlane_scorer.core.allocations import allocations_of, apply_placement
from fairlane_scorer.core.progress import placement_change
from fairlane_scoring.allocation import Allocation
from tests.factories import single_gpu_placement

T0 = 1_700_000_000_000


def event(kind: str, ts_ms: int, pid: str = "p1", **kwargs: Any) -> PlacementEvent:
    nodes = [
        NodeAssignment(
            node=node,
            node_rank=rank,
            gpus=[GpuSlot(uuid=f"{node}-gpu{i}", index=i) for i in range(2)],
            cuda_visible_devices="0,1",
            master_addr="n1",
            master_port=29500,
            world_size=4,
        )
        for rank, node in enumerate(("n1", "n2"))
    ]
    return PlacementEvent(
        schema_="placement/1",
        placement_id=pid,
        job_id="j",
        namespace="ns",
        event=kind,
        ts_ms=ts_ms,
        nodes=nodes,
        **kwargs,
    )


def test_created_then_released_gives_one_closed_interval_per_gpu() -> None:
    state = apply_placement({}, "n1", event("created", T0), 600)
    assert allocations_of(state, "n1-gpu1") == [Allocation(T0)]
    assert allocations_of(state, "n2-gpu1") == []  # another node's GPU
    state = apply_placement(state, "n1", event("released", T0 + 5000), 600)
    assert allocations_of(state, "n1-gpu0") == [Allocation(T0, T0 + 5000)]


def test_redelivered_events_change_nothing() -> None:
    once = apply_placement({}, "n1", event("created", T0), 600)
    assert apply_placement(once, "n1", event("created", T0), 600) == once
    ended = apply_placement(once, "n1", event("expired", T0 + 10), 600)
    assert apply_placement(ended, "n1", event("expired", T0 + 10), 600) == ended


def test_pending_changes_nothing_and_old_ended_placements_are_dropped() -> None:
    state = apply_placement({}, "n1", event("created", T0), 600)
    assert apply_placement(state, "n1", event("pending", T0 + 1), 600) == state
    state = apply_placement(state, "n1", event("failed", T0 + 2), 600)
    later = apply_placement(state, "n1", event("created", T0 + 700_000, pid="p2"), 600)
    assert set(later) == {"p2"}


def test_a_degraded_event_changes_no_allocation() -> None:
    """The scheduler's ``degraded`` (issue 27) is for launchers: the allocation stays."""
    slow = [SlowGpu(uuid="n1-gpu0", node="n1", speed=0.6, source="learned")]
    degraded = event("degraded", T0 + 1, slow_gpus=slow)
    state = apply_placement({}, "n1", event("created", T0), 600)
    assert apply_placement(state, "n1", degraded, 600) == state
    assert placement_change(degraded) is None  # the learner's placement-gpus row too


def test_a_node_without_allocations_has_none() -> None:
    assert allocations_of(None, "n1-gpu0") == []


def test_a_fractional_placement_keeps_its_share_of_each_gpu() -> None:
    created = single_gpu_placement("n1", "n1-gpu0", "created", T0, share=0.25)
    state = apply_placement({}, "n1", created, 600)
    assert allocations_of(state, "n1-gpu0") == [Allocation(T0, None, 0.25, 20 * 1024)]
    ended = created.model_copy(update={"event": "released", "ts_ms": T0 + 10, "nodes": []})
    state = apply_placement(state, "n1", ended, 600)  # an end without its assignment
    assert allocations_of(state, "n1-gpu0") == [Allocation(T0, T0 + 10, 0.25, 20 * 1024)]
    # A row written before shares existed holds whole GPUs.
    old = {"p0": {"start": T0, "end": None, "gpus": ["n1-gpu1"]}}
    assert allocations_of(old, "n1-gpu1") == [Allocation(T0)]
