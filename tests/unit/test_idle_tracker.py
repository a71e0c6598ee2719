"""The idle-holdings rule: which held GPUs, and so which placements, idle (pure)."""

import pytest

from fairlane_events.records import GpuSlot, NodeAssignment
from fairlane_scheduler.core.idle import IdlePolicy, IdleTracker, idle_event
from fairlane_scheduler.core.placements import Placement
from tests.factories import gpu_score

T0 = 1_700_000_000_000
POLICY = IdlePolicy(threshold=0.05, window_s=600.0, stale_after_s=180.0)
MINUTE = 60_000


def tracker_fed(*records: tuple[str, int, float | None, bool]) -> IdleTracker:
    """A tracker that read (uuid, ts_ms, activity, stale) records in order."""
    tracker = IdleTracker(POLICY)
    for uuid, ts_ms, activity, stale in records:
        tracker.observe(gpu_score(uuid=uuid, ts_ms=ts_ms, activity=activity, stale=stale))
    return tracker


def minutes(
    uuid: str, first: int, last: int, activity: float | None
) -> list[tuple[str, int, float | None, bool]]:
    """One heartbeat record a minute of ``uuid`` from minute ``first`` to ``last``."""
    return [(uuid, T0 + m * MINUTE, activity, False) for m in range(first, last + 1)]


def test_a_gpu_idle_for_the_whole_window_is_idle_since_its_first_idle_record() -> None:
    tracker = tracker_fed(*minutes("a", 0, 3, 0.9), *minutes("a", 4, 14, 0.01))
    now = T0 + 14 * MINUTE
    assert tracker.idle_gpus(now) == ["a"]
    assert tracker.idle_since(["a"], T0, now) == T0 + 4 * MINUTE
    assert tracker.idle_gpus(T0 + 13 * MINUTE) == []  # 9 minutes: not yet


@pytest.mark.parametrize(
    ("activity", "stale"),
    [
        (0.05, False),  # at the threshold: busy
        (None, False),  # the GPU reports no activity: no evidence of idleness
        (0.0, True),  # a stale record says nothing of now
    ],
)
def test_one_record_that_is_not_idle_restarts_the_window(
    activity: float | None, stale: bool
) -> None:
    records = [*minutes("a", 0, 8, 0.0), ("a", T0 + 9 * MINUTE, activity, stale)]
    tracker = tracker_fed(*records, *minutes("a", 10, 14, 0.0))
    now = T0 + 14 * MINUTE
    assert tracker.idle_since(["a"], T0, now) is None
    assert tracker.idle_since(["a"], T0, T0 + 20 * MINUTE) is None  # no fresh data by then
    later = tracker_fed(*records, *minutes("a", 10, 20, 0.0))
    assert later.idle_since(["a"], T0, T0 + 20 * MINUTE) == T0 + 10 * MINUTE


def test_a_gpu_whose_records_stopped_is_not_idle() -> None:
    tracker = tracker_fed(*minutes("a", 0, 11, 0.0))
    assert tracker.idle_since(["a"], T0, T0 + 11 * MINUTE) == T0
    assert tracker.idle_since(["a"], T0, T0 + 11 * MINUTE + 181_000) is None
    assert tracker.idle_gpus(T0 + 11 * MINUTE + 181_000) == []


def test_a_placement_is_idle_only_when_all_its_gpus_are_and_not_before_it_got_them() -> None:
    tracker = tracker_fed(*minutes("a", 0, 30, 0.0), *minutes("b", 0, 30, 0.0))
    now = T0 + 30 * MINUTE
    assert tracker.idle_since(["a", "b"], T0 + 25 * MINUTE, now) is None  # held 5 minutes
    assert tracker.idle_since(["a", "b"], T0 + 20 * MINUTE, now) == T0 + 20 * MINUTE
    busy_b = tracker_fed(*minutes("a", 0, 30, 0.0), *minutes("b", 0, 30, 0.5))
    assert busy_b.idle_since(["a", "b"], T0, now) is None
    assert busy_b.busy_at(["a", "b"], now) == now
    assert busy_b.busy_at(["a"], now) is None
    assert tracker.idle_since(["a", "unknown"], T0, now) is None  # no record at all


def test_an_older_record_is_ignored() -> None:
    tracker = tracker_fed(*minutes("a", 0, 11, 0.0), ("a", T0 + 5 * MINUTE, 0.9, False))
    assert tracker.idle_since(["a"], T0, T0 + 11 * MINUTE) == T0


def test_a_busy_record_ends_an_episode_a_stale_one_does_not_say_busy() -> None:
    stale = tracker_fed(*minutes("a", 0, 11, 0.0), ("a", T0 + 12 * MINUTE, 0.0, True))
    assert stale.busy_at(["a"], T0 + 12 * MINUTE) is None
    busy = tracker_fed(*minutes("a", 0, 11, 0.0), ("a", T0 + 12 * MINUTE, 0.3, False))
    assert busy.busy_at(["a"], T0 + 13 * MINUTE) == T0 + 12 * MINUTE
    assert busy.busy_at(["a"], T0 + 16 * MINUTE) is None  # that record is no longer fresh


def test_the_idle_event_keeps_the_assignment_and_says_since_when() -> None:
    node = NodeAssignment(
        node="n1",
        node_rank=0,
        gpus=[GpuSlot(uuid="a", index=0), GpuSlot(uuid="b", index=1)],
        cuda_visible_devices="0,1",
        master_addr="n1",
        master_port=29500,
        world_size=2,
    )
    placement = Placement("p1", "job", "team", "placed", T0, (node,), "f")
    event = idle_event(placement, T0, T0 + 10 * MINUTE, POLICY, T0 + 15 * MINUTE)
    assert (event.event, event.idle_since_ms, event.lease_expires_ms) == (
        "idle",
        T0,
        T0 + 15 * MINUTE,
    )
    assert event.nodes == [node]
    assert event.reason == (
        "all 2 GPUs under 5% activity for 600 s; the namespace's idle policy shortened the lease"
    )


@pytest.mark.parametrize(
    "bad", [{"threshold": 0.0}, {"threshold": 1.5}, {"window_s": 0}, {"stale_after_s": -1}]
)
def test_a_policy_out_of_range_is_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="threshold"):
        IdlePolicy(**bad)
