"""Adding one record to each of many nodes at once (pure numpy over the round).

A round takes each node at most once (:mod:`fairlane_scorer.core.step`). Every GPU slot
of its nodes' next states is one *lane* (:mod:`fairlane_scorer.core.lanes` gathers
them): a lane is *active* when its GPU has a new sample in the round, passive when the
record lacks the GPU or repeats its last time (its state is carried over as it is). The
spike filter, the instant scores, the decayed score and the emission rule then run as
numpy over all lanes (:mod:`fairlane_scorer.core.vectors`), and each node's next
:class:`~fairlane_scorer.core.node_state.NodeState` is a slice of the round's arrays:
Python work per node, not per GPU, except what a published score needs.
:func:`fairlane_scorer.core.window.accept_sample` is the same step for one GPU, written
with the reference's own functions; the parity test holds both equal to the reference.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import compress

import numpy as np

from fairlane_events.fast_samples import AnyNodeSample
from fairlane_scorer.core.allocations import NodeAllocations
from fairlane_scorer.core.lanes import BoolArray, Lanes, gather
from fairlane_scorer.core.node_state import NO_ECC, IntArray, NodeState
from fairlane_scorer.core.records import GpuLabels
from fairlane_scorer.core.vectors import (
    component_rows,
    decayed_scores,
    hampel_rows,
    health_gates,
    instant_rows,
)
from fairlane_scorer.core.window import FloatArray
from fairlane_scoring.config import COMPONENTS, LOAD_COMPONENTS, ScoreConfig
from fairlane_scoring.reference import ScoreResult

__all__ = ["RoundResult", "advance_round"]

_FIRST_LOAD = 1 + COMPONENTS.index(LOAD_COMPONENTS[0])  # its column in the recent rows
_IS_LOAD = np.array([c in LOAD_COMPONENTS for c in COMPONENTS])


@dataclass
class RoundResult:
    states: list[NodeState | None] = field(default_factory=list)  # None: nothing accepted
    emitted: list[tuple[str, ScoreResult, GpuLabels]] = field(default_factory=list)
    accepted: list[str] = field(default_factory=list)  # GPU uuids scored, in order
    duplicates: int = 0  # GPU samples not newer than their GPU's last one


def _spike_windows(rows: FloatArray, horizon: FloatArray, since: FloatArray) -> FloatArray:
    """(lanes, components, k): each component's causal window of ``rows`` (lanes, k,
    RECENT_COLUMNS), newest last; NaN for samples outside the history window and, for
    load components, earlier samples before the load history restarted (the newest
    value is always in its own window: ``fairlane_scoring.outliers.filter_components``)."""
    rows = rows.copy()
    ts = rows[:, :, 0]
    with np.errstate(invalid="ignore"):
        rows[ts < horizon[:, None]] = np.nan
        before = ts < since[:, None]
    before[:, -1] = False
    load = rows[:, :, _FIRST_LOAD:]
    load[before] = np.nan
    return np.swapaxes(rows[:, :, 1:], 1, 2)


def _append(old: FloatArray, new: FloatArray, active: BoolArray) -> FloatArray:
    """(lanes, rows + 1, columns): ``new`` after each active lane's rows, and a NaN row
    in front of each passive lane's (right-aligned either way)."""
    out = np.empty((old.shape[0], old.shape[1] + 1, old.shape[2]))
    out[:, :-1], out[:, -1] = old, new
    if not active.all():
        passive = ~active
        out[passive, 1:], out[passive, 0] = old[passive], np.nan
    return out


def advance_round(
    round_: Sequence[tuple[AnyNodeSample, NodeState | None, NodeAllocations | None]],
    config: ScoreConfig,
) -> RoundResult:
    """Each node's next state after its record, and the scores to publish."""
    lanes = gather(round_, config.hampel_window - 1)
    out = RoundResult(duplicates=lanes.duplicates)
    active, ts, since = lanes.active, lanes.ts_ms, lanes.load_since_ms
    horizon = ts - config.history_s * 1000
    raws = np.full((len(ts), len(COMPONENTS)), np.nan)
    raws[lanes.sampled] = component_rows(
        lanes.samples,
        config.thermal_margin_c,
        lanes.held_share[lanes.sampled],
        lanes.held_bytes[lanes.sampled],
    )
    gates, ecc = np.zeros(len(ts)), lanes.last_ecc.copy()
    gates[lanes.sampled], ecc[lanes.sampled] = health_gates(
        lanes.samples, lanes.last_ecc[lanes.sampled], NO_ECC
    )
    rows = _append(lanes.recent, np.column_stack([ts, raws]), active)
    filtered = hampel_rows(
        _spike_windows(rows, horizon, since), config.hampel_n_sigma, config.hampel_min_scale
    )
    instants, masked = instant_rows(filtered, config.component_weights)
    kept = _append(lanes.kept, np.column_stack([ts, gates, instants, masked]), active)
    with np.errstate(invalid="ignore"):
        kept[(kept[:, :, 0] < horizon[:, None]) & active[:, None]] = np.nan
        # The spike filter's next window: the newest k - 1 rows inside the history window.
        recent = rows[:, 1:].copy()
        recent[(recent[:, :, 0] < horizon[:, None]) & active[:, None]] = np.nan
    scores, n = decayed_scores(kept, ts, since, config)
    emitted = lanes.emitted
    emit = active & _is_due(scores, ts, emitted, config)
    marks = np.where(emit[:, None], np.column_stack([scores, np.zeros_like(ts), ts]), emitted)
    states = _States(
        lanes,
        kept=kept,
        recent=np.where(active[:, None, None], recent, lanes.recent),
        filtered=np.where(active[:, None], filtered, lanes.filtered),
        last_ecc=np.where(active, ecc, lanes.last_ecc),
        emitted=marks,
    )
    out.states = list(states)
    out.accepted = list(compress(lanes.uuids, active.tolist()))
    due = np.flatnonzero(emit).tolist()
    counted = ts[due] >= since[due]
    # reference.reported_components: the filtered components, load ones None when masked.
    # NaN -> None for the whole round at once (an object array's tolist() gives Python
    # floats and None), not one isnan per component per published score.
    values = filtered[due]
    shown = values.astype(object)
    shown[(~counted[:, None] & _IS_LOAD) | np.isnan(values)] = None
    uuids = lanes.uuids
    out.emitted = [
        (
            uuids[j],
            ScoreResult(
                score=score,
                components=dict(zip(COMPONENTS, row, strict=True)),
                samples_in_window=count,
                stale=False,  # scored at its own sample's time
                ts_ms=at_ms,
            ),
            labels,
        )
        for j, labels, score, count, row, at_ms in zip(
            due,
            lanes.labels(due),
            scores[due].tolist(),
            n[due].tolist(),
            shown.tolist(),
            ts[due].astype(np.int64).tolist(),
            strict=True,
        )
    ]
    return out


def _is_due(
    scores: FloatArray, now_ms: FloatArray, emitted: FloatArray, config: ScoreConfig
) -> BoolArray:
    """``window.should_emit`` of every lane at its own sample's time (not stale)."""
    last_score, last_stale, at_ms = emitted.T
    since_ms = now_ms - at_ms
    with np.errstate(invalid="ignore"):
        return (  # type: ignore[no-any-return]
            np.isnan(last_score)
            | np.isnan(at_ms)
            | (np.abs(scores - last_score) > config.emit_epsilon)
            | (last_stale != 0.0)
            | (since_ms >= config.heartbeat_s * 1000)
            | (since_ms > config.stale_after_s * 1000)
        )


class _States:
    """The nodes' next states: each node's lanes of the round's arrays, rows trimmed to
    its widest GPU and copied (a state never keeps the round's arrays alive)."""

    def __init__(
        self,
        lanes: Lanes,
        *,
        kept: FloatArray,
        recent: FloatArray,
        filtered: FloatArray,
        last_ecc: IntArray,
        emitted: FloatArray,
    ) -> None:
        self._lanes = lanes
        self._kept, self._recent, self._filtered = kept, recent, filtered
        self._last_ecc, self._emitted = last_ecc, emitted
        counts = np.count_nonzero(~np.isnan(kept[:, :, 0]), axis=1)
        self._widths = np.maximum.reduceat(counts, lanes.starts).tolist()

    def __iter__(self) -> Iterator[NodeState | None]:
        lanes = self._lanes
        width = self._kept.shape[1]
        for i, (start, end) in enumerate(lanes.spans()):
            if not lanes.active[start:end].any():
                yield None
                continue
            index, model, mem_total = lanes.node_label[i]
            yield NodeState(
                node=lanes.nodes[i],
                uuids=lanes.node_uuids[i],
                index=index,
                model=model,
                mem_total_bytes=mem_total,
                kept=self._kept[start:end, width - self._widths[i] :].copy(),
                recent=self._recent[start:end].copy(),
                filtered=self._filtered[start:end].copy(),
                last_ecc=self._last_ecc[start:end].copy(),
                emitted=self._emitted[start:end].copy(),
            )
