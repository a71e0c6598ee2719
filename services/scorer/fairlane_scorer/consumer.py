"""The worker's Kafka transport: Faust's aiokafka one, with a consumer that never counts
an offset as processed before the scorer has acknowledged it.

Faust's fetch loop (``faust.transport.consumer.Consumer._drain_messages``) calls
``_add_gap(tp, read + 1, offset)`` whenever a record is more than one offset past the last
one it read, so that holes in a log (transaction markers, compaction) cannot hold the
commit back; ``_new_offset`` then counts every offset of a gap as acknowledged. But the
read offset also jumps back: ``perform_seek`` (run by ``Recovery.on_recovery_completed``
after every rebalance, and by ``getmany`` when the flow is stopped) resets it to the
committed offset while the records after it are already queued for the agent. The next
record fetched past them opens a "gap" made of records in flight, and the commit walks
through it (one offset per commit while the acknowledged ones overlap it, then to its
end) whether they were processed or not. A worker SIGKILLed then, or a rebalance that
clears the agent's queue, could leave a committed offset ahead of the changelog, and the
next owner would never see those records (docs/scoring.md, "Known limits").

The scorer's input topics have no holes (non-transactional producers, delete
retention), so a jump is only ever that rewind: this consumer records no gap, and the
committed offset is the end of the run of offsets the agents acknowledged, each one
only after what it produced was delivered (:mod:`fairlane_scorer.delivery`).
"""

from __future__ import annotations

import faust
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP

__all__ = ["install_transport"]


class AckedOnlyConsumer(faust_aiokafka.Consumer):
    async def _add_gap(self, tp: TP, offset_from: int, offset_to: int) -> None:
        """Record nothing: a jump in the offsets read is a rewind, not a hole."""


class AckedOnlyTransport(faust_aiokafka.Transport):
    Consumer = AckedOnlyConsumer


def install_transport(app: faust.App) -> None:
    """Give ``app`` the transport above; before its consumer exists."""
    app.transport = AckedOnlyTransport(app.conf.broker_consumer, app)
