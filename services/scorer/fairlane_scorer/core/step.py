"""The scorer's one step over a batch of node-sample records (pure).

``(node windows, records, allocations, config, now) -> (new node windows, score records,
rejections)``: the Faust agent, the benchmark and the tests all call :func:`decode_batch`
and :func:`score_batch`. Records of different nodes are independent, so a batch is cut
into rounds that take each node at most once, in arrival order, and every GPU of a round
is advanced together (:func:`fairlane_scorer.core.advance.advance`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from fairlane_events.codec import DecodeError, decode
from fairlane_events.records import NodeSample
from fairlane_scorer.core.advance import advance
from fairlane_scorer.core.allocations import NodeAllocations, allocations_of
from fairlane_scorer.core.node_rows import NodeWindows
from fairlane_scorer.core.window import GpuWindow, Update, mark_emitted, should_emit
from fairlane_scoring.allocation import load_since_ms
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
) -> tuple[list[NodeSample], list[Rejection]]:
    """Decode and validate ``(key, value)`` records strictly (the published JSON Schema);
    a record keyed otherwise than by its node is rejected too: it may sit in another
    partition than the node's state."""
    samples: list[NodeSample] = []
    rejected: list[Rejection] = []
    for position, (key, value) in enumerate(records):
        try:
            sample = decode(NodeSample, value)
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
    rows: dict[str, dict[str, GpuWindow]] = field(default_factory=dict)  # changed nodes
    emitted: list[tuple[str, ScoreResult, GpuWindow]] = field(default_factory=list)
    accepted: list[str] = field(default_factory=list)  # GPU uuids scored, in order
    duplicates: int = 0  # GPU samples not newer than their GPU's last one


def _rounds(samples: Sequence[NodeSample]) -> list[list[NodeSample]]:
    """The k-th round holds each node's k-th record of the batch."""
    rounds: list[list[NodeSample]] = []
    seen: dict[str, int] = {}
    for sample in samples:
        k = seen.get(sample.node, 0)
        seen[sample.node] = k + 1
        if k == len(rounds):
            rounds.append([])
        rounds[k].append(sample)
    return rounds


def score_batch(
    samples: Sequence[NodeSample],
    windows: Mapping[str, NodeWindows],
    allocations: Mapping[str, NodeAllocations | None],
    config: ScoreConfig,
) -> BatchResult:
    """Each node's windows after its samples, and the scores to publish (in order per
    GPU). ``windows`` and ``allocations``: the current table rows of the batch's nodes."""
    out = BatchResult()
    for round_ in _rounds(samples):
        updates: list[Update] = []
        owners: list[tuple[dict[str, GpuWindow], str]] = []
        for s in round_:
            row = out.rows.get(s.node)
            if row is None:
                row = out.rows[s.node] = dict(windows.get(s.node) or {})
            node_allocations = allocations.get(s.node)
            for gpu in s.gpus:
                previous = row.get(gpu.uuid)
                if previous is not None and s.ts_ms <= previous.last_ts_ms:
                    out.duplicates += 1
                    continue
                since = load_since_ms(allocations_of(node_allocations, gpu.uuid), s.ts_ms)
                updates.append(Update(previous, s.node, s.ts_ms, gpu, since))
                owners.append((row, gpu.uuid))
        for (row, uuid), u, (window, result) in zip(
            owners, updates, advance(updates, config), strict=True
        ):
            emit = should_emit(window, result, u.ts_ms, config)
            if emit:
                out.emitted.append((uuid, result, window))
            row[uuid] = mark_emitted(window, result, u.ts_ms) if emit else window
            out.accepted.append(uuid)
    changed = {node for node, row in out.rows.items() if row != dict(windows.get(node) or {})}
    out.rows = {node: row for node, row in out.rows.items() if node in changed}
    return out
