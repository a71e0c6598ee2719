"""The summaries of a few nodes in plain Python (pure): what ``NodeSummaries._compute``
derives with numpy (core/node_summary.py), for the one to four nodes that change between
two placement decisions. On arrays of a few rows numpy's cost is its ~60 calls, not the
work (~100 us for one node or twelve); a loop over the rows costs ~25 us a node. The
values are the same (tests/unit/test_node_summary.py compares the two ways).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from fairlane_scheduler.core.fleet import NEVER, FleetView
from fairlane_scheduler.core.node_states import (
    ALLOCATED,
    BACK_S,
    BELOW,
    BEST_BELOW,
    COOLING,
    CORDONED,
    FREE,
    HEALTHY,
    NOT_DUE,
    STALE,
    TALLY_WIDTH,
)
from fairlane_scheduler.core.placement import PlacementPolicy

__all__ = ["NodeRows", "placement_order", "summarise"]

_INT64_MAX = 2**63 - 1


class NodeRows(NamedTuple):
    """One node's summary: its due time, tally, qualifying capacities best first and
    rows in placement order (both padded to the slots), size, model and memory range,
    and each of its rows' state without its hold (``NodeSummaries``' in-place updates
    read it)."""

    due: int
    tally: list[int]
    capacity: list[float]
    ranked: list[int]
    size: int
    model: int
    mem_lo: int
    mem_hi: int
    unheld: list[int]


#: The fleet's columns a summary reads, in the order of a :data:`_Row`.
_COLUMNS = (
    *("score", "capacity", "ts_ms", "stale", "dropped_ms", "recovered_ms", "held"),
    *("index", "model", "mem_bytes"),
)
_Row = tuple[int, float, float, int, bool, int, int, bool, int, int, int]  # row, then _COLUMNS


def summarise(
    fleet: FleetView,
    policy: PlacementPolicy,
    rows: Sequence[Sequence[int]],
    cordoned: Sequence[bool],
    now_ms: int,
) -> list[NodeRows]:
    """Per node of ``rows`` (its fleet rows per slot, -1 padding) and its cordon."""
    present = [row for node in rows for row in node if row >= 0]
    # One gather per column for all the nodes: reading numpy elements one at a time
    # costs more than the whole loop below.
    at = np.array(present, dtype=np.intp)
    columns = [getattr(fleet, name)[at].tolist() for name in _COLUMNS]
    table = iter(zip(present, *columns, strict=True))
    found = []
    clock = _Clock(fleet, policy, now_ms)
    for node, node_cordoned in zip(rows, cordoned, strict=True):
        size = sum(1 for row in node if row >= 0)
        mine: list[_Row] = [next(table) for _ in range(size)]
        found.append(_node(fleet, clock, mine, slots=len(node), cordoned=node_cordoned))
    return found


class _Clock:
    """What a row's state reads besides the row: the policy and the time."""

    def __init__(self, fleet: FleetView, policy: PlacementPolicy, now_ms: int) -> None:
        self.window_ms = fleet.stability.window_s * 1000
        self.after_ms = policy.stale_after_s * 1000
        self.threshold, self.exclude_stale = policy.threshold, policy.stale == "exclude"
        self.now_ms = now_ms

    def state(self, row: _Row, *, cordoned: bool) -> tuple[int, int]:
        """The row's first reason but its hold (FREE: none), and when the clock alone may
        change it."""
        _, score, _, ts, stale, dropped_ms, recovered, *_ = row
        now_ms, dropped = self.now_ms, dropped_ms != NEVER
        cooling = dropped and (recovered == NEVER or now_ms - recovered < self.window_ms)
        state = COOLING if cooling else FREE
        if score < self.threshold:
            state = BELOW
        end = NOT_DUE
        if dropped and recovered != NEVER:
            end = math.ceil(recovered + self.window_ms)
            end = end if end > now_ms else NOT_DUE
        if self.exclude_stale:
            if stale or ts < now_ms - self.after_ms:
                state = STALE
            if now_ms < (turns := math.floor(ts + self.after_ms) + 1) < end:
                end = turns
        if cordoned:
            state = CORDONED
        return state, end


def _node(
    fleet: FleetView, clock: _Clock, rows: list[_Row], *, slots: int, cordoned: bool
) -> NodeRows:
    tally = [0] * TALLY_WIDTH
    best_below, back_ms, due = -1.0, NEVER, NOT_DUE
    free: list[tuple[float, int, int, float]] = []  # (-score, index, row, capacity)
    unheld = []
    for entry in rows:
        state, end = clock.state(entry, cordoned=cordoned)
        row, score, capacity, _, _, _, recovered, held, index, _, _ = entry
        unheld.append(state)
        state = ALLOCATED if held else state
        due = min(due, end)
        tally[state] += 1
        tally[HEALTHY] += score > 0
        if state == BELOW:
            best_below = max(best_below, score)
        elif state == COOLING:
            back_ms = max(back_ms, recovered)
        elif state == FREE:
            free.append((-score, index, row, capacity))
    tally[BEST_BELOW] = round(best_below * 100)
    tally[BACK_S] = back_ms // 1000
    capacities, ranked = placement_order(free, slots)
    models = {model for *_, model, _ in rows}
    memory = [mem for *_, mem in rows]
    return NodeRows(
        due=due,
        tally=tally,
        capacity=capacities,
        ranked=ranked,
        size=len(rows),
        # A node whose GPUs all moved away reads row 0's model, as the numpy way does.
        model=models.pop() if len(models) == 1 else (-1 if models else int(fleet.model[0])),
        mem_lo=min(memory, default=_INT64_MAX),
        mem_hi=max(memory, default=-1),
        unheld=unheld,
    )


def placement_order(
    free: list[tuple[float, int, int, float]], slots: int
) -> tuple[list[float], list[int]]:
    """A node's qualifying GPUs as (-score, index, row, capacity): their capacities best
    first and their rows in placement order, both padded to ``slots``."""
    free.sort()  # best score first, then GPU index (a stable lexsort's order)
    pad = slots - len(free)
    capacity = sorted((c for *_, c in free), reverse=True) + [-math.inf] * pad
    return capacity, [row for _, _, row, _ in free] + [-1] * pad
