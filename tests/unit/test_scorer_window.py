"""The streaming window state: encoding, duplicates, emission. (Parity with the reference
over random streams: tests/property/test_scorer_parity.py.)"""

import math
import struct
from dataclasses import replace

import numpy as np
import orjson
import pytest

from fairlane_events.records import GpuSample
from fairlane_scorer.core.node_rows import decode_node, encode_node
from fairlane_scorer.core.window import (
    GpuWindow,
    accept_sample,
    is_overdue,
    mark_emitted,
    score_window,
    should_emit,
)
from fairlane_scorer.errors import NodeRowFormatError
from fairlane_scoring.config import ScoreConfig
from tests.factories import gpu_sample

CONFIG = ScoreConfig(interval_s=30.0, heartbeat_s=60.0, emit_epsilon=0.01)
T0 = 1_700_000_000_000
NEVER = -math.inf  # never allocated: load always counts


def stream(history: list[tuple[int, GpuSample]]) -> GpuWindow:
    window = None
    for ts, sample in history:
        window = (
            accept_sample(window, "node-a", ts, sample, load_since_ms=NEVER, config=CONFIG)
            or window
        )
    assert window is not None
    return window


STEADY = [(T0 + i * 30_000, gpu_sample()) for i in range(10)]


def test_windows_survive_their_node_row_encoding() -> None:
    first = stream([(T0, gpu_sample(sm_active=None, mem_util_pct=None)), *STEADY[1:]])
    second = mark_emitted(first, score_window(first, T0, NEVER, CONFIG), T0)
    decoded = decode_node(encode_node({"GPU-1": first, "GPU-2": second}))
    assert list(decoded) == ["GPU-1", "GPU-2"]
    for got, want in zip(decoded.values(), (first, second), strict=True):
        assert np.array_equal(got.kept, want.kept)
        assert np.array_equal(got.recent, want.recent, equal_nan=True)
        # The newest sample's activity is published with that sample's score, not kept:
        # a window read back from its row is only ever published stale (activity None).
        assert got.activity is None
        restored = replace(got, kept=want.kept, recent=want.recent, activity=want.activity)
        assert restored.__dict__ == want.__dict__


def test_duplicate_sample_is_not_accepted() -> None:
    assert (
        accept_sample(
            stream(STEADY), "node-a", T0, gpu_sample(), load_since_ms=NEVER, config=CONFIG
        )
        is None
    )


def test_window_keeps_only_samples_inside_the_history_window() -> None:
    window = stream([*STEADY, (T0 + 2_000_000, gpu_sample())])
    assert len(window.kept) == 1


def _emitted_window() -> tuple[GpuWindow, int]:
    window = stream(STEADY)
    now = window.last_ts_ms
    return mark_emitted(window, score_window(window, now, NEVER, CONFIG), now), now


def test_first_score_is_always_emitted() -> None:
    window = stream(STEADY)
    assert should_emit(window, score_window(window, T0, NEVER, CONFIG), T0, CONFIG)


def test_small_moves_are_not_emitted_until_the_heartbeat() -> None:
    window, now = _emitted_window()
    result = score_window(window, now, NEVER, CONFIG)
    assert not should_emit(window, replace(result, score=result.score - 0.005), now, CONFIG)
    assert should_emit(window, replace(result, score=result.score - 0.02), now, CONFIG)
    assert should_emit(window, result, now + 60_000, CONFIG)


def test_staleness_flip_is_emitted() -> None:
    window, now = _emitted_window()
    result = score_window(window, now, NEVER, CONFIG)
    assert should_emit(window, replace(result, stale=True), now, CONFIG)


def test_score_after_a_quiet_spell_is_emitted_even_with_a_long_heartbeat() -> None:
    slow = replace(CONFIG, heartbeat_s=3600.0)
    window, now = _emitted_window()
    result = score_window(window, now, NEVER, slow)
    assert not should_emit(window, result, now + 90_000, slow)
    assert should_emit(window, result, now + 90_001, slow)  # the timer may have said stale


def test_overdue_after_stale_after() -> None:
    stored = stream(STEADY)
    last = STEADY[-1][0]
    assert not is_overdue(stored, last + 90_000, CONFIG)
    assert is_overdue(stored, last + 90_001, CONFIG)


def _format_1(windows: dict[str, GpuWindow]) -> bytes:
    """A node row as the scorer wrote it before the columnar state (format 1)."""
    header = {
        "format": 1,
        "gpus": [
            {
                "uuid": uuid,
                "node": w.node,
                "index": w.index,
                "model": w.model,
                "mem_total_bytes": w.mem_total_bytes,
                "rows": len(w.kept),
                "recent": [[row[0], row[1:]] for row in w.recent.tolist()],
                "filtered": w.filtered,
                "last_ecc": w.last_ecc,
                "emitted_score": w.emitted_score,
                "emitted_stale": w.emitted_stale,
                "emitted_at_ms": w.emitted_at_ms,
            }
            for uuid, w in windows.items()
        ],
    }
    encoded = orjson.dumps(header)
    body = b"".join(w.kept.astype("<f8").tobytes() for w in windows.values())
    return struct.pack(">I", len(encoded)) + encoded + body


def test_rows_of_the_earlier_format_are_still_read() -> None:
    first = stream([(T0, gpu_sample(sm_active=None)), *STEADY[1:]])
    second = mark_emitted(stream(STEADY[:3]), score_window(first, T0, NEVER, CONFIG), T0)
    old = _format_1({"GPU-1": first, "GPU-2": second})
    assert decode_node(old).keys() == {"GPU-1", "GPU-2"}
    for got, want in zip(decode_node(old).values(), (first, second), strict=True):
        assert np.array_equal(got.kept, want.kept)
        assert np.array_equal(got.recent, want.recent, equal_nan=True)
        # The newest sample's activity is published with that sample's score, not kept:
        # a window read back from its row is only ever published stale (activity None).
        assert got.activity is None
        restored = replace(got, kept=want.kept, recent=want.recent, activity=want.activity)
        assert restored.__dict__ == want.__dict__
    assert encode_node(decode_node(old)) == encode_node({"GPU-1": first, "GPU-2": second})


def test_a_row_in_an_unknown_format_is_refused() -> None:
    row = encode_node({"GPU-1": stream(STEADY)})
    (length,) = struct.unpack_from(">I", row)
    header = orjson.loads(row[4 : 4 + length])
    changed = orjson.dumps({**header, "format": 99})
    with pytest.raises(NodeRowFormatError):
        decode_node(struct.pack(">I", len(changed)) + changed + row[4 + length :])
