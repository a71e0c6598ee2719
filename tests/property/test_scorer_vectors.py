"""The worker's fast paths equal the reference's: the vectorised components, and the
score record's JSON built without pydantic."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fairlane_events.codec import encode
from fairlane_events.records import GpuSample
from fairlane_scorer.core.records import score_json, score_record
from fairlane_scorer.core.vectors import component_rows
from fairlane_scorer.core.window import RECENT_COLUMNS, GpuWindow
from fairlane_scoring.components import component_scores
from fairlane_scoring.reference import ScoreResult, reported_components

T0 = 1_700_000_000_000


def maybe(values: st.SearchStrategy[float] | st.SearchStrategy[int]) -> st.SearchStrategy:
    return st.one_of(st.none(), values)


@st.composite
def samples(draw: st.DrawFn) -> GpuSample:
    total = draw(maybe(st.integers(0, 2**50)))
    used = None if total is None else draw(maybe(st.integers(0, total)))
    pct, mhz, watts = st.floats(0, 100), st.floats(0, 10_000), st.floats(0, 5_000)
    return GpuSample(
        uuid="GPU-v",
        index=0,
        model="m",
        mem_total_bytes=total,
        mem_used_bytes=used,
        gpu_util_pct=draw(maybe(pct)),
        mem_util_pct=draw(maybe(pct)),
        sm_active=draw(maybe(st.floats(0, 1))),
        temp_c=draw(maybe(st.floats(0, 250))),
        slowdown_temp_c=draw(maybe(st.floats(0.5, 250))),
        power_w=draw(maybe(watts)),
        power_limit_w=draw(maybe(watts)),
        sm_clock_mhz=draw(maybe(mhz)),
        max_sm_clock_mhz=draw(maybe(st.one_of(st.just(0.0), mhz))),
        clock_event_reasons=draw(maybe(st.sampled_from([0, 1, 0x40, 0x41, 2**63 + 1, 2**64 - 2]))),
    )


@settings(max_examples=300, deadline=None)
@given(st.lists(samples(), min_size=1, max_size=8), st.floats(1, 50))
def test_component_rows_equal_component_scores(batch: list[GpuSample], margin: float) -> None:
    rows = component_rows(batch, margin)
    for sample, row in zip(batch, rows.tolist(), strict=True):
        want = component_scores(sample, margin)
        got = tuple(None if math.isnan(v) else v for v in row)
        assert got == want, (sample, got, want)


@settings(max_examples=200, deadline=None)
@given(
    score=st.floats(0, 1),
    components=st.lists(maybe(st.floats(0, 1)), min_size=6, max_size=6),
    counted=st.booleans(),
    model=st.sampled_from(["NVIDIA H100 80GB HBM3", "Tesla V100-SXM2-16GB", "unknown GPU"]),
    mem_total=maybe(st.integers(0, 2**50)),
    samples=st.integers(0, 200),
    stale=st.booleans(),
)
def test_score_json_is_the_validated_records_encoding(
    score: float,
    components: list[float | None],
    counted: bool,
    model: str,
    mem_total: int | None,
    samples: int,
    stale: bool,
) -> None:
    window = GpuWindow(
        node="node-v",
        index=3,
        model=model,
        mem_total_bytes=mem_total,
        kept=np.array([[T0, 1.0, score, score]]),
        recent=np.empty((0, len(RECENT_COLUMNS))),
        filtered=tuple(components),
        last_ecc=None,
    )
    result = ScoreResult(
        score=score,
        components=reported_components(tuple(components), counted=counted),
        samples_in_window=samples,
        stale=stale,
        ts_ms=T0,
    )
    assert score_json("GPU-v", window, result) == encode(score_record("GPU-v", window, result))
