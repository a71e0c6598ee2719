"""Progress records held until their placement arrives: held once, capped, expired by
the records' own time, and stored as bytes that read back the same."""

from __future__ import annotations

import pytest

from fairlane_scorer.core.holding import (
    HeldRecord,
    HeldRow,
    HoldConfig,
    decode_held,
    encode_held,
    expire,
    hold,
    next_expiry_ms,
)
from fairlane_scorer.core.progress import HOLD_FULL, UNKNOWN_PLACEMENT
from fairlane_scorer.errors import HeldRowFormatError

T0 = 1_700_000_000_000
CONFIG = HoldConfig(hold_s=60, per_placement=3, total=5)


def record(offset: int, ts_ms: int = T0, partition: int = 2) -> HeldRecord:
    return HeldRecord(partition, offset, ts_ms, b'{"placement_id":"p"}')


def test_a_record_is_held_in_time_order() -> None:
    rows: dict[str, HeldRow] = {"p": (record(1, T0 + 10),)}
    change = hold(rows, "p", record(2, T0), CONFIG)
    assert change.rows == {"p": (record(2, T0), record(1, T0 + 10))}
    assert change.dropped == []


def test_a_record_held_again_after_a_redelivery_is_held_once() -> None:
    rows: dict[str, HeldRow] = {"p": (record(1),)}
    change = hold(rows, "p", record(1), CONFIG)
    assert change.rows == {}
    assert change.dropped == []


def test_a_placement_holding_too_many_records_drops_its_oldest() -> None:
    rows: dict[str, HeldRow] = {"p": tuple(record(i, T0 + i) for i in range(3))}
    change = hold(rows, "p", record(3, T0 + 3), CONFIG)
    assert change.rows == {"p": tuple(record(i, T0 + i) for i in range(1, 4))}
    assert [(d.placement_id, d.record.offset, d.reason) for d in change.dropped] == [
        ("p", 0, HOLD_FULL)
    ]


def test_a_full_partition_drops_its_oldest_record_whichever_placement_holds_it() -> None:
    rows: dict[str, HeldRow] = {
        "old": (record(0, T0),),
        "p": (record(1, T0 + 1), record(2, T0 + 2)),
        "q": (record(3, T0 + 3), record(4, T0 + 4)),
    }
    change = hold(rows, "r", record(5, T0 + 5), CONFIG)
    assert change.rows == {"r": (record(5, T0 + 5),), "old": None}
    assert [(d.placement_id, d.reason) for d in change.dropped] == [("old", HOLD_FULL)]
    assert "more than 5" in change.dropped[0].error


def test_a_record_older_than_all_is_the_one_a_full_partition_drops() -> None:
    rows: dict[str, HeldRow] = {"p": tuple(record(i, T0 + 10 + i) for i in range(3))}
    rows["q"] = (record(3, T0 + 20), record(4, T0 + 21))
    change = hold(rows, "r", record(5, T0), CONFIG)
    assert change.rows == {"r": None}
    assert [d.record.offset for d in change.dropped] == [5]


@pytest.mark.parametrize(
    ("event_ms", "expired"),
    [
        (T0 + 60_000, []),  # exactly the hold: still waiting
        (T0 + 60_001, [0]),
        (T0 + 70_001, [0, 1]),
        (T0 - 1_000_000, []),  # time read from another job's clock never runs backwards
    ],
)
def test_records_expire_once_the_partitions_event_time_passes_their_hold(
    event_ms: int, expired: list[int]
) -> None:
    rows: dict[str, HeldRow] = {"p": (record(0, T0), record(1, T0 + 10_000))}
    change = expire(rows, event_ms, CONFIG)
    assert [d.record.offset for d in change.dropped] == expired
    assert all(d.reason == UNKNOWN_PLACEMENT for d in change.dropped)
    if expired:
        left = rows["p"][len(expired) :]
        assert change.rows == {"p": left or None}
    else:
        assert change.rows == {}


def test_the_next_expiry_is_the_oldest_records() -> None:
    assert next_expiry_ms({}, CONFIG) is None
    rows: dict[str, HeldRow] = {"p": (record(0, T0 + 5),), "q": (record(1, T0),)}
    assert next_expiry_ms(rows, CONFIG) == T0 + 60_000


def test_a_held_row_reads_back_as_written() -> None:
    row = (record(0, T0), HeldRecord(7, 123, T0 + 1, '{"x":"é"}'.encode()))
    assert decode_held(encode_held(row)) == row


@pytest.mark.parametrize(
    "data", [b"not json", b'{"format":"progress-held/9","records":[]}', b'{"format":1}']
)
def test_a_held_row_in_another_format_is_refused(data: bytes) -> None:
    with pytest.raises(HeldRowFormatError):
        decode_held(data)


def test_the_config_refuses_what_cannot_hold() -> None:
    with pytest.raises(ValueError, match="hold_s"):
        HoldConfig(hold_s=0)


def test_the_partitions_count_may_be_given_instead_of_counted() -> None:
    rows: dict[str, HeldRow] = {"p": (record(0, T0),), "q": (record(1, T0 + 1),)}
    assert hold(rows, "r", record(2, T0 + 2), CONFIG, count=2).dropped == []
    change = hold(rows, "r", record(2, T0 + 2), CONFIG, count=5)  # the other rows: elsewhere
    assert [d.record.offset for d in change.dropped] == [0]
