"""The worker's Kafka transport: Faust's aiokafka one, with a consumer that commits an
offset only when every offset before it on its partition was processed by the scorer.

Faust's own bookkeeping lets a commit pass records nobody processed, in four ways
(``faust/transport/consumer.py`` and ``faust/streams.py``, faust-streaming 0.15.3;
docs/scoring.md, "Rebalances and commits"):

1. *Skipped records count as acked.* ``Stream._py_aiter`` skips a record read while
   flow control is suspended or from an older generation (every rebalance) and, in its
   ``finally``, acks it (``do_ack or value is skipped_value``).
2. *The head may be missing.* ``Consumer._new_offset`` refuses a commit only when
   ``min(acked) - committed_offset > 1``, so the one record at the committed position
   (the next one to read) may be unprocessed, and with no commit yet (or at 0) there is
   no check at all.
3. *Gap filling.* ``_drain_messages`` calls ``_add_gap`` on every jump in the offsets
   read, and ``perform_seek`` makes such jumps out of records still queued.
4. *No seek without a commit.* aiokafka's ``seek_to_committed`` seeks only partitions
   with a committed offset above 0, so after a rebalance a partition never committed
   goes on from wherever its fetcher was, past the records the rebalance cleared from
   the agents' queues.

So this consumer ignores Faust's acks altogether: the scorer's batches call
:meth:`ScorerConsumer.processed` once what a record produced is delivered, the commit is
the end of the contiguous run of processed offsets from the committed position
(:class:`~fairlane_scorer.core.offsets.OffsetLedger`), and a partition without a commit
is sought to its earliest offset, where a restart would begin. A record stays in Faust's
``unacked`` set until processed, so a rebalance (``Consumer.wait_empty``) waits for
every delivery in flight before the recovery reads the changelogs' high watermarks.

Its fetch loop hands the records of an agent's topics to that agent's
:class:`~fairlane_scorer.intake.Intake`, a fetch at a time, instead of Faust's
per-record path (two tasks per record in ``_drain_messages``, then the conductor, the
stream and its event); records of other topics (the changelogs during recovery) take
Faust's path as before.

And no record is processed while a rebalance is under way (:meth:`ScorerConsumer.owned`):
Faust resumes the flow to read the changelogs, and records fetched before the
rebalance reach the agents meanwhile (seen: records of the old generation processed
during the takeover's recovery), while the recovery is still writing the changelog's
rows into the table, over what such a record's batch wrote or before the row it needed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, cast

import faust
from faust.transport.consumer import CONSUMER_FETCHING
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP, Message
from faust.types.transports import TPorTopicSet
from mode import ServiceT
from mode.utils.futures import notify

from fairlane_scorer.core.offsets import OffsetLedger
from fairlane_scorer.intake import Intake

__all__ = ["ScorerConsumer", "install_transport"]

log = logging.getLogger("fairlane.scorer")


class ScorerConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    """Faust's consumer thread, whose aiokafka consumer waits at most
    ``fetch_max_wait_ms`` for records of a fetch instead of Faust's fixed 1,500 ms.

    aiokafka has one fetch in flight per broker, and leaves out of it the partitions
    whose records are still buffered (``Fetcher._get_actions_per_node``). While the
    worker scores a batch the input's partitions stay buffered, so the next fetch asks
    only for partitions that get no records (the placements, the internal topic, the
    changelogs): the broker holds it for the whole wait, and no new input is read until
    it returns. Seen: the intake empty for 0.5-1.5 s before every few batches, then
    1,000+ records at once (docs/scoring.md, "Talking to the broker")."""

    fetch_max_wait_ms: int = 1500
    fetch_min_bytes: int = 1

    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        consumer._fetch_max_wait_ms = self.fetch_max_wait_ms  # both read by its start()
        consumer._fetch_min_bytes = self.fetch_min_bytes
        return consumer


class ScorerConsumer(faust_aiokafka.Consumer):
    ledger: OffsetLedger[TP]
    seeks: int  # how many times the partitions were sought to their committed positions

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ledger = OffsetLedger()
        self.seeks = 0
        self._intakes: dict[str, Intake] = {}

    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        thread = ScorerConsumerThread(self, loop=self.loop, beacon=self.beacon)
        transport = cast(ScorerTransport, self.transport)
        thread.fetch_max_wait_ms = transport.fetch_max_wait_ms
        thread.fetch_min_bytes = transport.fetch_min_bytes
        return thread

    def hand_over(self, topics: Iterable[str], intake: Intake | None) -> None:
        """Hand the records of ``topics`` to ``intake`` from the next fetch on (None:
        through Faust's streams again)."""
        for topic in topics:
            if intake is None:
                self._intakes.pop(topic, None)
            else:
                self._intakes[topic] = intake

    async def _drain_messages(self, fetcher: ServiceT) -> None:
        """Faust's fetch loop (``Consumer._drain_messages``), a fetch at a time: what
        the fetcher read goes to :meth:`_hand_out`."""
        try:
            while not (self.should_stop or fetcher.should_stop):
                self.diag.set_flag(CONSUMER_FETCHING)
                records, active = await self._wait_next_records(1.0)
                await self.sleep(0)  # a fetch may come back at once, again and again
                if records and not self.should_stop:
                    await self._hand_out(records, active)
                self.diag.unset_flag(CONSUMER_FETCHING)
        except self.consumer_stopped_errors:
            if not self.transport.app.should_stop:
                raise
        except asyncio.CancelledError:
            if not self.transport.app.should_stop:
                raise
        finally:
            self.diag.unset_flag(CONSUMER_FETCHING)

    async def _hand_out(self, records: Mapping[TP, Sequence[Any]], active: set[TP] | None) -> None:
        """Records of a topic with an intake go there in one call per partition; the
        others to Faust's conductor one by one, as Faust's loop does. As there, a
        record before the partition's read offset (a fetch from before a seek) is
        dropped, and a fetch stops when the flow stops or the generation changes (the
        seek to the commits after the rebalance reads the rest again). Faust's monitor
        is not told each partition's end offset (its web statistics only; the lag is
        the scorer's own metric)."""
        if not self.flow_active:  # stopped while fetching: as Faust's getmany does
            try:
                await self.perform_seek()
            except Exception as exc:  # noqa: BLE001 - Faust's loop goes on too
                log.warning("seek to the commits while the flow is stopped failed: %r", exc)
            return
        generation = self.app.consumer_generation_id
        read_offset = self._read_offset
        for tp, fetched in records.items():
            if not self.flow_active or self.app.consumer_generation_id != generation:
                return
            if active is not None and tp not in active and tp not in self._buffered_partitions:
                continue
            intake = self._intakes.get(tp.topic)
            if intake is not None and not intake.has_room():
                await self.wait_first(intake.wait_room(), self.suspend_flow.wait())
                if not intake.has_room() or not self.flow_active:
                    return  # the flow stopped: read again after the rebalance
            start = read_offset[tp]
            messages = [
                self._to_message(tp, record)
                for record in fetched
                if start is None or record.offset >= start
            ]
            if not messages:
                continue
            if intake is None:
                for message in messages:
                    if not self.flow_active or self.app.consumer_generation_id != generation:
                        return
                    await self.wait_first(self.callback(message), self.suspend_flow.wait())
                    read_offset[tp] = message.offset
                continue
            unacked = self._unacked_messages
            for message in messages:
                unacked.add(message)
            intake.put(messages)
            read_offset[tp] = messages[-1].offset

    def ack(self, message: Message) -> bool:
        """Faust's acks (of records yielded *or skipped* by a stream) count for nothing."""
        return False

    def processed(self, messages: Iterable[Message]) -> None:
        """These records are processed and everything they produced is delivered."""
        for message in messages:
            message.acked = True
            self._unacked_messages.discard(message)
            self.ledger.done(message.tp, message.offset)
        notify(self._waiting_for_ack)

    def owned(self) -> tuple[int, frozenset[TP]] | None:
        """The generation and the partitions whose records may be processed now; None
        while a rebalance is under way (from the revocation until the recovery that ends
        it has rebuilt the tables and sought the partitions to their commits)."""
        if self.app.rebalancing:
            return None
        return self.app.consumer_generation_id, frozenset(self.assignment())

    def released(self, messages: Iterable[Message]) -> None:
        """These records will not be processed from here (read again, or read out of
        order and to be read again after a seek): a rebalance need not wait for them."""
        for message in messages:
            self._unacked_messages.discard(message)
        notify(self._waiting_for_ack)

    def _filter_tps_with_pending_acks(self, topics: TPorTopicSet | None = None) -> Iterator[TP]:
        for tp in list(self.ledger.committable()):
            if topics is None or tp in topics or tp.topic in topics:
                yield tp

    def _new_offset(self, tp: TP) -> int | None:
        return self.ledger.advance(tp)

    async def _add_gap(self, tp: TP, offset_from: int, offset_to: int) -> None:
        """Record nothing: a jump in the offsets read is a rewind, not a hole (the
        scorer's input topics have no transaction markers)."""

    async def _seek(self, partition: TP, offset: int) -> None:
        """Seek in the consumer's own thread, where aiokafka's fetcher runs. Faust's
        ``_seek`` calls aiokafka from this thread, which is safe only while the flow is
        stopped; the scorer also seeks back to a hole while records flow, and a fetch
        under way then failed in the fetcher (``KeyError`` on the partition), crashing
        the worker."""
        thread = self._thread
        await thread.call_thread(thread._ensure_consumer().seek, partition, offset)

    async def seek_to_committed(self) -> Mapping[TP, int]:
        """Seek every assigned partition to its committed position (its earliest offset
        where there is no commit yet) and make that its floor in the ledger."""
        found = await super().seek_to_committed()
        committed = {
            TP(tp.topic, tp.partition): offset
            for tp, offset in found.items()
            if self.app.topics.acks_enabled_for(tp.topic)  # not the changelogs
        }
        fresh = [tp for tp, offset in committed.items() if not offset]  # None, or 0
        if fresh:
            earliest = await self.earliest_offsets(*fresh)
            for tp in fresh:
                committed[tp] = earliest[tp]
                await self._seek(tp, committed[tp])
        self.ledger.retain(committed)
        for tp, offset in committed.items():
            self.ledger.reset(tp, offset)
        self.seeks += 1
        log.info(
            "resuming from the commits: %s",
            ", ".join(f"{tp.topic}[{tp.partition}]@{o}" for tp, o in sorted(committed.items())),
        )
        return {**found, **committed}


class ScorerTransport(faust_aiokafka.Transport):
    Consumer = ScorerConsumer
    fetch_max_wait_ms: int = 1500
    fetch_min_bytes: int = 1


def install_transport(app: faust.App, fetch_max_wait_ms: int, fetch_min_bytes: int) -> None:
    """Give ``app`` the transport above, its fetches waiting at the broker at most
    ``fetch_max_wait_ms`` for ``fetch_min_bytes``; before its consumer exists."""
    transport = ScorerTransport(app.conf.broker_consumer, app)
    transport.fetch_max_wait_ms = fetch_max_wait_ms
    transport.fetch_min_bytes = fetch_min_bytes
    app.transport = transport
