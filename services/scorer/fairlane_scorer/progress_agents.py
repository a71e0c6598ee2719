"""Stages 1 and 2 of the speed learner (issue 27): progress records checked against
their placements, behind the Faust wiring (:mod:`fairlane_scorer.speed_agents` has the
whole picture and stage 3, the learner).

1. **Placements** (``fairlane.placements.v1``, key = placement id): the scoring agents
   hand every valid placement event to :meth:`ProgressAgents.on_placement`, which keeps
   the ``placement-gpus`` table (placement id -> {GPU uuid: node}) of live placements
   (and of ended ones for a while, :mod:`fairlane_scorer.ended_placements`) and releases
   the progress records held for a placement that arrives.
2. **Progress** (``fairlane.job-progress.v1``, key = placement id, as many partitions:
   the same worker owns a record's placement row): :meth:`ProgressAgents.on_progress`
   decodes it, dead-letters it beyond its placement's rate in event time
   (:mod:`fairlane_scorer.core.rate_limit`: a flood reaches neither the hold nor the
   learner), joins its ranks with the row (a rank on a GPU the placement does not hold
   is dead-lettered and counted by reason) and sends what passes to the learner's
   single-partition input topic; a record whose placement has not arrived is held
   (:mod:`fairlane_scorer.held_progress`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import faust
import orjson
from faust.types import Message

from fairlane_events.records import JobProgress, PlacementEvent
from fairlane_events.topics import JOB_PROGRESS
from fairlane_scorer.core.holding import HeldRecord, Released
from fairlane_scorer.core.progress import (
    RATE_LIMITED,
    UNKNOWN_PLACEMENT,
    ProgressRejection,
    decode_progress,
    join_progress,
    placement_change,
)
from fairlane_scorer.core.rate_limit import RateLimiter
from fairlane_scorer.core.speed_input import encode_progress
from fairlane_scorer.delivery import Deliveries
from fairlane_scorer.ended_placements import EndedPlacements
from fairlane_scorer.held_progress import ProgressHold
from fairlane_scorer.metrics import ScorerMetrics
from fairlane_scorer.rejects import Consumed, dead_letter

__all__ = ["LEARNER_PARTITION", "ProgressAgents"]

#: The learner's input topic has one partition.
LEARNER_PARTITION = 0


@dataclass(frozen=True)
class _HeldOrigin:
    """A held progress record as :func:`dead_letter` sees it: where it was read."""

    partition: int
    offset: int
    key: bytes
    value: bytes
    topic: str = JOB_PROGRESS


def _held_origin(pid: str, record: HeldRecord) -> _HeldOrigin:
    return _HeldOrigin(record.partition, record.offset, pid.encode(), record.value)


@dataclass
class ProgressAgents:
    metrics: ScorerMetrics
    speed_input: faust.TopicT  # the learner's input, one partition
    dead_letters: faust.TopicT
    placement_gpus: faust.Table[str, Any]  # placement id -> {uuid: node} (orjson bytes
    # as recovered)
    hold: ProgressHold  # progress records waiting for their placement
    ended: EndedPlacements  # placements that ended, kept for their last reports
    limiter: RateLimiter  # each placement's records per second of event time

    def __post_init__(self) -> None:
        self.metrics.progress_holding.set_function(self.hold.count)

    # -- stage 1: placements -------------------------------------------------------------

    async def on_placement(
        self, message: Message, event: PlacementEvent, out: Deliveries, at_ms: int
    ) -> None:
        """Keep the placement's row: its GPUs while it lives and for ``keep_s`` of event
        time after it ended; the progress records held for it are learned (or, if it
        ended before its ``created`` event was read, dead-lettered)."""
        change = placement_change(event)
        pid, partition = event.placement_id, message.partition
        if change is not None and change.gpus is None:
            held = await self.hold.take(partition, pid, out)
            if pid in self.placement_gpus.data:
                await self.ended.end(partition, pid, event.ts_ms, out)
            why = ProgressRejection(UNKNOWN_PLACEMENT, f"placement {pid!r} ended before it began")
            for record in held:
                await self._reject(_held_origin(pid, record), why, out)
        elif change is not None and change.gpus is not None:
            self.placement_gpus.data[pid] = change.gpus  # before the hold is read: no await
            held = await self.hold.take(partition, pid, out)
            encoded = orjson.dumps(change.gpus)
            await out.write(self.placement_gpus, partition, pid, change.gpus, encoded)
            for record in held:
                origin = _held_origin(pid, record)
                decoded = decode_progress(origin.key, origin.value)  # valid when held
                if isinstance(decoded, ProgressRejection):
                    await self._reject(origin, decoded, out)
                else:
                    await self._join(origin, decoded, change.gpus, out, at_ms)
        # An event stamped ahead of the scorer's clock moves the hold's clock only to now:
        # one placement event from the future (a skewed replica, a bad producer) must not
        # expire every record held in its partition, and all that come there later.
        clock_ms = min(event.ts_ms, at_ms)
        await self._drop(await self.hold.expire(partition, out, clock_ms), out)
        for gone in await self.ended.expire(partition, clock_ms, out):
            await out.delete(self.placement_gpus, partition, gone)

    def placement(self, pid: str) -> dict[str, str] | None:
        stored = self.placement_gpus.data.get(pid)
        if isinstance(stored, bytes):
            stored = self.placement_gpus.data[pid] = orjson.loads(stored)
        return cast(dict[str, str] | None, stored)

    # -- stage 2: progress, to the learner ------------------------------------------------

    async def on_progress(self, message: Message, out: Deliveries, at_ms: int) -> None:
        """Check one progress record against its placement; the learner gets what passes,
        the hold what comes before its placement."""
        self.metrics.progress_in.inc()
        decoded = decode_progress(message.key, message.value)
        if isinstance(decoded, ProgressRejection):
            await self._reject(message, decoded, out)
            return
        # A record stamped ahead of the scorer's clock counts as now: no buying tokens.
        if not self.limiter.admit(decoded.placement_id, min(decoded.ts_ms, at_ms)):
            await self._reject(message, self._over_rate(decoded.placement_id), out)
            return
        await self._join(message, decoded, self.placement(decoded.placement_id), out, at_ms)
        await self._drop(await self.hold.expire(message.partition, out), out)

    async def _join(
        self,
        origin: Consumed,
        progress: JobProgress,
        gpus: dict[str, str] | None,
        out: Deliveries,
        at_ms: int,
    ) -> None:
        """Send ``progress`` joined with ``gpus`` to the learner, hold it (None: its
        placement has not arrived) or reject it (one of an ended placement at once)."""
        joined = join_progress(progress, gpus, at_ms, self.ended.ended_ms(progress.placement_id))
        if (
            isinstance(joined, ProgressRejection)
            and gpus is None
            and joined.reason == UNKNOWN_PLACEMENT
        ):
            record = HeldRecord(
                origin.partition, origin.offset, progress.ts_ms, origin.value or b""
            )
            dropped = await self.hold.hold(progress.placement_id, record, out)
            self.metrics.progress_held.inc()
            await self._drop(dropped, out)
            return
        if isinstance(joined, ProgressRejection):
            await self._reject(origin, joined, out)
            return
        await out.send(
            self.speed_input.get_topic_name(),
            joined.placement_id.encode(),
            encode_progress(joined),
            partition=LEARNER_PARTITION,
        )
        self.metrics.progress_accepted.inc()

    def _over_rate(self, pid: str) -> ProgressRejection:
        config = self.limiter.config
        return ProgressRejection(
            RATE_LIMITED,
            f"placement {pid!r} is over {config.rate_per_s:g} records per second of event "
            f"time (burst {config.burst})",
        )

    async def _drop(self, released: list[Released], out: Deliveries) -> None:
        for r in released:
            why = ProgressRejection(r.reason, r.error)
            await self._reject(_held_origin(r.placement_id, r.record), why, out)

    async def _reject(self, origin: Consumed, why: ProgressRejection, out: Deliveries) -> None:
        await dead_letter(out, self.dead_letters, origin, f"{why.reason}: {why.error}")
        self.metrics.dead_lettered.inc()
        self.metrics.progress_rejected.labels(why.reason).inc()
