"""Properties of fractional placement (issue 29), hypothesis-generated: two replicas
(services with their own views) over one in-memory store take any mix of fractional and
whole requests and releases; the store never holds a GPU past a whole share or its
memory, no whole placement shares its GPU, and each replica's ledger, resynchronised,
says what the store holds."""

from __future__ import annotations

import asyncio
import itertools
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from fairlane_scheduler.adapters.memory_store import MemoryStore
from fairlane_scheduler.core.shares import slot_milli
from fairlane_scheduler.errors import NoCapacityError
from tests.unit.test_fractional_placement import _service
from tests.unit.test_learned_placement import request

GPU_MEMORY_MIB = 80 * 1024

asks = st.one_of(
    st.tuples(st.just("place"), st.integers(1, 1000), st.sampled_from([None, 1024, 50 * 1024])),
    st.tuples(st.just("whole"), st.integers(1, 2), st.none()),
    st.tuples(st.just("release"), st.integers(0, 50), st.none()),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), asks), max_size=40))
def test_replicas_never_overcommit_a_gpu(
    ops: list[tuple[int, tuple[str, int, int | None]]],
) -> None:
    asyncio.run(_run(ops))


async def _run(ops: list[tuple[int, tuple[str, int, int | None]]]) -> None:
    store = MemoryStore()
    replicas = [_service(store, gpus=3, new_id=_ids(r)) for r in (1, 2)]
    placed: list[str] = []
    for n, (which, (kind, amount, memory)) in enumerate(ops):
        service = replicas[which]
        if kind == "release":
            if placed:
                await service.release(placed.pop(amount % len(placed)))
            continue
        ask = request(f"j{n}", amount if kind == "whole" else 1, job_class=None)
        if kind == "place":
            ask = replace(ask, gpu_share=amount / 1000, gpu_memory_mib=memory)
        try:
            placement, _ = await service.place(ask)
        except NoCapacityError:
            continue
        placed.append(placement.id)
        _assert_within_each_gpu(store)
    for replica in replicas:
        await replica.resync()
        held = {uuid: replica.ledger.shares(uuid) for uuid in replica.ledger.shared_gpus}
        assert held == _shares(store), ops


def _ids(replica: int) -> Callable[[], str]:
    """Placement ids of one replica's own (replicas draw theirs independently)."""
    ids = (f"00000000-0000-0000-{replica:04d}-{i:012d}" for i in itertools.count())
    return lambda: next(ids)


def _shares(store: MemoryStore) -> dict[str, tuple[int, int, int]]:
    """What the store's live fractional placements hold, per GPU."""
    sums: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for p in store.placements.values():
        if p.is_live and p.shared_gpu_memory_mib is not None:
            (slot,) = p.nodes[0].gpus
            sums[slot.uuid][0] += slot_milli(slot)
            sums[slot.uuid][1] += slot.memory_mib or 0
            sums[slot.uuid][2] += 1
    return {uuid: (m, mem, n) for uuid, (m, mem, n) in sums.items()}


def _assert_within_each_gpu(store: MemoryStore) -> None:
    milli: dict[str, int] = defaultdict(int)
    memory: dict[str, int] = defaultdict(int)
    kinds: dict[str, set[bool]] = defaultdict(set)
    for p in store.placements.values():
        for slot in (g for n in p.nodes for g in n.gpus if p.is_live):
            milli[slot.uuid] += slot_milli(slot)
            memory[slot.uuid] += slot.memory_mib or 0
            kinds[slot.uuid].add(slot.share is None)
    assert all(m <= 1000 for m in milli.values()), milli
    assert all(m <= GPU_MEMORY_MIB for m in memory.values()), memory
    assert all(k != {True, False} for k in kinds.values()), kinds
