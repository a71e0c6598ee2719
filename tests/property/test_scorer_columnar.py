"""The worker's columnar step equals the one-GPU form, GPU by GPU: the same samples
accepted, the same scores published (``should_emit``), the same state after each batch.

Nodes of several GPUs whose records leave some GPUs out or repeat an old time, so that
GPUs of one node drift apart (the lanes of a round that carry their state over); each
node's state makes a round trip through its table encoding after every batch.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fairlane_events.records import NodeSample
from fairlane_scorer.core.allocations import NodeAllocations, allocations_of
from fairlane_scorer.core.node_rows import decode_node, encode_node
from fairlane_scorer.core.node_state import NodeState, overdue
from fairlane_scorer.core.step import score_batch
from fairlane_scorer.core.window import (
    GpuWindow,
    accept_sample,
    is_overdue,
    mark_emitted,
    score_window,
    should_emit,
)
from fairlane_scoring.allocation import held_at, load_since_ms
from fairlane_scoring.reference import ScoreResult
from tests.property.test_scorer_parity import CONFIG, T0, assert_same, gpu_samples, steps_ms

GPUS = ("GPU-a", "GPU-b", "GPU-c")


@st.composite
def node_records(draw: st.DrawFn, node: str) -> list[NodeSample]:
    unsupported = draw(st.frozensets(st.sampled_from(["sm_active", "temp_c", "power_w"])))
    ts, records = T0, []
    for _ in range(draw(st.integers(1, 25))):
        ts += draw(steps_ms)
        present = draw(st.lists(st.sampled_from(GPUS), min_size=1, max_size=3, unique=True))
        gpus = [
            draw(gpu_samples(unsupported)).model_copy(
                update={"uuid": f"{node}/{uuid}", "index": GPUS.index(uuid)}
            )
            for uuid in present
        ]
        records.append(
            NodeSample(schema_="node-sample/1", node=node, ts_ms=ts, source="sim", gpus=gpus)
        )
    return records


@st.composite
def node_allocations(draw: st.DrawFn, node: str) -> NodeAllocations:
    allocations: NodeAllocations = {}
    for k in range(draw(st.integers(0, 2))):
        start = T0 + draw(st.integers(0, 900_000))
        length = draw(st.one_of(st.none(), st.integers(1, 600_000)))
        gpus = [
            f"{node}/{g}" for g in draw(st.lists(st.sampled_from(GPUS), min_size=1, unique=True))
        ]
        # Whole GPUs, or a share of each (issue 29): their load discounted, not masked.
        share = draw(st.one_of(st.none(), st.floats(0.001, 1.0)))
        memory = None if share is None else draw(st.one_of(st.none(), st.integers(1, 90_000)))
        allocations[str(k)] = {
            "start": start,
            "end": None if length is None else start + length,
            "gpus": gpus,
            "shares": {} if share is None else {g: [share, memory] for g in gpus},
        }
    return allocations


@dataclass
class OneByOne:
    """The one-GPU form: ``accept_sample``, then ``should_emit`` / ``mark_emitted``."""

    windows: dict[str, GpuWindow] = field(default_factory=dict)
    published: list[tuple[str, ScoreResult]] = field(default_factory=list)
    activities: list[tuple[str, int, float | None]] = field(default_factory=list)
    duplicates: int = 0

    def put(self, record: NodeSample, allocations: NodeAllocations) -> None:
        for gpu in record.gpus:
            held = allocations_of(allocations, gpu.uuid)
            since = load_since_ms(held, record.ts_ms)
            window = self.windows.get(gpu.uuid)
            fresh = accept_sample(
                window,
                record.node,
                record.ts_ms,
                gpu,
                load_since_ms=since,
                config=CONFIG,
                held=held_at(held, record.ts_ms),
            )
            if fresh is None:
                self.duplicates += 1
                continue
            result = score_window(fresh, record.ts_ms, since, CONFIG)
            if should_emit(fresh, result, record.ts_ms, CONFIG):
                self.published.append((gpu.uuid, result))
                self.activities.append((gpu.uuid, result.ts_ms, fresh.activity))
                fresh = mark_emitted(fresh, result, record.ts_ms)
            self.windows[gpu.uuid] = fresh


def assert_same_window(got: GpuWindow, want: GpuWindow) -> None:
    assert got.kept.shape == want.kept.shape
    assert np.allclose(got.kept, want.kept, rtol=0, atol=1e-9)
    assert np.array_equal(got.recent, want.recent, equal_nan=True)
    for name, value in want.__dict__.items():
        # A node's state keeps no activity: only a score published with its sample says it.
        if name not in ("kept", "recent", "filtered", "emitted_score", "activity"):
            assert getattr(got, name) == value, name
    assert (got.emitted_score is None) == (want.emitted_score is None)
    assert math.isclose(got.emitted_score or 0.0, want.emitted_score or 0.0, abs_tol=1e-9)
    for a, b in zip(got.filtered, want.filtered, strict=True):
        assert (a is None) == (b is None)
        assert a is None or math.isclose(a, b or 0.0, abs_tol=1e-9)


@settings(max_examples=150, deadline=None)
@given(st.data(), st.integers(1, 2), st.integers(1, 12), st.randoms())
def test_columnar_batches_equal_the_one_gpu_form(
    data: st.DataObject, nodes: int, batch_size: int, rng: random.Random
) -> None:
    names = [f"node-{n}" for n in range(nodes)]
    per_node = [data.draw(node_records(name)) for name in names]
    allocations = {name: data.draw(node_allocations(name)) for name in names}
    records = [(i, r) for rs in per_node for i, r in enumerate(rs)]
    records.sort(key=lambda r: (r[0], rng.random()))  # each node's records stay in order
    oracle = OneByOne()
    rows: dict[str, NodeState] = {}
    published: list[tuple[str, ScoreResult]] = []
    activities: list[tuple[str, int, float | None]] = []
    duplicates = 0
    for first in range(0, len(records), batch_size):
        batch = [r for _, r in records[first : first + batch_size]]
        result = score_batch(batch, rows, dict(allocations), CONFIG)
        rows.update({node: decode_node(encode_node(row)) for node, row in result.rows.items()})
        published += [(uuid, score) for uuid, score, _ in result.emitted]
        activities += [(u, score.ts_ms, labels.activity) for u, score, labels in result.emitted]
        duplicates += result.duplicates
        for record in batch:
            oracle.put(record, allocations[record.node])
        for uuid, want in oracle.windows.items():
            assert_same_window(rows[uuid.split("/")[0]][uuid], want)
    assert duplicates == oracle.duplicates
    got = sorted(published, key=lambda p: (p[0], p[1].ts_ms))
    expected = sorted(oracle.published, key=lambda p: (p[0], p[1].ts_ms))
    assert [u for u, _ in got] == [u for u, _ in expected]
    for (_, a), (_, b) in zip(got, expected, strict=True):
        assert_same(a, b)
    assert sorted(activities, key=str) == sorted(oracle.activities, key=str)
    later = max(r.ts_ms for _, r in records) + data.draw(st.integers(0, 200_000))
    for state in rows.values():
        late = {state.uuids[g] for g in overdue(state, later, CONFIG)}
        assert late == {u for u, w in state.items() if is_overdue(w, later, CONFIG)}
