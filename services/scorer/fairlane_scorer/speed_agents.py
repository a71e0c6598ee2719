"""What the speed learner's agents and timer do, behind the Faust wiring (issue 27).

Three stages, each in the partitions that hold what it needs:

1. **Placements** (``fairlane.placements.v1``, key = placement id) keep the
   ``placement-gpus`` table of live placements, and
2. **Progress** (``fairlane.job-progress.v1``, key = placement id) records are checked
   against it, held until their placement arrives, and sent to the learner's
   single-partition input topic: :mod:`fairlane_scorer.progress_agents`. Scored GPUs
   reach the same topic from the scoring agent (:meth:`SpeedAgents.on_scores`: node,
   model, SM clock while busy, sample time, when they move).
3. **Learner** (the input topic's one partition): :meth:`SpeedAgents.on_input` keeps
   ``gpu-infos`` (uuid -> :class:`GpuInfo`) and ``speed-rows`` ("<uuid>/<class>" ->
   :class:`SpeedRow`), both changelogged, so the learned speeds survive kill -9 (and,
   learning across jobs, ``speed-class-references``: class -> :class:`ClassReference`,
   changelogged likewise); each
   batch's moved speeds go to the compacted ``fairlane.gpu-speeds.v1``
   (:class:`SpeedBook`), and :meth:`SpeedAgents.heartbeat` re-publishes the quiet ones.

The learner is one partition because a report teaches its ranks' GPUs from each other
and a speed is read against every GPU of its model: no key splits that state. Reports
are few (one per job per window), so one worker keeps up with a large fleet.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, cast

import faust
from faust.types import Message

from fairlane_events.codec import encode
from fairlane_events.fast_samples import AnyNodeSample
from fairlane_events.records import GpuSpeed
from fairlane_scorer.core.progress import MAX_AHEAD_MS, JoinedProgress
from fairlane_scorer.core.records import GpuLabels
from fairlane_scorer.core.speed_book import PublishConfig, SpeedBook
from fairlane_scorer.core.speed_input import (
    GpuInfo,
    busy_clocks,
    decode_input,
    encode_gpu_info,
    info_moved,
)
from fairlane_scorer.core.speeds import (
    SpeedRow,
    clock_priors,
    decode_reference,
    decode_row,
    encode_reference,
    encode_row,
    gone,
    learn,
    named,
    speed_key,
    split_key,
)
from fairlane_scorer.delivery import Deliveries
from fairlane_scorer.errors import SpeedInputFormatError
from fairlane_scorer.metrics import ScorerMetrics
from fairlane_scorer.progress_agents import LEARNER_PARTITION, ProgressAgents
from fairlane_scorer.rejects import dead_letter
from fairlane_scoring.class_reference import ClassReference
from fairlane_scoring.learned_speed import LearnerConfig
from fairlane_scoring.reference import ScoreResult

__all__ = ["SpeedAgents"]

log = logging.getLogger("fairlane.scorer")

Table = faust.Table[str, Any]


class _Rows(Mapping[str, SpeedRow]):
    """The ``speed-rows`` table as decoded rows: a row recovery left as bytes is
    decoded once, on first use, and kept decoded."""

    def __init__(self, table: Table) -> None:
        self._data = table.data

    def __getitem__(self, key: str) -> SpeedRow:
        stored = self._data[key]
        if isinstance(stored, bytes):
            stored = self._data[key] = decode_row(stored)
        return cast(SpeedRow, stored)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._data.keys()))

    def __len__(self) -> int:
        return len(self._data)


def _event_ms(item: GpuInfo | JoinedProgress) -> int:
    """The time an input item tells of: a report's window end, a GPU's sample."""
    if isinstance(item, GpuInfo):
        return item.seen_ms or 0
    return item.ts_ms


@dataclass
class SpeedAgents:
    learner: LearnerConfig
    publish: PublishConfig
    clock_epsilon: float
    metrics: ScorerMetrics
    speed_input: faust.TopicT  # the learner's input, one partition
    speeds: faust.TopicT  # fairlane.gpu-speeds.v1
    dead_letters: faust.TopicT
    progress: ProgressAgents  # stages 1 and 2: progress checked against its placement
    gpu_infos: Table  # uuid -> GpuInfo (encode_gpu_info bytes as recovered)
    rows: Table  # "<uuid>/<class>" -> SpeedRow (encode_row bytes as recovered)
    references: Table  # "<class>" -> ClassReference (encode_reference bytes as recovered)
    book: SpeedBook = field(init=False)
    # uuid -> (what was sent to the learner, when): lost on restart, so sent again once
    forwarded: dict[str, tuple[GpuInfo, int]] = field(default_factory=dict)
    # uuid -> its SM clock in its last busy sample: lost on restart (the learner keeps
    # the last one it was sent until a new one comes)
    busy_clocks: dict[str, float] = field(default_factory=dict)
    _priors: dict[str, float] | None = None  # None: to be computed from gpu_infos again
    _generation: int | None = None
    _classes: set[str] | None = None  # the job classes learned (None: to read from rows)
    _event_ms: int | None = None  # the newest time the learner's input told of
    _next_sweep_ms: int = 0  # when (event time) to look for GPUs gone from the fleet

    def __post_init__(self) -> None:
        self.book = SpeedBook(self.learner, self.publish)

    # -- stage 2: scored GPUs, to the learner ---------------------------------------------

    async def on_scores(
        self,
        emitted: Iterable[tuple[str, ScoreResult, GpuLabels]],
        samples: Iterable[AnyNodeSample],
        out: Deliveries,
        at_ms: int,
    ) -> None:
        """Tell the learner what the published scores and the samples behind them say of
        their GPUs (node, model, SM clock while busy), when it moved (or at least every
        heartbeat: what was sent may have been lost with a batch)."""
        self.busy_clocks.update(busy_clocks(samples))
        period_ms = self.publish.heartbeat_s * 1000
        topic = self.speed_input.get_topic_name()
        for uuid, result, labels in emitted:
            clock = self.busy_clocks.get(uuid)
            info = GpuInfo(uuid, labels.node, labels.model, clock, result.ts_ms)
            sent = self.forwarded.get(uuid)
            fresh = sent is not None and at_ms - sent[1] < period_ms
            if fresh and not info_moved(sent[0] if sent else None, info, self.clock_epsilon):
                continue
            self.forwarded[uuid] = (info, at_ms)
            await out.send(topic, uuid.encode(), encode_gpu_info(info), partition=LEARNER_PARTITION)

    # -- stage 3: the learner --------------------------------------------------------------

    def _gpu_info(self, uuid: str) -> GpuInfo | None:
        stored = self.gpu_infos.data.get(uuid)
        if isinstance(stored, bytes):
            decoded = decode_input(stored)
            stored = self.gpu_infos.data[uuid] = decoded if isinstance(decoded, GpuInfo) else None
        return cast(GpuInfo | None, stored)

    def _reference(self, job_class: str) -> ClassReference | None:
        """The class's reference, when the learner learns across jobs (None: it does not,
        or no report of the class yet)."""
        if self.learner.cross_job is None:
            return None
        stored = self.references.data.get(job_class)
        if isinstance(stored, bytes):
            stored = self.references.data[job_class] = decode_reference(stored)
        return cast(ClassReference | None, stored)

    def _current_priors(self) -> dict[str, float]:
        if self._priors is None:
            infos = {u: info for u in list(self.gpu_infos.data) if (info := self._gpu_info(u))}
            self._priors = clock_priors(infos, self.learner)
        return self._priors

    def _job_classes(self) -> set[str]:
        if self._classes is None:
            self._classes = {split_key(key)[1] for key in list(self.rows.data)}
        return self._classes

    def _follow_generation(self) -> None:
        """After a rebalance the table may hold other rows: rebuild the book from it."""
        generation = self.speeds.app.consumer_generation_id
        if generation != self._generation:
            self._generation = generation
            self.book.reset()
            self._priors = self._classes = None

    async def on_input(self, messages: list[Message], out: Deliveries, at_ms: int) -> None:
        """Learn from a batch of the learner's input: the GPU news first (the priors are
        computed once a batch), then the reports in order; publish the moved speeds."""
        self._follow_generation()
        items, news = [], []
        for message in messages:
            try:
                item = decode_input(message.value)
            except SpeedInputFormatError as exc:
                await dead_letter(out, self.dead_letters, message, str(exc))
                self.metrics.dead_lettered.inc()
                continue
            # A clock far ahead (a node's, a job's) must not make the fleet look gone.
            told_ms = min(_event_ms(item), at_ms + MAX_AHEAD_MS)
            self._event_ms = max(self._event_ms or 0, told_ms)
            self.metrics.learner_time_ms.set(self._event_ms)
            if isinstance(item, GpuInfo):
                stored = self._gpu_info(item.uuid)
                if item.busy_clock_mhz is None and stored is not None:
                    item = replace(item, busy_clock_mhz=stored.busy_clock_mhz)
                encoded = encode_gpu_info(item)
                await out.write(self.gpu_infos, message.partition, item.uuid, item, encoded)
                self.metrics.speed_gpu_infos.inc()
                self._priors = None
                if stored is None or stored.model != item.model:
                    news.append(item)
            else:
                items.append((message, item))
        rows, priors = _Rows(self.rows), self._current_priors()
        touched = set()
        for gpu in news:
            for key, row in named(rows, gpu, self._job_classes()).items():
                await out.write(self.rows, LEARNER_PARTITION, key, row, encode_row(row))
                touched.add(key)
        for message, joined in items:
            touched |= await self._learn(message, joined, rows, priors, out)
        if not self.book.primed:
            self.book.prime(rows, priors, at_ms)
        await self._publish(self.book.changed(rows, touched, priors, at_ms), out)
        await self._forget_gone(rows, out, at_ms)

    async def _learn(
        self,
        message: Message,
        joined: JoinedProgress,
        rows: _Rows,
        priors: Mapping[str, float],
        out: Deliveries,
    ) -> set[str]:
        """Learn one report; write the rows it changed (and its class's reference) and
        return their keys."""
        infos = {r.uuid: info for r in joined.ranks if (info := self._gpu_info(r.uuid))}
        keys = [speed_key(r.uuid, joined.job_class) for r in joined.ranks]
        known = {key: rows[key] for key in keys if key in self.rows.data}
        reference = self._reference(joined.job_class)
        result = learn(known, joined, infos, priors, self.learner, reference=reference)
        if result.reference is not None:  # None unless learning across jobs
            encoded = encode_reference(result.reference)
            await out.write(
                self.references, message.partition, joined.job_class, result.reference, encoded
            )
        self.metrics.progress_learned.inc()
        if result.replayed:
            self.metrics.progress_replayed.inc()
        for key, row in result.rows.items():
            await out.write(self.rows, message.partition, key, row, encode_row(row))
        self._job_classes().add(joined.job_class)
        return set(result.rows)

    async def _forget_gone(self, rows: _Rows, out: Deliveries, at_ms: int) -> None:
        """Drop the rows of GPUs gone from the fleet (:func:`gone`, in the input's event
        time) and tombstone their keys on the compacted speeds topic; at most every tenth
        of the retention."""
        if self._event_ms is None or self._event_ms < self._next_sweep_ms:
            return
        retention_ms = int(self.publish.retention_s * 1000)
        self._next_sweep_ms = self._event_ms + retention_ms // 10
        infos = {u: info for u in list(self.gpu_infos.data) if (info := self._gpu_info(u))}
        keys, uuids = gone(rows, infos, self._event_ms, retention_ms)
        topic = self.speeds.get_topic_name()
        for key in keys:
            await out.delete(self.rows, LEARNER_PARTITION, key)
            await out.send(topic, key.encode(), None)
        for uuid in uuids:
            await out.delete(self.gpu_infos, LEARNER_PARTITION, uuid)
            self.forwarded.pop(uuid, None)
            self._priors = None
        self.metrics.speeds_forgotten.inc(len(keys))
        await self._publish(self.book.forget(rows, keys, self._current_priors(), at_ms), out)

    async def heartbeat(self, at_ms: int, owned: bool) -> None:
        """Publish every learned speed not published for the heartbeat (all of them once
        after a start or a rebalance), if this worker owns the learner's partition."""
        if not owned:
            return
        self._follow_generation()
        rows, priors = _Rows(self.rows), self._current_priors()
        if not self.book.primed:
            self.book.prime(rows, priors, at_ms)
        out = Deliveries(self.speeds.app.producer)
        await self._publish(self.book.heartbeat(rows, priors, at_ms), out)
        await out.settle()

    async def _publish(self, records: list[tuple[str, GpuSpeed]], out: Deliveries) -> None:
        topic = self.speeds.get_topic_name()
        for key, record in records:
            await out.send(topic, key.encode(), encode(record), timestamp=record.ts_ms / 1000)
        self.metrics.speeds_published.inc(len(records))
