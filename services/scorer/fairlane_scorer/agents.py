"""What the scorer's agents and timer do with each batch, behind the Faust wiring.

Node samples are scored a whole batch at a time by the pure step
(:mod:`fairlane_scorer.core.step`); this module only reads the table rows the batch needs
and hands what the step produced to :class:`~fairlane_scorer.delivery.Deliveries`.

:class:`ScoringAgents` holds the topics, tables, config and metrics it is given by
``create_app`` and never creates them itself. Faust tables may only be written from the
agent that owns the partition, so the staleness scan reads ``windows`` and publishes stale
records without writing it; the next sample of such a GPU re-publishes its fresh score
(``should_emit``). Likewise it tombstones an expired GPU without pruning it: the samples
agent prunes it from the row the next time it writes the node's row.

A node speaks only for its own GPUs (:mod:`fairlane_scorer.identity`): a decoded batch
is checked (replays, rate, GPUs bound to another node) before it is scored.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast

import faust
from faust.types import Message

from fairlane_events.codec import DecodeError, decode
from fairlane_events.records import PlacementEvent
from fairlane_events.signing import SignatureError
from fairlane_scorer.core.allocations import allocations_of, apply_placement
from fairlane_scorer.core.node_identity import CheckedBatch
from fairlane_scorer.core.node_rows import decode_node, encode_node
from fairlane_scorer.core.node_state import NodeState, overdue
from fairlane_scorer.core.records import Labelled, model_speed, score_json
from fairlane_scorer.core.step import decode_batch, score_batch
from fairlane_scorer.core.window import score_window
from fairlane_scorer.delivery import Deliveries
from fairlane_scorer.identity import NodeIdentity
from fairlane_scorer.metrics import ScorerMetrics
from fairlane_scorer.rejects import dead_letter
from fairlane_scorer.sample_signatures import SignatureCheck
from fairlane_scorer.speed_agents import SpeedAgents
from fairlane_scoring.allocation import load_since_ms
from fairlane_scoring.config import ScoreConfig
from fairlane_scoring.reference import ScoreResult

__all__ = ["ScoringAgents", "now_ms"]

log = logging.getLogger("fairlane.scorer")

Table = faust.Table[str, Any]


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class ScoringAgents:
    config: ScoreConfig
    metrics: ScorerMetrics
    scores: faust.TopicT
    dead_letters: faust.TopicT
    by_node: faust.TopicT
    # node -> its GPUs' state: the decoded NodeState once this worker has read or
    # written the row, its encode_node() bytes as recovery left it until then. One copy.
    windows: Table
    allocations: Table  # node -> NodeAllocations
    identity: NodeIdentity
    unknown_models: set[str] = field(default_factory=set)
    announced_stale: set[str] = field(default_factory=set)  # lost on restart: re-sent once
    partition_of: dict[str, int] = field(default_factory=dict)  # node -> its partition
    score_partition: dict[bytes, int] = field(default_factory=dict)  # GPU uuid -> its
    # partition of the scores topic (the key's hash; the topic's partitions never change)
    speeds: SpeedAgents | None = None  # the speed learner's agents, when it runs
    signatures: SignatureCheck | None = None  # None: samples are taken unsigned

    def node_state(self, node: str) -> NodeState | None:
        stored = self.windows.data.get(node)
        if isinstance(stored, bytes):  # recovered from the changelog: decoded once
            stored = decode_node(stored)
            self.windows.data[node] = stored
        return cast(NodeState | None, stored)

    async def reject(self, msg: Message, error: str, out: Deliveries) -> None:
        """Dead-letter a record with the error and its origin, and count it."""
        await dead_letter(out, self.dead_letters, msg, error)
        self.metrics.dead_lettered.inc()

    async def verified(self, messages: list[Message], out: Deliveries) -> list[Message]:
        """The records signed by their node's key; the others dead-lettered with the
        reason and counted, before anything reads them."""
        if self.signatures is None:
            return messages
        passed = []
        for message in messages:
            try:
                self.signatures.verify(message)
            except SignatureError as exc:
                self.metrics.unverified.labels(exc.reason).inc()
                await self.reject(message, str(exc), out)
                continue
            passed.append(message)
        return passed

    async def on_samples(self, messages: list[Message], out: Deliveries) -> None:
        """Verify, decode, validate and score a batch of node-sample records together."""
        self.metrics.records_in.inc(len(messages))
        messages = await self.verified(messages, out)
        samples, rejected = decode_batch([(m.key, m.value) for m in messages])
        for r in rejected:
            await self.reject(messages[r.position], r.error, out)
        at_ms = now_ms()
        nodes = {s.node for s in samples}
        rows = {node: state for node in nodes if (state := self.node_state(node)) is not None}
        checked = self.identity.check(samples, rows, at_ms)
        await self.refuse(checked, messages, {r.position for r in rejected}, out)
        samples = checked.samples
        result = score_batch(
            samples, rows, {node: self.allocations.get(node) for node in nodes}, self.config
        )
        self.metrics.duplicates.inc(result.duplicates)
        self.metrics.scored.inc(len(result.accepted))
        self.announced_stale.difference_update(result.accepted)
        await self.publish_all(result.emitted, out)
        self.metrics.emitted.inc(len(result.emitted))
        if self.speeds is not None:
            await self.speeds.on_scores(result.emitted, samples, out, at_ms)
        partitions = {m.key: m.partition for m in messages}
        reported: dict[str, set[str]] = {}
        for s in samples:
            reported.setdefault(s.node, set()).update(g.uuid for g in s.gpus)
        for node, changed in result.rows.items():
            row = await self.pruned(changed, reported[node], at_ms, out)
            self.identity.bindings.index(row)
            partition = self.partition_of[node] = partitions[node.encode()]
            await out.write(self.windows, partition, node, row, encode_node(row))

    async def refuse(
        self, checked: CheckedBatch, messages: list[Message], rejected: set[int], out: Deliveries
    ) -> None:
        """Dead-letter the records the identity checks refused (whole, or some GPUs):
        ``checked`` counts the decoded records, ``rejected`` the positions of the others."""
        origins = [i for i in range(len(messages)) if i not in rejected]
        for refusal in checked.refused:
            await self.reject(messages[origins[refusal.position]], refusal.error, out)

    async def pruned(
        self, row: NodeState, reported: set[str], at_ms: int, out: Deliveries
    ) -> NodeState:
        """``row`` without its expired GPUs its batch did not report, tombstoned first
        where no other node holds them."""
        row, gone = self.identity.prune(row, reported, at_ms)
        slots = [(row.node, uuid) for uuid in gone]
        await self.forget(slots, at_ms, out)
        self.identity.tombstoned.difference_update(slots)
        return row

    async def forget(self, slots: Iterable[tuple[str, str]], at_ms: int, out: Deliveries) -> None:
        """Tombstone the scores of these expired (node, uuid) slots, once while they stay
        in their row, where the node's row now still holds the slot expired and no other
        node holds the uuid (checked after the last await before the send: a sample may
        have just brought the GPU back)."""
        topic = self.scores.get_topic_name()
        for node, uuid in slots:
            if (node, uuid) in self.identity.tombstoned:
                continue
            key = uuid.encode()
            partition = await self.partition_for(key, out)
            if not self.identity.forgettable(self.node_state(node), uuid, at_ms):
                continue
            await out.send(topic, key, None, partition=partition)
            self.identity.tombstoned.add((node, uuid))
            self.announced_stale.discard(uuid)
            self.metrics.gpus_forgotten.inc()
            log.info("GPU %s of node %s silent past its expiry: tombstoned", uuid, node)

    async def partition_for(self, key: bytes, out: Deliveries) -> int:
        """The scores topic's partition of a GPU's key (the producer's partitioner, once
        per GPU)."""
        partition = self.score_partition.get(key)
        if partition is None:
            topic = self.scores.get_topic_name()
            partition = self.score_partition[key] = await out.partition_of(topic, key)
        return partition

    async def reindex(self) -> None:
        """Index the bindings of every row of the table (a recovery just rebuilt it)."""
        self.identity.reindex(
            state for node in list(self.windows.data.keys()) if (state := self.node_state(node))
        )

    async def publish_all(
        self, scores: Iterable[tuple[str, ScoreResult, Labelled]], out: Deliveries
    ) -> None:
        """Publish score records, in order, in one pass (the caller counts them in
        ``emitted``): the awaits are the first score of a GPU (its partition) and a
        full batch, not one per record."""
        topic = self.scores.get_topic_name()
        records: list[tuple[int, bytes, bytes, int]] = []
        for uuid, result, window in scores:
            if not model_speed(window.model)[1] and window.model not in self.unknown_models:
                self.unknown_models.add(window.model)
                log.warning("unknown GPU model %r: assuming the default speed", window.model)
            key = uuid.encode()
            partition = await self.partition_for(key, out)
            records.append((partition, key, score_json(uuid, window, result), result.ts_ms))
        await out.publish_all(topic, records)

    async def on_placement(self, message: Message, out: Deliveries) -> None:
        """Re-key a placement event by node, once per node it touches (and tell the
        speed learner which GPUs the placement holds)."""
        try:
            placement = decode(PlacementEvent, message.value)
        except DecodeError as exc:
            await self.reject(message, str(exc), out)
            return
        for node in sorted({a.node for a in placement.nodes}):
            await out.send(self.by_node.get_topic_name(), node.encode(), message.value)
        if self.speeds is not None:
            await self.speeds.progress.on_placement(message, placement, out, now_ms())

    async def on_node_placement(self, message: Message, out: Deliveries) -> None:
        """Apply a re-keyed placement event (validated upstream) to its node's table row."""
        node = (message.key or b"").decode()
        placement = decode(PlacementEvent, message.value)
        current = self.allocations.get(node) or {}
        row = apply_placement(current, node, placement, self.config.history_s)
        await out.write(self.allocations, message.partition, node, row)
        self.metrics.placements.inc()

    async def announce_stale(self, at_ms: int, owned: set[int]) -> None:
        """Publish a stale score for every GPU of the ``owned`` partitions that went
        quiet (once until it returns), and tombstone those that expired (once while in
        their row; never announced stale again). A slot whose uuid another node holds
        now is neither. Rows this worker wrote stay in the memory store after a
        rebalance takes their partition away (it forgets only the rows it recovered):
        those GPUs are another worker's now."""
        self.identity.refresh(at_ms)
        out = Deliveries(self.scores.app.producer)
        expired: set[tuple[str, str]] = set()
        for node in list(self.windows.data.keys()):
            partition = self.partition_of.get(node)  # None: recovered, so owned
            if partition is not None and partition not in owned:
                continue
            state = self.node_state(node)
            if state is None:
                continue
            gone = self.identity.expired(state, at_ms)
            expired.update((node, uuid) for uuid in gone)
            node_allocations = self.allocations.get(node)
            for slot in overdue(state, at_ms, self.config):
                uuid = state.uuids[slot]
                if (
                    uuid in self.announced_stale
                    or uuid in gone
                    or not self.identity.may_speak(node, uuid, at_ms)
                ):
                    continue
                window = state.window(slot)
                since = load_since_ms(allocations_of(node_allocations, uuid), at_ms)
                result = score_window(window, at_ms, since, self.config)
                await self.publish_all([(uuid, result, window)], out)
                self.metrics.emitted.inc()
                self.announced_stale.add(uuid)
                self.metrics.stale_flips.inc()
        await self.forget(sorted(expired), at_ms, out)
        self.identity.tombstoned &= expired  # slots pruned, or back, or no longer owned
        await out.settle()
