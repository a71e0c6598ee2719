"""Invariants of the fractional packing rule on random fleets (hypothesis): it ranks exactly
the GPUs with room, and FGD's choice is the one that a recomputation from scratch of every
node's fragmentation finds grows it least, with the nodes' CPUs in view or not; without a
CPU view, CPU asks change nothing; a speed key ranks before every rule and leaves the
rule's own order within each of its values."""

from dataclasses import replace
from itertools import pairwise

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from fairlane_scheduler.core.sharing import (
    SHARING_RULES,
    GpuRoom,
    MixEntry,
    RoomTable,
    ShareAsk,
    SharingRule,
    WorkloadMix,
    fragmentation_by_node,
    rank_rooms,
    rank_shared_gpus,
)
from fairlane_scheduler.core.sharing import _fragmentation_growth as fragmentation_growth

MEMORY_MIB = (16_384, 32_768)


@st.composite
def fleets(draw: st.DrawFn) -> list[GpuRoom]:
    rooms = []
    for n in range(draw(st.integers(1, 5))):
        memory = draw(st.sampled_from(MEMORY_MIB))
        for i in range(draw(st.integers(1, 4))):
            used = draw(st.sampled_from([0, 0, 1000, *range(100, 1000, 100)]))
            rooms.append(
                GpuRoom(
                    uuid=f"n{n}-{i}",
                    node=f"n{n}",
                    index=i,
                    used_milli=used,
                    used_memory_mib=used * memory // 1000,
                    memory_mib=memory,
                    tenants=draw(st.integers(1, 3)) if 0 < used < 1000 else 0,
                    capacity=draw(st.sampled_from([0.7, 0.9, 1.0])),
                )
            )
    return rooms


asks = st.builds(ShareAsk, st.integers(1, 1000))
mixes = st.lists(
    st.one_of(
        st.builds(MixEntry, asks, st.just(1), st.integers(1, 5).map(float)),
        st.builds(MixEntry, st.just(ShareAsk(1000)), st.sampled_from([1, 2, 4]), st.just(1.0)),
    ),
    min_size=1,
    max_size=5,
).map(lambda entries: WorkloadMix(tuple(entries)))


CPU_MILLI = (0, 2000, 4000, 8000)
cpu_asks = st.builds(ShareAsk, st.integers(1, 1000), cpu_milli=st.sampled_from(CPU_MILLI))
cpu_mixes = st.lists(
    st.one_of(
        st.builds(MixEntry, cpu_asks, st.just(1), st.integers(1, 5).map(float)),
        st.builds(
            MixEntry,
            st.builds(ShareAsk, st.just(1000), cpu_milli=st.sampled_from(CPU_MILLI)),
            st.sampled_from([1, 2, 4]),
        ),
    ),
    min_size=1,
    max_size=5,
).map(lambda entries: WorkloadMix(tuple(entries)))


@st.composite
def tables_with_cpus(draw: st.DrawFn) -> RoomTable:
    table = RoomTable.of(draw(fleets()))
    cpus = [draw(st.sampled_from(CPU_MILLI)) for _ in range(table.node_count())]
    return replace(table, free_cpu_milli=np.array(cpus, dtype=np.int64))


def placed_at(table: RoomTable, row: int, ask: ShareAsk) -> RoomTable:
    """``table`` after ``ask`` takes GPU ``row`` and its CPUs on that GPU's node."""
    used_milli, used_memory = table.used_milli.copy(), table.used_memory_mib.copy()
    used_milli[row] += ask.milli
    used_memory[row] += ask.memory_on(table.memory_mib[row : row + 1])[0]
    assert table.free_cpu_milli is not None
    cpus = table.free_cpu_milli.copy()
    cpus[table.node[row]] -= ask.cpu_milli
    return replace(table, used_milli=used_milli, used_memory_mib=used_memory, free_cpu_milli=cpus)


def without_cpus(mix: WorkloadMix) -> WorkloadMix:
    return WorkloadMix(tuple(replace(e, ask=replace(e.ask, cpu_milli=0)) for e in mix.entries))


def has_room(gpu: GpuRoom, ask: ShareAsk) -> bool:
    memory = ask.memory_on(np.array([gpu.memory_mib]))[0]
    return gpu.used_milli + ask.milli <= 1000 and gpu.used_memory_mib + memory <= gpu.memory_mib


def place(rooms: list[GpuRoom], at: GpuRoom, ask: ShareAsk) -> list[GpuRoom]:
    memory = int(ask.memory_on(np.array([at.memory_mib]))[0])
    taken = replace(
        at,
        used_milli=at.used_milli + ask.milli,
        used_memory_mib=at.used_memory_mib + memory,
        tenants=at.tenants + 1,
    )
    return [taken if r is at else r for r in rooms]


def total_fragmentation(rooms: list[GpuRoom], mix: WorkloadMix) -> float:
    return float(fragmentation_by_node(RoomTable.of(rooms), mix).sum())


@given(fleets(), asks, mixes, st.sampled_from(SHARING_RULES))
def test_every_rule_ranks_exactly_the_gpus_with_room_once(
    rooms: list[GpuRoom], ask: ShareAsk, mix: WorkloadMix, rule: SharingRule
) -> None:
    ranked = rank_shared_gpus(rooms, ask, mix, rule)
    assert sorted(r.uuid for r in ranked) == sorted(r.uuid for r in rooms if has_room(r, ask))


@given(fleets(), asks, mixes)
def test_fgd_picks_the_gpu_whose_placement_grows_fragmentation_least(
    rooms: list[GpuRoom], ask: ShareAsk, mix: WorkloadMix
) -> None:
    ranked = rank_shared_gpus(rooms, ask, mix, "fgd")
    if not ranked:
        return
    after = [total_fragmentation(place(rooms, r, ask), mix) for r in ranked]
    # Ranked by fragmentation first: never a strictly worse GPU before a better one.
    assert all(a <= b + 1e-6 for a, b in pairwise(after))


@given(fleets(), asks, mixes)
def test_fgd_takes_a_fresh_gpu_over_a_shared_one_only_when_that_fragments_less(
    rooms: list[GpuRoom], ask: ShareAsk, mix: WorkloadMix
) -> None:
    ranked = rank_shared_gpus(rooms, ask, mix, "fgd")
    shared = [r for r in ranked if r.tenants > 0]
    if not ranked or ranked[0].tenants > 0 or not shared:
        return
    fresh_after = total_fragmentation(place(rooms, ranked[0], ask), mix)
    shared_after = min(total_fragmentation(place(rooms, r, ask), mix) for r in shared)
    assert fresh_after < shared_after - 1e-9


@given(fleets(), asks, mixes)
def test_best_fit_leaves_the_least_free_share(
    rooms: list[GpuRoom], ask: ShareAsk, mix: WorkloadMix
) -> None:
    ranked = rank_shared_gpus(rooms, ask, mix, "best-fit")
    if ranked:
        assert ranked[0].used_milli == max(r.used_milli for r in ranked)


@given(tables_with_cpus(), cpu_asks, cpu_mixes)
def test_with_cpus_fgds_growth_is_the_before_after_difference_of_node_fragmentation(
    table: RoomTable, ask: ShareAsk, mix: WorkloadMix
) -> None:
    ranked = rank_rooms(table, ask, mix, "fgd")
    assert table.free_cpu_milli is not None
    hosts = table.free_cpu_milli[table.node[ranked]] >= ask.cpu_milli
    assert hosts.all()
    if not len(ranked):
        return
    before = fragmentation_by_node(table, mix)
    expected = [
        (fragmentation_by_node(placed_at(table, int(row), ask), mix) - before)[table.node[row]]
        for row in ranked
    ]
    growth = fragmentation_growth(table, ask, mix, ranked.astype(np.int64))
    assert np.allclose(growth, expected, atol=1e-6)
    assert all(a <= b + 1e-6 for a, b in pairwise(growth))


@given(tables_with_cpus(), cpu_asks, cpu_mixes, st.sampled_from(SHARING_RULES))
def test_without_a_cpu_view_cpu_asks_change_nothing_and_ample_cpus_rank_alike(
    table: RoomTable, ask: ShareAsk, mix: WorkloadMix, rule: SharingRule
) -> None:
    blind = replace(table, free_cpu_milli=None)
    todays = rank_rooms(blind, replace(ask, cpu_milli=0), without_cpus(mix), rule)
    assert rank_rooms(blind, ask, mix, rule).tolist() == todays.tolist()
    # Ample: any shape still fits beside the ask.
    ample = replace(table, free_cpu_milli=np.full(table.node_count(), 2 * max(CPU_MILLI)))
    assert rank_rooms(ample, ask, mix, rule).tolist() == todays.tolist()
    assert np.array_equal(
        fragmentation_by_node(blind, mix), fragmentation_by_node(ample, without_cpus(mix))
    )


@st.composite
def fleets_with_speed_keys(draw: st.DrawFn) -> tuple[list[GpuRoom], list[float]]:
    """A fleet and each GPU's learned-speed step (1.0, 0.95 or 0.555 in steps of 0.05)."""
    rooms = draw(fleets())
    steps = st.sampled_from([-20.0, -19.0, -11.0])
    return rooms, draw(st.lists(steps, min_size=len(rooms), max_size=len(rooms)))


@given(fleets_with_speed_keys(), asks, mixes, st.sampled_from(SHARING_RULES))
def test_a_speed_key_ranks_first_and_keeps_the_rules_order_within_a_step(
    rooms_and_keys: tuple[list[GpuRoom], list[float]],
    ask: ShareAsk,
    mix: WorkloadMix,
    rule: SharingRule,
) -> None:
    """A GPU of a worse learned-speed step never ranks before one of a better step with
    room (the share's class), and among one step's GPUs the rule ranks as without it."""
    rooms, keys = rooms_and_keys
    table = RoomTable.of(rooms)
    speed_key = np.array(keys)
    ranked = rank_rooms(replace(table, speed_key=speed_key), ask, mix, rule)
    plain = rank_rooms(table, ask, mix, rule)
    assert sorted(ranked.tolist()) == sorted(plain.tolist())
    assert all(a <= b for a, b in pairwise(speed_key[ranked]))
    for step in set(keys):
        assert [r for r in ranked if keys[r] == step] == [r for r in plain if keys[r] == step]
