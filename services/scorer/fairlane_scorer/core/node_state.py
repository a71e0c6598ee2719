"""One node's GPUs column by column: the scorer's table row (pure).

The worker advances every GPU of a round together (:mod:`fairlane_scorer.core.advance`),
so the state it keeps per node is a few arrays with one entry per GPU, not one object
per GPU: ``kept[g]`` holds GPU ``g``'s KEPT_COLUMNS rows inside the history window,
oldest first and *right-aligned* (NaN rows in front where a GPU has fewer rows than the
node's widest), so every GPU's newest row is ``kept[g, -1]``; ``recent[g]`` holds the
spike filter's last ``hampel_window - 1`` raw rows the same way. Arrays are never
written once a state is built (a step builds the next state), so a decoded state can be
a read-only view of its table bytes: one copy of each node's state.

A :class:`NodeState` is also a ``Mapping[str, GpuWindow]``: the one-GPU form
(:mod:`fairlane_scorer.core.window`), built on access, for the staleness timer, the
evaluation and the parity test.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from fairlane_scorer.core.window import RECENT_COLUMNS, FloatArray, GpuWindow, components_of
from fairlane_scoring.config import COMPONENTS, ScoreConfig
from fairlane_scoring.reference import KEPT_COLUMNS

__all__ = [
    "EMITTED_COLUMNS",
    "NO_ECC",
    "IntArray",
    "NodeState",
    "NodeWindows",
    "as_state",
    "keep_slots",
    "overdue",
]

IntArray = npt.NDArray[np.int64]
#: GPU uuid -> its window, for one node (a NodeState, or plain windows to encode).
NodeWindows = Mapping[str, GpuWindow]
#: Columns of ``NodeState.emitted``: what the scores topic was last told (NaN: never).
EMITTED_COLUMNS = ("score", "stale", "at_ms")
#: ``NodeState.last_ecc`` of a GPU that never reported an ECC count (counts are >= 0).
NO_ECC = -1


def _nan_or(value: float | bool | None) -> float:
    return math.nan if value is None else float(value)


def _or_none(value: float) -> float | None:
    return None if math.isnan(value) else value


@dataclass(frozen=True, eq=False)
class NodeState(Mapping[str, GpuWindow]):
    node: str
    uuids: tuple[str, ...]
    index: tuple[int, ...]  # per GPU, as its newest accepted sample said
    model: tuple[str, ...]
    mem_total_bytes: tuple[int | None, ...]
    kept: FloatArray  # (GPUs, rows, KEPT_COLUMNS), right-aligned, NaN rows in front
    recent: FloatArray  # (GPUs, rows, RECENT_COLUMNS), right-aligned, NaN rows in front
    filtered: FloatArray  # (GPUs, COMPONENTS): the newest filtered components, NaN: None
    last_ecc: IntArray  # (GPUs,): the newest reported uncorrected ECC count, NO_ECC: none
    emitted: FloatArray  # (GPUs, EMITTED_COLUMNS), NaN: nothing emitted yet
    _slot: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_slot", {u: g for g, u in enumerate(self.uuids)})

    def slot(self, uuid: str) -> int | None:
        return self._slot.get(uuid)

    def last_ts_ms(self) -> FloatArray:
        """(GPUs,): each GPU's newest accepted sample time (every GPU keeps that row)."""
        return self.kept[:, -1, 0]

    def window(self, g: int) -> GpuWindow:
        """GPU ``g``'s window in the one-GPU form (its arrays are views of this state's)."""
        kept, recent = self.kept[g], self.recent[g]
        score, stale, at_ms = self.emitted[g].tolist()
        ecc = int(self.last_ecc[g])
        return GpuWindow(
            node=self.node,
            index=self.index[g],
            model=self.model[g],
            mem_total_bytes=self.mem_total_bytes[g],
            kept=kept[int(np.count_nonzero(np.isnan(kept[:, 0]))) :],
            recent=recent[int(np.count_nonzero(np.isnan(recent[:, 0]))) :],
            filtered=components_of(self.filtered[g]),
            last_ecc=None if ecc == NO_ECC else ecc,
            emitted_score=_or_none(score),
            emitted_stale=None if math.isnan(stale) else bool(stale),
            emitted_at_ms=None if math.isnan(at_ms) else int(at_ms),
        )

    def __getitem__(self, uuid: str) -> GpuWindow:
        return self.window(self._slot[uuid])

    def __iter__(self) -> Iterator[str]:
        return iter(self.uuids)

    def __len__(self) -> int:
        return len(self.uuids)

    def __contains__(self, uuid: object) -> bool:
        return uuid in self._slot


def _right_aligned(rows: list[FloatArray], columns: int) -> FloatArray:
    """(len(rows), widest, columns): each array's rows at the end, NaN rows in front."""
    width = max((len(r) for r in rows), default=0)
    out = np.full((len(rows), width, columns), np.nan)
    for g, r in enumerate(rows):
        if len(r):
            out[g, width - len(r) :] = r
    return out


def as_state(windows: NodeWindows) -> NodeState:
    """``windows`` as a NodeState (itself when it is one). All windows of one row
    belong to one node: the first one's name is the row's."""
    if isinstance(windows, NodeState):
        return windows
    ws = list(windows.values())
    return NodeState(
        node=ws[0].node if ws else "",
        uuids=tuple(windows),
        index=tuple(w.index for w in ws),
        model=tuple(w.model for w in ws),
        mem_total_bytes=tuple(w.mem_total_bytes for w in ws),
        kept=_right_aligned([w.kept for w in ws], len(KEPT_COLUMNS)),
        recent=_right_aligned([w.recent for w in ws], len(RECENT_COLUMNS)),
        filtered=np.array([[_nan_or(v) for v in w.filtered] for w in ws], dtype=np.float64).reshape(
            len(ws), len(COMPONENTS)
        ),
        last_ecc=np.array(
            [NO_ECC if w.last_ecc is None else w.last_ecc for w in ws], dtype=np.int64
        ),
        emitted=np.array(
            [
                [_nan_or(w.emitted_score), _nan_or(w.emitted_stale), _nan_or(w.emitted_at_ms)]
                for w in ws
            ],
            dtype=np.float64,
        ).reshape(len(ws), len(EMITTED_COLUMNS)),
    )


def keep_slots(state: NodeState, slots: Sequence[int]) -> NodeState:
    """The state of only these GPUs (slots, in this order), its kept rows trimmed to the
    widest of them."""
    at = np.asarray(slots, dtype=np.intp)
    kept = state.kept[at]
    width = int(np.count_nonzero(~np.isnan(kept[:, :, 0]), axis=1).max(initial=0))
    return NodeState(
        node=state.node,
        uuids=tuple(state.uuids[g] for g in slots),
        index=tuple(state.index[g] for g in slots),
        model=tuple(state.model[g] for g in slots),
        mem_total_bytes=tuple(state.mem_total_bytes[g] for g in slots),
        kept=kept[:, kept.shape[1] - width :],
        recent=state.recent[at],
        filtered=state.filtered[at],
        last_ecc=state.last_ecc[at],
        emitted=state.emitted[at],
    )


def overdue(state: NodeState, now_ms: int, config: ScoreConfig) -> list[int]:
    """The GPUs (slots) without a sample for longer than ``stale_after``
    (``window.is_overdue`` for the whole node)."""
    late = now_ms - state.last_ts_ms() > config.stale_after_s * 1000
    return np.flatnonzero(late).tolist()  # type: ignore[no-any-return]
