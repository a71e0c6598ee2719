"""The fractional packing rule (core/sharing.py): FGD's fragmentation measure on hand-worked
nodes, the three rules' choices, ties and bad input."""

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
