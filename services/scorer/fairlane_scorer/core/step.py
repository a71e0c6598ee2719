"""The scorer's one step over a batch of node-sample records (pure).

``(node windows, records, allocations, config, now) -> (new node windows, score records,
rejections)``: the Faust agent, the benchmark and the tests all call :func:`decode_batch`
and :func:`score_batch`. Records of different nodes are independent, so a batch is cut
into rounds that take each node at most once, in arrival order, and every GPU of a round
is advanced together over the nodes' columnar states
(:func:`fairlane_scorer.core.advance.advance_round`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from fairlane_events.codec import DecodeError
from fairlane_events.fast_samples import AnyNodeSample, decode_node_sample
from fairlane_scorer.core.advance import advance_round
from fairlane_scorer.core.allocations import NodeAllocations
from fairlane_scorer.core.node_state import NodeState, NodeWindows, as_state
from fairlane_scorer.core.records import GpuLabels
from fairlane_scoring.config import ScoreConfig
from fairlane_scoring.reference import ScoreResult

__all__ = ["BatchResult", "Rejection", "decode_batch", "score_batch"]


@dataclass(frozen=True)
class Rejection:
    """Record ``position`` of the batch, and why it cannot be scored."""

    position: int
    error: str


def decode_batch(
    records: Sequence[tuple[bytes | None, bytes | None]],
) -> tuple[list[AnyNodeSample], list[Rejection]]:
    """Decode and validate ``(key, value)`` records strictly (the published JSON Schema;
    msgspec's structs first, :mod:`fairlane_events.fast_samples`); a record keyed
    otherwise than by its node is rejected too: it may sit in another partition than the
    node's state."""
    samples: list[AnyNodeSample] = []
    rejected: list[Rejection] = []
    for position, (key, value) in enumerate(records):
        try:
            sample = decode_node_sample(value)
        except DecodeError as exc:
            rejected.append(Rejection(position, str(exc)))
            continue
        if key != sample.node.encode():
            rejected.append(Rejection(position, f"key {key!r} is not the node {sample.node!r}"))
            continue
        samples.append(sample)
    return samples, rejected


@dataclass
class BatchResult:
    rows: dict[str, NodeState] = field(default_factory=dict)  # changed nodes
    emitted: list[tuple[str, ScoreResult, GpuLabels]] = field(default_factory=list)
    accepted: list[str] = field(default_factory=list)  # GPU uuids scored, in order
    duplicates: int = 0  # GPU samples not newer than their GPU's last one


def _rounds(samples: Sequence[AnyNodeSample]) -> list[list[AnyNodeSample]]:
    """The k-th round holds each node's k-th record of the batch."""
    rounds: list[list[AnyNodeSample]] = []
    seen: dict[str, int] = {}
    for sample in samples:
        k = seen.get(sample.node, 0)
        seen[sample.node] = k + 1
        if k == len(rounds):
            rounds.append([])
        rounds[k].append(sample)
    return rounds


def score_batch(
    samples: Sequence[AnyNodeSample],
    windows: Mapping[str, NodeWindows],
    allocations: Mapping[str, NodeAllocations | None],
    config: ScoreConfig,
) -> BatchResult:
    """Each changed node's state after its samples, and the scores to publish (in order
    per GPU). ``windows`` and ``allocations``: the current table rows of the batch's
    nodes (a row that is not a NodeState is converted once)."""
    out = BatchResult()
    for round_ in _rounds(samples):
        inputs = []
        for s in round_:
            state = out.rows.get(s.node)
            if state is None and (row := windows.get(s.node)):
                state = as_state(row)
            inputs.append((s, state, allocations.get(s.node)))
        done = advance_round(inputs, config)
        for s, state in zip(round_, done.states, strict=True):
            if state is not None:
                out.rows[s.node] = state
        out.emitted += done.emitted
        out.accepted += done.accepted
        out.duplicates += done.duplicates
    return out
