"""Progress records joined with their placement's allocation: what is learned, what is
rejected and why."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from fairlane_events.codec import encode
from fairlane_events.records import (
    GpuSlot,
    JobProgress,
    NodeAssignment,
    NodeSample,
    PlacementEvent,
)
from fairlane_scorer.core.progress import (
    FOREIGN_GPU,
    FUTURE,
    INVALID,
    MAX_AHEAD_MS,
    UNKNOWN_PLACEMENT,
    WRONG_KEY,
    JoinedProgress,
    JoinedRank,
    PlacementChange,
    ProgressRejection,
    decode_progress,
    join_progress,
    placement_change,
)
from fairlane_scorer.core.speed_input import (
    GpuInfo,
    busy_clocks,
    decode_input,
    encode_gpu_info,
    encode_progress,
    info_moved,
)
from fairlane_scorer.errors import SpeedInputFormatError
from tests.factories import gpu_sample

T0 = 1_700_000_000_000


def placement(kind: str, pid: str = "p1") -> PlacementEvent:
    nodes = [
        NodeAssignment(
            node=node,
            node_rank=rank,
            gpus=[GpuSlot(uuid=f"{node}-g{i}", index=i) for i in range(2)],
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
        ts_ms=T0,
        nodes=nodes,
    )


def progress(uuids: list[str], pid: str = "p1", **overrides: Any) -> JobProgress:
    values: dict[str, Any] = {
        "schema": "job-progress/1",
        "placement_id": pid,
        "job_class": "compute-bound",
        "ts_ms": T0 + 60_000,
        "window_s": 60.0,
        "steps_per_s": 2.0,
        "ranks": [
            {"rank": r, "uuid": u, "compute_s_per_step": 0.3 + r / 10, "steps": 120}
            for r, u in enumerate(uuids)
        ],
    }
    values.update(overrides)
    return JobProgress.model_validate(values)


def test_created_holds_every_gpu_by_node_and_an_ending_event_ends_the_placement() -> None:
    created = placement_change(placement("created"))
    assert created == PlacementChange({"n1-g0": "n1", "n1-g1": "n1", "n2-g0": "n2", "n2-g1": "n2"})
    for kind in ("released", "expired", "failed"):
        assert placement_change(placement(kind)) == PlacementChange(None)
    assert placement_change(placement("pending")) is None


def test_ranks_on_the_placements_gpus_are_joined_with_their_nodes() -> None:
    gpus = placement_change(placement("created"))
    assert gpus is not None
    assert gpus.gpus is not None
    joined = join_progress(progress(["n1-g1", "n2-g0"]), gpus.gpus, T0)
    assert joined == JoinedProgress(
        "p1",
        "compute-bound",
        T0 + 60_000,
        60.0,
        (JoinedRank("n1-g1", "n1", 0.3), JoinedRank("n2-g0", "n2", 0.4)),
    )


def test_a_rank_on_a_gpu_outside_the_placement_is_rejected() -> None:
    joined = join_progress(progress(["n1-g0", "n9-g0"]), {"n1-g0": "n1", "n1-g1": "n1"}, T0)
    assert isinstance(joined, ProgressRejection)
    assert joined.reason == FOREIGN_GPU
    assert "'n9-g0'" in joined.error


def test_progress_of_no_live_placement_is_rejected() -> None:
    joined = join_progress(progress(["n1-g0"]), None, T0)
    assert joined == ProgressRejection(UNKNOWN_PLACEMENT, "no live placement 'p1'")


def test_an_ended_placement_vouches_only_for_windows_begun_before_its_end() -> None:
    gpus = {"n1-g0": "n1"}
    record = progress(["n1-g0"])  # its window: [T0, T0 + 1 min)
    assert isinstance(join_progress(record, gpus, T0, ended_ms=T0 + 1), JoinedProgress)
    after = join_progress(record, gpus, T0, ended_ms=T0)
    assert after == ProgressRejection(
        UNKNOWN_PLACEMENT, f"placement 'p1' ended at {T0}, before this window began"
    )


def test_a_report_from_beyond_the_hour_ahead_is_rejected() -> None:
    gpus = {"n1-g0": "n1", "n1-g1": "n1"}
    record = progress(["n1-g0", "n1-g1"])  # ends at T0 + 1 min
    assert isinstance(join_progress(record, gpus, T0 + 60_000 - MAX_AHEAD_MS), JoinedProgress)
    late = join_progress(record, gpus, T0 + 60_000 - MAX_AHEAD_MS - 1)
    assert isinstance(late, ProgressRejection)
    assert late.reason == FUTURE


def test_decoding_checks_the_schema_and_the_key() -> None:
    record = progress(["a", "b"])
    assert decode_progress(b"p1", encode(record)) == record
    wrong = decode_progress(b"p2", encode(record))
    assert isinstance(wrong, ProgressRejection)
    assert wrong.reason == WRONG_KEY
    bad = orjson.loads(encode(record))
    bad["ranks"][1]["uuid"] = "a"
    invalid = decode_progress(b"p1", orjson.dumps(bad))
    assert isinstance(invalid, ProgressRejection)
    assert invalid.reason == INVALID
    assert "duplicate uuid" in invalid.error
    none = decode_progress(b"p1", None)
    assert isinstance(none, ProgressRejection)
    assert none.reason == INVALID


def test_learner_input_round_trips() -> None:
    joined = JoinedProgress("p", "c", T0, 30.0, (JoinedRank("u/1", "n", 0.25),))
    info = GpuInfo("u", "n", "H100", 1470.0, T0)
    assert decode_input(encode_progress(joined)) == joined
    assert decode_input(encode_gpu_info(info)) == info
    assert decode_input(encode_gpu_info(GpuInfo("u", "n", "H100", None))) == GpuInfo(
        "u", "n", "H100", None
    )
    # An older version's record: its "clock" was the clock health, not a clock.
    older = {"v": 1, "kind": "gpu", "uuid": "u", "node": "n", "model": "m", "clock": 0.74}
    assert decode_input(orjson.dumps(older)) == GpuInfo("u", "n", "m", None, None)


@pytest.mark.parametrize(
    "data", [b"", b"[]", b'{"v": 2, "kind": "gpu"}', b'{"v": 1, "kind": "x"}', b'{"v": 1}']
)
def test_learner_input_of_another_format_is_refused(data: bytes) -> None:
    with pytest.raises(SpeedInputFormatError):
        decode_input(data)


@pytest.mark.parametrize(
    ("old", "new", "moved"),
    [
        (None, GpuInfo("u", "n", "m", 1470.0), True),
        (GpuInfo("u", "n", "m", 1470.0), GpuInfo("u", "n", "m", 1460.0), False),  # 0.7 %
        (GpuInfo("u", "n", "m", 1470.0), GpuInfo("u", "n", "m", 1440.0), True),  # 2 %
        (GpuInfo("u", "n", "m", 1470.0), GpuInfo("u", "n2", "m", 1470.0), True),
        (GpuInfo("u", "n", "m", 1470.0), GpuInfo("u", "n", "m2", 1470.0), True),
        (GpuInfo("u", "n", "m", None), GpuInfo("u", "n", "m", 1470.0), True),
        (GpuInfo("u", "n", "m", None), GpuInfo("u", "n", "m", None), False),
    ],
)
def test_gpu_info_is_sent_again_only_when_it_moved(
    old: GpuInfo | None, new: GpuInfo, moved: bool
) -> None:
    assert info_moved(old, new, clock_epsilon=0.01) is moved


def _node(*gpus: dict[str, float | None]) -> NodeSample:
    return NodeSample(
        schema_="node-sample/1",
        node="n",
        ts_ms=T0,
        source="sim",
        gpus=[gpu_sample(uuid=f"g{i}", index=i, **metrics) for i, metrics in enumerate(gpus)],
    )


def test_a_gpus_busy_clock_is_its_sm_clock_in_its_last_busy_sample() -> None:
    first = _node(
        {"sm_active": 1.0, "sm_clock_mhz": 1470.0},  # busy by SM activity
        {"sm_active": 0.3, "gpu_util_pct": 100.0, "sm_clock_mhz": 1980.0},  # SM mostly idle
        {"sm_active": None, "gpu_util_pct": 95.0, "sm_clock_mhz": 1300.0},  # no GPM counter
        {"sm_active": None, "gpu_util_pct": 10.0, "sm_clock_mhz": 1980.0},
        {"sm_active": 1.0, "sm_clock_mhz": None},  # no clock
    )
    later = _node({"sm_active": 0.9, "sm_clock_mhz": 1410.0}, {"sm_active": 0.0})
    assert busy_clocks([first, later]) == {"g0": 1410.0, "g2": 1300.0}
