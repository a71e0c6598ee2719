"""The offset ledger commits only contiguous runs of processed offsets from the
committed position (fairlane_scorer.core.offsets)."""

from fairlane_scorer.core.offsets import InOrder, OffsetLedger


def test_nothing_is_committed_before_the_floor_is_known() -> None:
    ledger: OffsetLedger[int] = OffsetLedger()
    ledger.done(0, 5)
    assert list(ledger.committable()) == []
    assert ledger.advance(0) is None
    ledger.reset(0, 5)  # processed before the assignment's seek, still done
    assert ledger.advance(0) == 6


def test_a_hole_holds_back_every_later_offset() -> None:
    ledger: OffsetLedger[int] = OffsetLedger()
    ledger.reset(0, 10)
    for offset in (11, 12, 14):
        ledger.done(0, offset)
    assert ledger.advance(0) is None  # 10 is missing
    ledger.done(0, 10)
    assert list(ledger.committable()) == [0]
    assert ledger.advance(0) == 13  # 13 is missing
    ledger.done(0, 13)
    assert ledger.advance(0) == 15
    assert ledger.advance(0) is None


def test_offsets_below_the_floor_are_ignored_and_partitions_are_separate() -> None:
    ledger: OffsetLedger[int] = OffsetLedger()
    ledger.reset(0, 10)
    ledger.reset(1, 0)
    ledger.done(0, 3)
    ledger.done(1, 0)
    assert ledger.advance(0) is None
    assert ledger.advance(1) == 1


def test_a_partition_given_up_is_forgotten_and_a_reset_keeps_later_work() -> None:
    ledger: OffsetLedger[int] = OffsetLedger()
    ledger.reset(0, 0)
    ledger.reset(1, 0)
    ledger.done(0, 4)
    ledger.done(1, 0)
    ledger.retain([0])
    assert ledger.floor(1) is None
    assert ledger.advance(1) is None
    ledger.reset(0, 4)  # a seek back to the committed 4: 4 was delivered already
    assert ledger.advance(0) == 5


def test_records_are_taken_in_order_from_the_committed_position() -> None:
    order: InOrder[int] = InOrder()
    assert order.classify(0, 7, floor=5, epoch=1) == InOrder.HOLE  # 5 and 6 missing
    assert order.expected(0) == 5
    assert order.classify(0, 4, floor=5, epoch=1) == InOrder.SEEN  # committed already
    assert [order.classify(0, o, floor=5, epoch=1) for o in (5, 6, 7)] == [InOrder.PROCESS] * 3
    assert order.classify(0, 9, floor=5, epoch=1) == InOrder.HOLE  # 8 never arrived
    assert order.classify(0, 6, floor=5, epoch=1) == InOrder.SEEN  # a rewind's re-read
    assert order.classify(0, 8, floor=5, epoch=1) == InOrder.PROCESS


def test_a_seek_to_the_committed_positions_starts_every_partition_again() -> None:
    order: InOrder[int] = InOrder()
    for offset in (5, 6, 7):
        order.classify(0, offset, floor=5, epoch=1)
    # A rebalance sought back to the committed 6: 6 and 7 are processed again
    # (their samples are then not newer than their GPUs' last ones).
    assert order.classify(0, 6, floor=6, epoch=2) == InOrder.PROCESS
    assert order.classify(1, 3, floor=None, epoch=2) == InOrder.PROCESS  # floor unknown
    assert order.classify(1, 4, floor=None, epoch=2) == InOrder.PROCESS


def test_where_a_partition_resumes() -> None:
    order: InOrder[int] = InOrder()
    assert order.resumes_at(0, floor=5, epoch=1) == 5  # nothing classified yet
    for offset in (5, 6):
        order.classify(0, offset, floor=5, epoch=1)
    assert order.resumes_at(0, floor=5, epoch=1) == 7  # the next one to process
    assert order.resumes_at(1, floor=3, epoch=1) == 3  # a partition not seen yet
    assert order.resumes_at(0, floor=6, epoch=2) == 6  # sought to the commits since
