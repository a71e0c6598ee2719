"""The fractional packing rule (core/sharing.py): FGD's fragmentation measure on hand-worked
nodes, with and without the nodes' CPUs, the three rules' choices, ties and bad input."""

from dataclasses import replace

import numpy as np
import pytest

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

HALVES = WorkloadMix((MixEntry(ShareAsk(500)),))
HALVES_AND_WHOLES = WorkloadMix((MixEntry(ShareAsk(500)), MixEntry(ShareAsk(1000))))
EIGHT_WHOLE = WorkloadMix((MixEntry(ShareAsk(1000), gpus=8),))


def room(
    uuid: str,
    used_milli: int,
    *,
    node: str = "n0",
    tenants: int | None = None,
    capacity: float = 1.0,
    used_memory_mib: int = 0,
    memory_mib: int = 16_000,
) -> GpuRoom:
    return GpuRoom(
        uuid=uuid,
        node=node,
        index=int(uuid[-1]),
        used_milli=used_milli,
        used_memory_mib=used_memory_mib,
        memory_mib=memory_mib,
        tenants=(1 if 0 < used_milli < 1000 else 0) if tenants is None else tenants,
        capacity=capacity,
    )


def chosen(rooms: list[GpuRoom], ask: ShareAsk, mix: WorkloadMix, rule: SharingRule = "fgd") -> str:
    return rank_shared_gpus(rooms, ask, mix, rule)[0].uuid


def with_cpus(rooms: list[GpuRoom], free_cpu_milli: list[int]) -> RoomTable:
    """The rooms' table with a CPU view: each node's free CPUs, in the rooms' node order."""
    return replace(RoomTable.of(rooms), free_cpu_milli=np.array(free_cpu_milli))


def halves_taking(cpu_milli: int) -> ShareAsk:
    return ShareAsk(500, cpu_milli=cpu_milli)


@pytest.mark.parametrize(
    ("used", "mix", "expected"),
    [
        # Both halves fit: nothing stranded for 0.5; for whole GPUs the 600 free beside a
        # free GPU is stranded: (0 + 600) / 2.
        ([400, 0], HALVES_AND_WHOLES, 300.0),
        # 0.3 free cannot take a half: stranded.
        ([700, 0], HALVES, 300.0),
        # No GPU with room for a whole one: the node's whole free share is fragment.
        ([400, 400], WorkloadMix((MixEntry(ShareAsk(1000)),)), 1200.0),
        # Two GPUs cannot host an 8-GPU task at all, even both free.
        ([0, 0], EIGHT_WHOLE, 2000.0),
        ([1000, 1000], HALVES_AND_WHOLES, 0.0),
    ],
)
def test_node_fragmentation_is_the_free_share_the_mix_cannot_use(
    used: list[int], mix: WorkloadMix, expected: float
) -> None:
    table = RoomTable.of([room(f"g{i}", u) for i, u in enumerate(used)])
    assert fragmentation_by_node(table, mix).tolist() == [expected]


def test_fgd_keeps_the_remainder_usable_where_best_fit_strands_it() -> None:
    rooms = [room("g0", 400), room("g1", 0)]
    # 0.2 on g0 leaves 0.4, too little for the mix's halves (+400); on g1 it leaves 0.8,
    # still a half's room (+0). Best-fit takes the tightest GPU regardless.
    assert chosen(rooms, ShareAsk(200), HALVES) == "g1"
    assert chosen(rooms, ShareAsk(200), HALVES, "best-fit") == "g0"
    assert chosen(rooms, ShareAsk(200), HALVES, "first-fit") == "g0"


def test_fgd_fills_a_shared_gpu_before_breaking_a_free_one_when_whole_gpus_are_asked() -> None:
    rooms = [room("g0", 0), room("g1", 400)]
    # On g1: 300 -> 400 (+100). On g0: no free GPU is left for the whole-GPU half of the
    # mix, 300 -> 700 (+400).
    assert chosen(rooms, ShareAsk(200), HALVES_AND_WHOLES) == "g1"


def test_fgd_fills_a_gpu_exactly_when_it_can() -> None:
    rooms = [room("g0", 0, node="a"), room("g1", 300, node="b"), room("g2", 500, node="c")]
    assert chosen(rooms, ShareAsk(500), HALVES_AND_WHOLES) == "g2"


def test_equal_fragmentation_goes_to_a_shared_gpu_then_the_higher_capacity_then_the_first() -> None:
    mix = WorkloadMix((MixEntry(ShareAsk(100)),))
    shared = room("g2", 200, node="c", tenants=1, capacity=0.5)
    assert chosen([room("g0", 200, tenants=0), shared], ShareAsk(100), mix) == "g2"
    faster = room("g1", 0, node="b", capacity=0.9)
    assert chosen([room("g0", 0, capacity=0.8), faster], ShareAsk(100), mix) == "g1"
    assert chosen([room("g0", 0), room("g1", 0, node="b")], ShareAsk(100), mix) == "g0"


def test_a_node_without_a_shapes_cpus_counts_all_its_free_share_as_fragmented_for_it() -> None:
    rooms = [room("g0", 0, node="a"), room("g1", 700, node="a"), room("g2", 0, node="b")]
    mix = WorkloadMix((MixEntry(halves_taking(4000)),))
    # a: halves fit g0, g1's 300 is stranded; with 3,999 CPUs free, none fits: 1,300.
    # b: its free GPU would take a half, but no CPU is free there.
    table = with_cpus(rooms, [4000, 0])
    assert fragmentation_by_node(table, mix).tolist() == [300.0, 1000.0]
    assert fragmentation_by_node(with_cpus(rooms, [3999, 4000]), mix).tolist() == [1300.0, 0.0]
    # Without the CPU view the CPUs count nowhere.
    assert fragmentation_by_node(RoomTable.of(rooms), mix).tolist() == [300.0, 0.0]


def test_fgd_with_cpus_keeps_the_cpus_that_a_larger_shape_needs() -> None:
    # Halves taking 4 or 8 cores; node a has 8 free, b 4. GPUs alone tie (first row wins);
    # with CPUs, the small pod on a would leave no node for the 8-core shape (+250), on b
    # it only spends CPUs b could not give that shape anyway (+0).
    rooms = [room("g0", 0, node="a"), room("g1", 0, node="b")]
    mix = WorkloadMix((MixEntry(halves_taking(4000)), MixEntry(halves_taking(8000))))
    ask = halves_taking(4000)
    assert rank_rooms(RoomTable.of(rooms), ask, mix).tolist() == [0, 1]
    assert rank_rooms(with_cpus(rooms, [8000, 4000]), ask, mix).tolist() == [1, 0]


def test_fgd_with_cpus_counts_the_cpus_its_placement_takes() -> None:
    # One shape, halves taking 4 cores. On a (4 free) the pod takes its last cores and
    # strands the 500 left (+500); on b (8 free) 4 stay, enough for another half (+0).
    rooms = [room("g0", 0, node="a"), room("g1", 0, node="b")]
    mix = WorkloadMix((MixEntry(halves_taking(4000)),))
    ask = halves_taking(4000)
    assert rank_rooms(RoomTable.of(rooms), ask, mix).tolist() == [0, 1]
    assert rank_rooms(with_cpus(rooms, [4000, 8000]), ask, mix).tolist() == [1, 0]


def test_with_cpus_only_gpus_on_nodes_with_the_asks_cpus_have_room() -> None:
    rooms = [room("g0", 0, node="a"), room("g1", 0, node="b")]
    table = with_cpus(rooms, [2000, 4000])
    for rule in SHARING_RULES:
        assert rank_rooms(table, halves_taking(4000), HALVES, rule).tolist() == [1]
        assert rank_rooms(table, halves_taking(2000), HALVES, rule).tolist() == [0, 1]


def test_memory_bounds_the_room_and_defaults_to_the_share_of_the_gpus_memory() -> None:
    full = room("g0", 100, used_memory_mib=15_000)
    spare = room("g1", 100, node="b", used_memory_mib=8_000)
    ranked = rank_shared_gpus([full, spare], ShareAsk(500), HALVES)
    assert [r.uuid for r in ranked] == ["g1"]  # needs floor(0.5 x 16,000) = 8,000 MiB
    assert rank_shared_gpus([spare], ShareAsk(100, memory_mib=8_001), HALVES) == ()


def test_no_gpu_with_room_ranks_nothing() -> None:
    table = RoomTable.of([room("g0", 1000), room("g1", 900)])
    for rule in SHARING_RULES:
        assert rank_rooms(table, ShareAsk(200), HALVES, rule).tolist() == []


def test_an_empty_table_ranks_nothing() -> None:
    assert rank_shared_gpus([], ShareAsk(200)) == ()
    assert fragmentation_by_node(RoomTable.of([]), HALVES).tolist() == []


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: ShareAsk(0), "milli"),
        (lambda: ShareAsk(1001), "milli"),
        (lambda: ShareAsk(500, memory_mib=0), "memory_mib"),
        (lambda: ShareAsk(500, cpu_milli=-1), "cpu_milli"),
        (lambda: with_cpus([room("g0", 0), room("g1", 0, node="b")], [8000]), "free_cpu_milli"),
        (lambda: MixEntry(ShareAsk(500), gpus=2), "multi-GPU"),
        (lambda: MixEntry(ShareAsk(500), weight=0), "weight"),
        (lambda: WorkloadMix(()), "at least one"),
        (lambda: room("g0", 1001), "used_milli"),
        (lambda: room("g0", 0, used_memory_mib=20_000), "memory"),
    ],
)
def test_bad_values_are_refused_with_the_field_named(build: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build()  # type: ignore[operator]


def test_an_unknown_rule_is_refused() -> None:
    table = RoomTable.of([room("g0", 0)])
    with pytest.raises(ValueError, match="rule"):
        rank_rooms(table, ShareAsk(200), HALVES, "worst-fit")  # type: ignore[arg-type]


def test_weights_are_normalised() -> None:
    mix = WorkloadMix((MixEntry(ShareAsk(500), weight=3), MixEntry(ShareAsk(1000), weight=1)))
    assert np.allclose(mix.weights(), [0.75, 0.25])
