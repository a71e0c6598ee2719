"""Fractional placements in the service over the in-memory store (issue 29): shares of
one GPU pack onto GPUs already shared, whole-GPU jobs never land on a shared GPU, the
answer carries the share, its memory and the environment that keeps the job inside
them, the store refuses an over-committed GPU as Postgres does, and quotas count shares."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fairlane_scheduler.adapters.memory_store import MemoryStore
from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.core.master_port import PortRange
from fairlane_scheduler.core.placement import PlacementPolicy
from fairlane_scheduler.core.placements import Placement, PlacementRequest
from fairlane_scheduler.core.quota import Quota
from fairlane_scheduler.core.share_decision import (
    _on_nodes_with_room,
    _one_of_each_untouched_kind,
    _subset,
)
from fairlane_scheduler.core.shares import share_env
from fairlane_scheduler.core.sharing import GpuRoom, RoomTable, ShareAsk, SharingRule, rank_rooms
from fairlane_scheduler.errors import AllocationConflictError, NoCapacityError, QuotaExceededError
from fairlane_scheduler.service import PlacementService
from tests.factories import GIB, gpu_score
from tests.unit.test_learned_placement import request

NOW = 1_700_000_000_000
PORTS = PortRange(29500, 29999)


def _service(
    store: MemoryStore, gpus: int = 4, new_id: Callable[[], str] | None = None
) -> PlacementService:
    fleet = FleetView()
    for i in range(gpus):
        fleet.apply(gpu_score(node="n0", uuid=f"g{i}", index=i, score=0.9, ts_ms=NOW))
    ids = (f"00000000-0000-0000-0000-{i:012d}" for i in itertools.count(1))
    new_id = new_id or (lambda: next(ids))
    return PlacementService(
        store=store,
        fleet=fleet,
        policy=PlacementPolicy(threshold=0.65, stale_after_s=90),
        ports=PORTS,
        clock_ms=lambda: NOW,
        is_fleet_ready=lambda: True,
        new_id=new_id,
    )


def _request(
    job: str, share: float | None = None, memory_mib: int | None = None, gpus: int = 1
) -> PlacementRequest:
    return replace(request(job, gpus, job_class=None), gpu_share=share, gpu_memory_mib=memory_mib)


def _slots(placement: Placement) -> list[tuple[str, float | None, int | None]]:
    return [(g.uuid, g.share, g.memory_mib) for n in placement.nodes for g in n.gpus]


async def test_shares_pack_onto_a_shared_gpu_and_whole_jobs_avoid_it() -> None:
    service = _service(MemoryStore())
    first, _ = await service.place(_request("a", 0.5))
    second, _ = await service.place(_request("b", 0.25, memory_mib=1024))
    ((gpu, share, memory),) = _slots(first)
    assert (share, memory) == (0.5, 40 * 1024)  # the share of an 80 GiB GPU's memory
    assert _slots(second) == [(gpu, 0.25, 1024)]  # packed beside the first, not on a free GPU
    whole, _ = await service.place(_request("w", gpus=3))
    assert gpu not in {uuid for uuid, _, _ in _slots(whole)}
    with pytest.raises(NoCapacityError):
        await service.place(_request("w2"))  # the only GPU left is shared
    third, _ = await service.place(_request("c", 0.25))
    assert _slots(third) == [(gpu, 0.25, 20 * 1024)]
    with pytest.raises(NoCapacityError, match="room for a share"):
        await service.place(_request("d", 0.001))  # full: 0.5 + 0.25 + 0.25


async def test_a_released_share_frees_its_part_of_the_gpu() -> None:
    service = _service(MemoryStore(), gpus=1)
    held, _ = await service.place(_request("a", 0.75))
    with pytest.raises(NoCapacityError):
        await service.place(_request("b", 0.5))
    await service.release(held.id)
    again, _ = await service.place(_request("b", 0.5))
    assert _slots(again) == [("g0", 0.5, 40 * 1024)]
    await service.release(again.id)
    whole, _ = await service.place(_request("w"))  # no tenant left: whole again
    assert _slots(whole) == [("g0", None, None)]


async def test_memory_beyond_what_is_left_on_the_gpu_goes_elsewhere() -> None:
    service = _service(MemoryStore(), gpus=2)
    first, _ = await service.place(_request("a", 0.25, memory_mib=70 * 1024))
    second, _ = await service.place(_request("b", 0.25, memory_mib=20 * 1024))
    assert _slots(first)[0][0] != _slots(second)[0][0]  # 70 + 20 GiB pass 80 GiB


async def test_the_answer_says_what_the_job_sets_to_stay_inside_its_share() -> None:
    placement, _ = await _service(MemoryStore()).place(_request("a", 0.3, memory_mib=8192))
    (node,) = placement.nodes
    assert node.env == share_env(300, 8192, 80 * 1024)
    assert node.env is not None
    assert node.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "30"
    assert node.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=8192M"
    assert node.env["FAIRLANE_GPU_MEMORY_FRACTION"] == "0.100"
    assert node.cuda_visible_devices == str(node.gpus[0].index)
    assert placement.shared_gpu_memory_mib == 80 * 1024


def test_the_env_never_rounds_a_share_up() -> None:
    env = share_env(1, 1, 3 * GIB // 2**20)
    assert (env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], env["XLA_PYTHON_CLIENT_MEM_FRACTION"]) == (
        "1",
        "0.000",
    )
    assert share_env(999, 2047, 2048)["FAIRLANE_GPU_MEMORY_FRACTION"] == "0.999"


async def test_the_store_refuses_a_share_that_would_overcommit_the_gpu() -> None:
    """As migration 0015's ledger: a decision made on a stale view loses its race."""
    store = MemoryStore()
    service = _service(store, gpus=1)
    held, _ = await service.place(_request("a", 0.75))
    decided, _ = await _service(MemoryStore(), gpus=1).place(_request("b", 0.5))
    stale = replace(decided, namespace="team", job_id="b2")
    with pytest.raises(AllocationConflictError):
        await store.create(stale, _request("b2", 0.5), PORTS)
    memory = replace(held, id="00000000-0000-0000-0000-00000000beef", job_id="m")
    slot = memory.nodes[0].gpus[0].model_copy(update={"share": 0.25, "memory_mib": 50 * 1024})
    node = memory.nodes[0].model_copy(update={"gpus": [slot], "master_port": 29600})
    with pytest.raises(AllocationConflictError):  # 0.75 + 0.25 fit, 60 + 50 GiB do not
        await store.create(replace(memory, nodes=(node,)), _request("m", 0.25), PORTS)


async def test_a_quota_counts_a_share_as_its_part_of_a_gpu() -> None:
    store = MemoryStore()
    await store.set_quota("team", Quota(max_gpus=1))
    service = _service(store)
    await service.resync()
    await service.place(_request("a", 0.5))
    await service.place(_request("b", 0.5))
    with pytest.raises(QuotaExceededError):
        await service.place(_request("c", 0.25))
    assert (await service.quota("team"))[1] == {"H100": 1.0}


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 5), st.integers(0, 1000), st.integers(0, 4)),
        min_size=1,
        max_size=40,
    ),
    st.integers(1, 1000),
)
def test_leaving_out_nodes_without_room_changes_no_choice(
    gpus: list[tuple[int, int, int]], milli: int
) -> None:
    """The rule ranks on nodes where some GPU has room only (``share_decision``): its
    measure is per node, so the best GPU is the one it picks on the whole table."""
    table = RoomTable.of(
        [
            GpuRoom(f"g{i}", f"n{node}", i, used, used * 80, 80_000, tenants, 1.0)
            for i, (node, used, tenants) in enumerate(sorted(gpus))
        ]
    )
    ask = ShareAsk(milli)
    keep = _on_nodes_with_room(table, ask)
    whole, part = rank_rooms(table, ask), rank_rooms(_subset(table, keep), ask)
    assert np.flatnonzero(keep)[part].tolist() == whole.tolist()


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 5),
            st.sampled_from([0, 0, 0, 250, 500, 1000]),
            st.sampled_from([16_384, 81_920]),
            st.sampled_from([0.8, 1.0]),
            st.sampled_from([-20.0, -19.0]),
        ),
        min_size=1,
        max_size=40,
    ),
    st.integers(1, 1000),
    st.sampled_from(["fgd", "best-fit"]),
    st.booleans(),
)
# Two free nodes of one memory but not one kind: FGD takes the small one's GPU (the big
# one would no longer host a 4-GPU job), so the kinds must not be merged.
@example([(0, 0, 81_920, 1.0, -20.0)] * 4 + [(1, 0, 81_920, 1.0, -20.0)] * 2, 300, "fgd", False)
# Two free nodes of one kind: the higher capacity is a step slower for the share's class.
@example([(0, 0, 81_920, 1.0, -19.0), (1, 0, 81_920, 0.8, -20.0)], 300, "fgd", True)
def test_ranking_one_untouched_node_of_each_kind_changes_no_first_choice(
    gpus: list[tuple[int, int, int, float, float]], milli: int, rule: SharingRule, learned: bool
) -> None:
    """Untouched nodes with the same GPU memories grow their fragmentation alike, so
    ``share_decision`` ranks one of each kind: the first choice stays the same GPU, with
    each GPU's learned-speed step (a share's class) ranked first or without."""
    gpus = sorted(gpus)
    table = RoomTable.of(
        [
            GpuRoom(f"g{i}", f"n{node}", i, used, used * memory // 1000, memory, tenants, capacity)
            for i, (node, used, memory, capacity, _) in enumerate(gpus)
            for tenants in [int(0 < used < 1000)]
        ]
    )
    if learned:
        table = replace(table, speed_key=np.array([step for *_, step in gpus]))
    ask = ShareAsk(milli)
    full = rank_rooms(table, ask, rule=rule)
    keep = _one_of_each_untouched_kind(table)
    part = rank_rooms(_subset(table, keep), ask, rule=rule)
    assert np.flatnonzero(keep)[part][:1].tolist() == full[:1].tolist()
