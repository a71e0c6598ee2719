"""Which placement events start and end simulated jobs."""

from __future__ import annotations

import pytest

from fairlane_agent.placements import apply_placement
from fairlane_events.records import GpuSlot, NodeAssignment, PlacementEvent, SlowGpu
from fairlane_sim.fleet import FleetSimulator, FleetSpec

T0 = 1_700_000_000_000


def event(kind: str, uuid: str, share: float | None = None) -> PlacementEvent:
    node = NodeAssignment(
        node="n",
        node_rank=0,
        gpus=[GpuSlot(uuid=uuid, index=0, share=share)],
        cuda_visible_devices="0",
        master_addr="n",
        master_port=29500,
        world_size=1,
    )
    slow = [SlowGpu(uuid=uuid, node="n", speed=0.6, source="learned")]
    return PlacementEvent(
        schema_="placement/1",
        placement_id="p",
        job_id="j",
        namespace="t",
        event=kind,
        ts_ms=T0,
        nodes=[node],
        slow_gpus=slow if kind == "degraded" else None,
        idle_since_ms=T0 if kind == "idle" else None,
    )


def busy_after(*kinds: str) -> bool:
    sim = FleetSimulator(FleetSpec(nodes=1, gpus_per_node=1, degraded_fraction=0))
    uuid = sim.gpus["sim-node-0000"][0].uuid
    for kind in kinds:
        apply_placement(sim, event(kind, uuid))
    return (sim.sample(T0 + 1000)[0].gpus[0].gpu_util_pct or 0) >= 92


@pytest.mark.parametrize(
    ("kinds", "busy"),
    [
        (("created",), True),
        (("pending",), False),
        (("created", "released"), False),
        (("created", "expired"), False),
        (("created", "failed"), False),
        (("created", "degraded"), True),  # says a GPU is slow; the job runs on
        (("created", "degraded", "released"), False),
        (("created", "idle"), True),  # an idle warning releases nothing
    ],
)
def test_created_starts_a_job_and_released_expired_failed_end_it(
    kinds: tuple[str, ...], busy: bool
) -> None:
    assert busy_after(*kinds) is busy


def test_a_fractional_placement_loads_its_gpu_by_its_share() -> None:
    sim = FleetSimulator(FleetSpec(nodes=1, gpus_per_node=1, degraded_fraction=0))
    uuid = sim.gpus["sim-node-0000"][0].uuid
    apply_placement(sim, event("created", uuid, share=0.25))
    util = sim.sample(T0 + 1000)[0].gpus[0].gpu_util_pct or 0
    assert 23 <= util <= 25
