"""Shares with a job class (issue 37 item 2): the share path ranks GPUs by their learned
speed under the class in the whole-GPU path's rounded steps before the sharing rule, so a
share never lands on a GPU learned slow for its class when a faster one has room; a share
of another class or with none is ranked as before; FGD's packing holds among equally fast
GPUs; and when only slow GPUs have room the share is placed on the best of them and
announced ``degraded``, as a whole-GPU placement is."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fairlane_events.records import SlowGpu
from fairlane_scheduler.adapters.memory_store import MemoryStore
from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.core.placement import speed_step
from fairlane_scheduler.core.placements import Placement, PlacementRequest
from fairlane_scheduler.degraded_watch import DegradedWatch
from fairlane_scheduler.service import PlacementService
from tests.factories import gpu_speed
from tests.unit.test_learned_placement import DEGRADED, NOW, fleet_of, request
from tests.unit.test_placement_service import service_on

SLOW = 0.555  # the demo's compute-bound class on its slow GPU (issue 37)
FREE = {"n0-1", "n1-1"}  # the GPUs no tenant holds (FGD's choice among them)


def share(
    job: str, job_class: str | None, milli: int = 300, on_node: str | None = None
) -> PlacementRequest:
    return replace(request(job, 1, job_class=job_class), gpu_share=milli / 1000, on_node=on_node)


def gpu_of(placement: Placement) -> str:
    ((slot,),) = [node.gpus for node in placement.nodes]
    return slot.uuid


async def _with_tenants(fleet: FleetView) -> PlacementService:
    """A service on ``fleet`` (nodes n0, n1 of two GPUs) where shares without a class
    already hold 0.5 of n0-0 and 0.3 of n1-0: FGD packs a 0.3 share beside one of them,
    n0-0 strictly first (not by a tie-break)."""
    service = service_on(MemoryStore(), fleet)
    for node, milli in (("n0", 500), ("n1", 300)):
        placed, _ = await service.place(share(f"tenant-{node}", None, milli, on_node=node))
        assert gpu_of(placed) == f"{node}-0"
    return service


@pytest.mark.parametrize(
    ("job_class", "speeds", "lands_on"),
    [
        # The must-show: n0-0 is learned slow for bert; FGD prefers it, yet the share
        # takes n1-0, as fast as a GPU with nothing learned.
        ("bert", {"n0-0": SLOW}, {"n1-0"}),
        # Another class, or none: what is learned under bert is not the job's.
        ("resnet50", {"n0-0": SLOW}, {"n0-0"}),
        (None, {"n0-0": SLOW}, {"n0-0"}),
        # Both shared GPUs slow: a free fast GPU beats FGD's packing.
        ("bert", {"n0-0": SLOW, "n1-0": SLOW}, FREE),
        # 1.0 +- noise is one speed step: FGD's packing decides among equally fast GPUs.
        ("bert", {"n0-0": 0.985, "n1-0": 1.01}, {"n0-0"}),
        # 0.95 is a step below 1.0, as for whole GPUs: a free typical GPU goes first.
        ("bert", {"n0-0": 0.9, "n1-0": 0.95}, FREE),
        # Only slow GPUs: the share is placed on the fastest of them, not refused.
        ("bert", {"n0-0": SLOW, "n0-1": SLOW, "n1-0": SLOW, "n1-1": 0.6}, {"n1-1"}),
        # All alike slow: FGD packs among them.
        ("bert", dict.fromkeys(("n0-0", "n0-1", "n1-0", "n1-1"), SLOW), {"n0-0"}),
    ],
)
async def test_a_share_lands_on_the_fastest_step_for_its_class_then_packs(
    job_class: str | None, speeds: dict[str, float], lands_on: set[str]
) -> None:
    fleet = fleet_of({"n0": [1.0, 1.0], "n1": [1.0, 1.0]})
    service = await _with_tenants(fleet)
    for uuid, speed in speeds.items():
        fleet.apply_speed(gpu_speed(uuid=uuid, node=uuid.rsplit("-", 1)[0], speed=speed))
    placed, _ = await service.place(share("job", job_class))
    assert gpu_of(placed) in lands_on


async def test_a_slow_gpu_without_room_leaves_the_share_to_the_fast_ones() -> None:
    """Room first: a slow GPU with room beats none (the fast shared GPUs are too full
    for 0.8), and a fast GPU with room beats a slow one."""
    fleet = fleet_of({"n0": [1.0, 1.0], "n1": [1.0, 1.0]}, {"n0-1": SLOW, "n1-1": SLOW})
    service = await _with_tenants(fleet)
    placed, _ = await service.place(share("big", "bert", milli=800))
    assert gpu_of(placed) in FREE  # learned slow, but only they have 0.8 free
    placed, _ = await service.place(share("small", "bert", milli=200))
    assert gpu_of(placed) in {"n0-0", "n1-0"}


async def test_a_share_on_a_gpu_learned_slow_is_announced_degraded() -> None:
    """As a whole-GPU placement: placed when nothing faster has room, then told."""
    fleet = fleet_of({"n0": [1.0]}, {"n0-0": SLOW})
    store = MemoryStore()
    placed, _ = await service_on(store, fleet).place(share("job", "bert"))
    watch = DegradedWatch(store=store, fleet=fleet, policy=DEGRADED, clock_ms=lambda: NOW)
    assert await watch.check() == [SlowGpu(uuid="n0-0", node="n0", speed=SLOW, source="learned")]
    (event,) = [e for e in store.events if e.event == "degraded"]
    assert event.placement_id == placed.id


@pytest.mark.parametrize(
    ("speed", "resolution", "step"),
    [
        (1.0, 0.05, -20),
        (0.985, 0.05, -20),  # rounded, not floored: noise around 1.0 is one step
        (0.97, 0.05, -19),
        (0.555, 0.05, -11),
        (0.555, 0.0, -0.555),  # resolution 0: the exact speed
    ],
)
def test_speed_step_rounds_to_the_nearest_step(
    speed: float, resolution: float, step: float
) -> None:
    assert speed_step(speed, resolution) == pytest.approx(step)
