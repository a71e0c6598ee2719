"""What the scorer's agents and timer do with each record, behind the Faust wiring.

:class:`ScoringAgents` holds the topics, tables, config and metrics it is given by
``create_app`` and never creates them itself. Faust tables may only be written from the
agent that owns the partition, so the staleness scan reads ``windows`` and publishes stale
records without writing it; the next sample of such a GPU re-publishes its fresh score
(``should_emit``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import faust
from faust.types import TableT

from fairlane_events.codec import DecodeError, decode, encode
from fairlane_events.dead_letter import dead_letter_for
from fairlane_events.records import NodeSample, PlacementEvent
from fairlane_scorer.core.allocations import allocations_of, apply_placement
from fairlane_scorer.core.node_rows import NodeWindows, decode_node, encode_node
from fairlane_scorer.core.records import model_speed, score_record
from fairlane_scorer.core.window import (
    GpuWindow,
    accept_sample,
    is_overdue,
    mark_emitted,
    score_window,
    should_emit,
)
from fairlane_scorer.delivery import Deliveries
from fairlane_scorer.metrics import ScorerMetrics
from fairlane_scoring.allocation import load_since_ms
from fairlane_scoring.config import ScoreConfig
from fairlane_scoring.reference import ScoreResult

__all__ = ["ScoringAgents", "now_ms"]

log = logging.getLogger("fairlane.scorer")

Table = TableT[str, Any]


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class ScoringAgents:
    config: ScoreConfig
    metrics: ScorerMetrics
    scores: faust.TopicT
    dead_letters: faust.TopicT
    by_node: faust.TopicT
    windows: Table  # node -> encode_node() bytes of its GPUs' windows
    allocations: Table  # node -> NodeAllocations
    unknown_models: set[str] = field(default_factory=set)
    announced_stale: set[str] = field(default_factory=set)  # lost on restart: re-sent once
    # node -> (the row's bytes, decoded): decoded again only when the table holds other
    # bytes (a recovery or rebalance wrote it).
    decoded: dict[str, tuple[bytes, NodeWindows]] = field(default_factory=dict)

    def node_windows(self, node: str) -> NodeWindows:
        stored = self.windows.get(node)
        if stored is None:
            self.decoded.pop(node, None)
            return {}
        cached = self.decoded.get(node)
        if cached is not None and cached[0] is stored:
            return cached[1]
        windows = decode_node(stored)
        self.decoded[node] = (stored, windows)
        return windows

    async def reject(self, event: faust.EventT[Any], error: str, out: Deliveries) -> None:
        """Dead-letter a record with the error and its origin, and count it."""
        msg = event.message
        record = dead_letter_for(
            topic=msg.topic,
            partition=msg.partition,
            offset=msg.offset,
            key=msg.key,
            value=msg.value,
            error=error,
            now_ms=now_ms(),
        )
        await out.send(self.dead_letters, value=encode(record))
        self.metrics.dead_lettered.inc()
        log.warning("dead-lettered %s[%d]@%d: %s", msg.topic, msg.partition, msg.offset, error)

    async def on_sample(self, event: faust.EventT[Any], out: Deliveries) -> None:
        self.metrics.records_in.inc()
        try:
            sample = decode(NodeSample, event.message.value)
        except DecodeError as exc:
            await self.reject(event, str(exc), out)
            return
        if event.message.key != sample.node.encode():
            # Keyed otherwise, it may sit in another partition than its node's state.
            error = f"key {event.message.key!r} is not the node {sample.node!r}"
            await self.reject(event, error, out)
            return
        await self.score_node(sample, event.message.partition, out)

    async def score_node(self, sample: NodeSample, partition: int, out: Deliveries) -> None:
        node_allocations = self.allocations.get(sample.node)
        previous = self.node_windows(sample.node)
        current = dict(previous)
        for gpu in sample.gpus:
            since = load_since_ms(allocations_of(node_allocations, gpu.uuid), sample.ts_ms)
            window = accept_sample(
                current.get(gpu.uuid),
                sample.node,
                sample.ts_ms,
                gpu,
                load_since_ms=since,
                config=self.config,
            )
            if window is None:
                self.metrics.duplicates.inc()
                continue
            self.metrics.scored.inc()
            result = score_window(window, sample.ts_ms, since, self.config)
            if should_emit(window, result, sample.ts_ms, self.config):
                await self.publish(gpu.uuid, window, result, out)
                window = mark_emitted(window, result, sample.ts_ms)
            self.announced_stale.discard(gpu.uuid)
            current[gpu.uuid] = window
        if current != previous:
            row = encode_node(current)
            out.write(self.windows, partition, sample.node, row)
            self.decoded[sample.node] = (row, current)

    async def publish(
        self, uuid: str, window: GpuWindow, result: ScoreResult, out: Deliveries
    ) -> None:
        if not model_speed(window.model)[1] and window.model not in self.unknown_models:
            self.unknown_models.add(window.model)
            log.warning("unknown GPU model %r: assuming the default speed", window.model)
        await out.send(
            self.scores,
            key=uuid.encode(),
            value=encode(score_record(uuid, window, result)),
            timestamp=result.ts_ms / 1000,
        )
        self.metrics.emitted.inc()

    async def on_placement(self, event: faust.EventT[Any], out: Deliveries) -> None:
        """Re-key a placement event by node, once per node it touches."""
        try:
            placement = decode(PlacementEvent, event.message.value)
        except DecodeError as exc:
            await self.reject(event, str(exc), out)
            return
        for node in sorted({a.node for a in placement.nodes}):
            await out.send(self.by_node, key=node.encode(), value=event.message.value)

    async def on_node_placement(self, event: faust.EventT[Any], out: Deliveries) -> None:
        """Apply a re-keyed placement event (validated upstream) to its node's table row."""
        node = (event.key or b"").decode()
        placement = decode(PlacementEvent, event.message.value)
        current = self.allocations.get(node) or {}
        row = apply_placement(current, node, placement, self.config.history_s)
        out.write(self.allocations, event.message.partition, node, row)
        self.metrics.placements.inc()

    async def announce_stale(self, at_ms: int) -> None:
        """Publish a stale score for every GPU that went quiet (once until it returns)."""
        out = Deliveries()
        for node in list(self.windows.keys()):
            node_allocations = self.allocations.get(node)
            for uuid, window in self.node_windows(node).items():
                if uuid in self.announced_stale or not is_overdue(window, at_ms, self.config):
                    continue
                since = load_since_ms(allocations_of(node_allocations, uuid), at_ms)
                result = score_window(window, at_ms, since, self.config)
                await self.publish(uuid, window, result, out)
                self.announced_stale.add(uuid)
                self.metrics.stale_flips.inc()
        await out.settle()
