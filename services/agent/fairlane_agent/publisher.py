"""Publishing node samples to Kafka: idempotent, acks=all, compressed, keyed by node,
with the Kafka record timestamp set to the sample time and, given a signer, the node's
signature in a header (:mod:`fairlane_events.signing`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import ClassVar

from aiokafka import AIOKafkaProducer
from aiokafka.errors import (
    InvalidProducerIdMapping,
    KafkaConnectionError,
    KafkaError,
    OutOfOrderSequenceNumber,
)

from fairlane_events.codec import encode
from fairlane_events.records import NodeSample
from fairlane_events.signing import SIGNATURE_HEADER, SampleSigner
from fairlane_events.topics import NODE_SAMPLES
from fairlane_runtime.errors import ServerUnavailableError
from fairlane_runtime.kafka_security import PLAINTEXT, KafkaSecurity

__all__ = ["SamplePublisher"]


log = logging.getLogger("fairlane.agent.publisher")

#: What the broker answers an idempotent producer whose sequence it lost track of.
_SEQUENCE_LOST = (OutOfOrderSequenceNumber, InvalidProducerIdMapping)


class SamplePublisher:
    """The :class:`~fairlane_agent.delivery.RecordSender` on a real broker.

    ``request_timeout_s`` bounds how long a record may wait in the producer while the
    broker is away before it is handed back to the agent's backlog (which, unlike the
    producer's buffer, is bounded by age and counts its drops).
    """

    #: The producer settings, shared with the benchmark's raw-producer baseline.
    PRODUCER_CONFIG: ClassVar[dict[str, object]] = {
        "enable_idempotence": True,
        "acks": "all",
        "compression_type": "gzip",
        "linger_ms": 20,
    }

    def __init__(
        self,
        bootstrap: str,
        *,
        security: KafkaSecurity = PLAINTEXT,
        request_timeout_s: float = 10.0,
        topic: str = NODE_SAMPLES,
        signer: SampleSigner | None = None,
    ) -> None:
        self._bootstrap = bootstrap
        self._signer = signer
        self._topic = topic
        self._security = security
        self._request_timeout_s = request_timeout_s
        self._producer = self._new_producer()

    def _new_producer(self) -> AIOKafkaProducer:
        return AIOKafkaProducer(
            bootstrap_servers=self._bootstrap,
            request_timeout_ms=int(self._request_timeout_s * 1000),
            **self.PRODUCER_CONFIG,
            **self._security.aiokafka_kwargs(),
        )

    async def start(self) -> None:
        try:
            await self._producer.start()
        except KafkaConnectionError as exc:
            await self._producer.stop()
            raise ServerUnavailableError(f"Kafka is not reachable at {self._bootstrap}") from exc

    async def stop(self, timeout_s: float = 2.0) -> None:
        """Flush what the producer holds and close, giving up after ``timeout_s``.

        The producer's own stop waits for every request in flight, and while the broker
        is away it retries those forever; the agent's backlog has counted them already.
        """
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._producer.stop(), timeout_s)

    async def send_batch(self, samples: list[NodeSample]) -> list[BaseException | None]:
        """Send every sample; each one's outcome (None = acknowledged), in order.

        Records are appended to the producer one after the other (cheap: it batches), then
        acknowledgements are awaited together. If appending fails (no metadata while the
        broker is away), the rest of the batch is not offered: it fails as "not sent", so
        retrying it later cannot duplicate anything.
        """
        pending: list[asyncio.Future[object]] = []
        outcomes: list[BaseException | None] = []
        for sample in samples:
            key, value = sample.node.encode(), encode(sample)
            headers = None
            if self._signer is not None:
                headers = [(SIGNATURE_HEADER, self._signer.signature(sample.node, key, value))]
            try:
                pending.append(
                    await self._producer.send(
                        self._topic, value, key=key, timestamp_ms=sample.ts_ms, headers=headers
                    )
                )
            except KafkaError as exc:
                outcomes = [exc] * (len(samples) - len(pending))
                break
        acks = await asyncio.gather(*pending, return_exceptions=True)
        results = [a if isinstance(a, BaseException) else None for a in acks] + outcomes
        if any(isinstance(r, _SEQUENCE_LOST) for r in results):
            await self._reset_producer()
        return results

    async def _reset_producer(self) -> None:
        """Start afresh with a new producer id. A request that timed out in flight (a
        broker stuck in its shutdown, say) still used up its sequence numbers; the broker
        never stored it, so it refuses every later record of this producer as out of
        order, forever. The refused records go back to the backlog and are sent again by
        the new producer: nothing is lost, and nothing the broker stored is sent twice."""
        log.warning("Kafka lost this producer's sequence; starting a new producer")
        await self.stop()
        self._producer = self._new_producer()
        with contextlib.suppress(KafkaError):  # still away: the next send says so
            await self._producer.start()
