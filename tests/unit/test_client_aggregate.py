"""The launcher's window of step timings: each rank's GPU comes from its placement, never
invented; the median of its timings is its compute time; one record per window."""

import statistics

import pytest

from fairlane._wire import StepSample, decode_step, encode_step
from fairlane.aggregate import ProgressWindow, weighted_median
from fairlane_events.records import JobProgress
from tests.client_factories import placement_nodes as nodes


def close(window: ProgressWindow, window_s: float = 10.0) -> JobProgress | None:
    return window.close(placement_id="p1", job_class="llm", end_ms=1_000_000, window_s=window_s)


def test_each_rank_gets_its_gpu_and_median_compute_time() -> None:
    window = ProgressWindow(nodes(2, 2))
    for compute_s in (0.1, 0.2, 0.9):  # one slow outlier does not move the median
        assert window.add(StepSample(node_rank=1, local_rank=1, rank=None, compute_s=compute_s))
    assert window.add(StepSample(node_rank=0, local_rank=0, rank=0, compute_s=0.3))
    record = close(window)
    assert record is not None
    assert [(r.rank, r.uuid, r.compute_s_per_step, r.steps) for r in record.ranks] == [
        (0, "G0-0", 0.3, 1),
        (3, "G1-1", 0.2, 3),
    ]
    assert record.steps_per_s == pytest.approx(0.3)  # the busiest rank: 3 steps in 10 s
    assert (record.placement_id, record.job_class, record.ts_ms, record.window_s) == (
        "p1",
        "llm",
        1_000_000,
        10.0,
    )


def test_a_window_is_fresh_after_close_and_empty_gives_no_record() -> None:
    window = ProgressWindow(nodes(1))
    window.add(StepSample(node_rank=0, local_rank=None, rank=None, compute_s=0.5))
    assert close(window) is not None
    assert close(window) is None


@pytest.mark.parametrize(
    ("sample", "uuid"),
    [
        (StepSample(0, None, 1, 0.1), "G0-1"),  # the global rank tells the local one
        (StepSample(1, None, None, 0.1), None),  # two GPUs on n1, no rank: which one?
        (StepSample(0, 2, None, 0.1), None),  # n0 has two GPUs
        (StepSample(5, 0, None, 0.1), None),  # no such node
        (StepSample(0, None, 7, 0.1), None),  # rank 7 is not on n0
        (StepSample(0, 0, None, 90_000.0), None),  # longer than a record may say
    ],
)
def test_a_sample_maps_to_a_placement_gpu_or_is_dropped(sample: StepSample, uuid: str) -> None:
    window = ProgressWindow(nodes(2, 2))
    assert window.add(sample) is (uuid is not None)
    assert window.dropped == (uuid is None)
    record = close(window)
    assert (record.ranks[0].uuid if record else None) == uuid


def test_a_single_gpu_node_needs_no_local_rank() -> None:
    window = ProgressWindow(nodes(2, 1))
    assert window.add(StepSample(node_rank=1, local_rank=None, rank=None, compute_s=0.4))
    record = close(window)
    assert record is not None
    assert (record.ranks[0].rank, record.ranks[0].uuid) == (2, "G1-0")


def test_a_sample_of_several_steps_counts_as_that_many() -> None:
    window = ProgressWindow(nodes(1))
    window.add(StepSample(0, 0, None, 0.2, steps=5))
    window.add(StepSample(0, 0, None, 0.8, steps=2))
    record = close(window, window_s=7.0)
    assert record is not None
    assert (record.ranks[0].steps, record.ranks[0].compute_s_per_step) == (7, 0.2)
    assert record.steps_per_s == pytest.approx(1.0)


@pytest.mark.parametrize(
    "values",
    [[(0.1, 1)], [(0.1, 1), (0.3, 1)], [(0.5, 2), (0.1, 1), (0.3, 3)], [(0.2, 2), (0.4, 2)]],
)
def test_weighted_median_is_the_median_of_the_expanded_values(
    values: list[tuple[float, int]],
) -> None:
    flat = [v for v, n in values for _ in range(n)]
    assert weighted_median(values) == pytest.approx(statistics.median(flat))


def test_a_malformed_datagram_is_dropped_and_counted() -> None:
    window = ProgressWindow(nodes(1))
    assert window.add_datagram(encode_step(StepSample(0, 0, None, 0.2)))
    assert not window.add_datagram(b"{")
    assert window.dropped == 1


def test_the_wire_round_trips_and_rejects_garbage() -> None:
    sample = StepSample(node_rank=1, local_rank=0, rank=4, compute_s=0.25, steps=3)
    assert decode_step(encode_step(sample)) == sample
    for bad in (
        b"",
        b"not json",
        b"[]",
        b'{"node_rank": 0, "local_rank": 0, "rank": 0, "compute_s": -1}',
        b'{"node_rank": 0, "local_rank": 0, "rank": 0, "compute_s": true}',
        b'{"node_rank": -1, "local_rank": 0, "rank": 0, "compute_s": 1}',
        b'{"node_rank": 0, "local_rank": "0", "rank": 0, "compute_s": 1}',
        b'{"node_rank": 0, "local_rank": 0, "rank": 0, "compute_s": 1, "steps": 0}',
    ):
        assert decode_step(bad) is None, bad
