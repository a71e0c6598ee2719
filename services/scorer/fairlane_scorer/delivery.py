"""Acknowledge a record only after Kafka has what processing it produced.

Faust commits the offsets of acked events and, before it commits, flushes its producer
buffer; but that flush does not wait for a message already taken off the buffer and
still on its way into aiokafka, and it gives up after 0.1 s without progress. A kill -9
could then leave a committed offset ahead of the table's changelog, and the restarted
worker would never see the lost samples again. So the agents read batches without
automatic acks (``Stream.noack_take``), write table rows and records through
:class:`Deliveries`, wait until every one of them is acknowledged by the broker, and only
then ack the batch's events: a committed offset always has its state in the changelog.
A record processed twice after a crash is harmless (samples not newer than a GPU's last
one are ignored, placement events are idempotent).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import faust
from faust.types import TableT

__all__ = ["Deliveries", "Handler", "process_in_batches"]


class Deliveries:
    """What a batch of events produced, and the futures of its delivery."""

    def __init__(self) -> None:
        self._futures: list[Awaitable[Any]] = []

    def write(self, table: TableT[Any, Any], partition: int, key: Any, value: Any) -> None:
        """``table[key] = value`` from an event of ``partition`` (which does the same
        two steps but drops the changelog message's future). Reassign, never mutate a
        value in place: only what is written reaches the changelog."""
        self._futures.append(table.send_changelog(partition, key, value))
        table.data[key] = value

    async def send(self, topic: faust.TopicT, **message: Any) -> None:
        self._futures.append(await topic.send(**message))

    async def settle(self) -> None:
        """Wait until the broker has acknowledged everything written so far."""
        futures, self._futures = self._futures, []
        await asyncio.gather(*futures)


Handler = Callable[[faust.EventT[Any], Deliveries], Awaitable[None]]


async def process_in_batches(
    stream: faust.StreamT[Any], handle: Handler, *, max_records: int, within_s: float
) -> None:
    """Run ``handle`` on each event in order, batch by batch; ack a batch's events once
    what they produced is delivered."""
    if not isinstance(stream, faust.Stream):  # the interface lacks noack_take
        raise TypeError(f"need a faust.Stream, got {type(stream).__name__}")
    async for events in stream.noack_take(max_records, within=within_s):
        deliveries = Deliveries()
        for event in events:
            await handle(event, deliveries)
        await deliveries.settle()
        for event in events:
            await stream.ack(event)
