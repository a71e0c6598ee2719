"""A round's nodes laid out as lanes: one per GPU slot of each node's next state (pure).

A node's lanes are its state's GPUs in their order, then the GPUs its record adds. A
lane is active when its GPU's sample in the record is newer than the GPU's last one;
a lane whose GPU the record lacks, or repeats (a duplicate), is passive and carries its
state over. The state's arrays of all nodes are gathered into round arrays (kept rows
right-aligned to the round's widest node) so that
:func:`fairlane_scorer.core.advance.advance_round` can work on all lanes at once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import cast

import numpy as np
import numpy.typing as npt

from fairlane_events.fast_samples import AnyGpuSample, AnyNodeSample
from fairlane_scorer.core.allocations import NodeAllocations, allocations_of
from fairlane_scorer.core.node_state import EMITTED_COLUMNS, NO_ECC, IntArray, NodeState
from fairlane_scorer.core.records import GpuLabels
from fairlane_scorer.core.window import RECENT_COLUMNS, FloatArray
from fairlane_scoring.activity import gpu_activity
from fairlane_scoring.allocation import NOTHING_HELD, Held, held_at, load_since_ms
from fairlane_scoring.config import COMPONENTS
from fairlane_scoring.reference import KEPT_COLUMNS

__all__ = ["Lanes", "gather"]

BoolArray = npt.NDArray[np.bool_]
#: Per lane: index, model, mem_total_bytes (as its newest accepted sample said).
Labels = tuple[tuple[int, ...], tuple[str, ...], tuple[int | None, ...]]
_LABELS = attrgetter("index", "model", "mem_total_bytes")
_UUID = attrgetter("uuid")


@dataclass
class _Node:
    """One node's lanes, before the round's arrays are built."""

    state: NodeState | None
    uuids: tuple[str, ...]
    samples: list[AnyGpuSample | None]  # per lane: its new sample, None when passive
    labels: Labels  # index, model, mem_total_bytes per lane
    since: list[float]
    held: list[Held]  # what fractional tenants hold of each lane's GPU at the record's time


def _node(
    sample: AnyNodeSample, state: NodeState | None, allocations: NodeAllocations | None
) -> tuple[_Node, int]:
    """The node's lanes, and how many of its record's GPU samples are duplicates."""
    gpus: Sequence[AnyGpuSample] = sample.gpus
    ts = sample.ts_ms
    uuids = tuple(map(_UUID, gpus))
    samples: list[AnyGpuSample | None]
    duplicates = 0
    if state is None:
        samples = list(gpus)
    else:
        newer = (ts > state.last_ts_ms()).tolist()
        if uuids == state.uuids:
            samples = [g if new else None for g, new in zip(gpus, newer, strict=True)]
            duplicates = len(gpus) - sum(newer)
        else:
            samples = [None] * len(state.uuids)
            added = []
            for g in gpus:
                slot = state.slot(g.uuid)
                if slot is None:
                    added.append(g.uuid)
                    samples.append(g)
                elif newer[slot]:
                    samples[slot] = g
                else:
                    duplicates += 1
            uuids = state.uuids + tuple(added)
    if state is None or all(s is not None for s in samples):
        labels = cast(Labels, tuple(zip(*map(_LABELS, samples), strict=True)))
    else:
        old = state.index, state.model, state.mem_total_bytes
        labels = cast(
            Labels,
            tuple(
                zip(
                    *(
                        (old[0][j], old[1][j], old[2][j]) if s is None else _LABELS(s)
                        for j, s in enumerate(samples)
                    ),
                    strict=True,
                )
            ),
        )
    if allocations:
        of = [allocations_of(allocations, u) for u in uuids]
        since = [load_since_ms(a, ts) for a in of]
        held = [held_at(a, ts) for a in of]
    else:
        since = [-math.inf] * len(uuids)
        held = [NOTHING_HELD] * len(uuids)
    return _Node(state, uuids, samples, labels, since, held), duplicates


@dataclass
class Lanes:
    nodes: list[str]
    node_uuids: list[tuple[str, ...]]
    node_label: list[Labels]
    starts: IntArray  # each node's first lane
    uuids: list[str]  # per lane
    active: BoolArray  # per lane
    ts_ms: FloatArray  # per lane: its node's record time
    load_since_ms: FloatArray
    held_share: FloatArray  # per lane: the fractional tenants' compute share of its GPU
    held_bytes: FloatArray  # ...and their memory
    samples: list[AnyGpuSample]  # of the active lanes, in lane order
    sampled: IntArray  # the active lanes
    kept: FloatArray  # (lanes, rows, KEPT_COLUMNS), right-aligned, NaN rows in front
    recent: FloatArray  # (lanes, recent rows, RECENT_COLUMNS), the same way
    filtered: FloatArray
    last_ecc: IntArray
    emitted: FloatArray
    duplicates: int

    def spans(self) -> list[tuple[int, int]]:
        ends = [*self.starts.tolist()[1:], len(self.uuids)]
        return list(zip(self.starts.tolist(), ends, strict=True))

    def labels(self, lanes: list[int]) -> list[GpuLabels]:
        """The score-record labels of these (active) lanes, with their new sample's
        activity."""
        node_of = np.repeat(np.arange(len(self.nodes)), np.diff([*self.starts, len(self.uuids)]))
        starts, nodes, node_label = self.starts.tolist(), self.nodes, self.node_label
        sample_of = np.searchsorted(self.sampled, lanes).tolist()
        out = []
        for lane, i, k in zip(lanes, node_of[lanes].tolist(), sample_of, strict=True):
            index, model, mem_total = node_label[i]
            g = lane - starts[i]
            activity = gpu_activity(self.samples[k])
            out.append(GpuLabels(nodes[i], index[g], model[g], mem_total[g], activity))
        return out


def gather(
    round_: Sequence[tuple[AnyNodeSample, NodeState | None, NodeAllocations | None]],
    recent_rows: int,
) -> Lanes:
    """The lanes of a round's nodes (each node at most once), ``recent_rows`` rows of
    the spike filter's window each."""
    nodes, duplicates = [], 0
    for sample, state, allocations in round_:
        node, dup = _node(sample, state, allocations)
        nodes.append(node)
        duplicates += dup
    sizes = [len(n.uuids) for n in nodes]
    starts = np.cumsum([0, *sizes[:-1]])
    total = sum(sizes)
    width = max((n.state.kept.shape[1] for n in nodes if n.state is not None), default=0)
    kept = np.full((total, width, len(KEPT_COLUMNS)), np.nan)
    recent = np.full((total, recent_rows, len(RECENT_COLUMNS)), np.nan)
    filtered = np.full((total, len(COMPONENTS)), np.nan)
    last_ecc = np.full(total, NO_ECC, dtype=np.int64)
    emitted = np.full((total, len(EMITTED_COLUMNS)), np.nan)
    ts = np.repeat([float(s.ts_ms) for s, _, _ in round_], sizes)
    for n, start in zip(nodes, starts.tolist(), strict=True):
        state = n.state
        if state is None:
            continue
        end = start + len(state.uuids)
        kept[start:end, width - state.kept.shape[1] :] = state.kept
        take = min(recent_rows, state.recent.shape[1])
        if take:
            recent[start:end, recent_rows - take :] = state.recent[:, -take:]
        filtered[start:end] = state.filtered
        last_ecc[start:end] = state.last_ecc
        emitted[start:end] = state.emitted
    lane_samples = [s for n in nodes for s in n.samples]
    active = np.array([s is not None for s in lane_samples], dtype=bool)
    return Lanes(
        nodes=[s.node for s, _, _ in round_],
        node_uuids=[n.uuids for n in nodes],
        node_label=[n.labels for n in nodes],
        starts=starts,
        uuids=[u for n in nodes for u in n.uuids],
        active=active,
        ts_ms=ts,
        load_since_ms=np.array([x for n in nodes for x in n.since], dtype=np.float64),
        held_share=np.array([h.share for n in nodes for h in n.held], dtype=np.float64),
        held_bytes=np.array([h.memory_bytes for n in nodes for h in n.held], dtype=np.float64),
        samples=[s for s in lane_samples if s is not None],
        sampled=np.flatnonzero(active),
        kept=kept,
        recent=recent,
        filtered=filtered,
        last_ecc=last_ecc,
        emitted=emitted,
        duplicates=duplicates,
    )
