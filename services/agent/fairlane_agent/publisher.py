"""Publishing node samples to Kafka: idempotent, acks=all, compressed, keyed by node,
with the Kafka record timestamp set to the sample time."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError

from fairlane_events.codec import encode
from fairlane_events.records import NodeSample
from fairlane_events.topics import NODE_SAMPLES
from fairlane_runtime.errors import ServerUnavailableError

__all__ = ["SamplePublisher"]


class SamplePublisher:
    """The :class:`~fairlane_agent.delivery.RecordSender` on a real broker.

    ``request_timeout_s`` bounds how long a record may wait in the producer while the
    broker is away before it is handed back to the agent's backlog (which, unlike the
    producer's buffer, is bounded by age and counts its drops).
    """

    def __init__(self, bootstrap: str, *, request_timeout_s: float = 10.0) -> None:
        self._bootstrap = bootstrap
        self._producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            enable_idempotence=True,
            acks="all",
            compression_type="gzip",
            linger_ms=20,
            request_timeout_ms=int(request_timeout_s * 1000),
        )

    async def start(self) -> None:
        try:
            await self._producer.start()
        except KafkaConnectionError as exc:
            await self._producer.stop()
            raise ServerUnavailableError(f"Kafka is not reachable at {self._bootstrap}") from exc

    async def stop(self) -> None:
        """Flush what is pending and close."""
        await self._producer.stop()

    async def send_batch(self, samples: list[NodeSample]) -> list[BaseException | None]:
        """Send every sample at once; each one's outcome (None = acknowledged), in order."""
        outcomes = await asyncio.gather(*(self._send(s) for s in samples), return_exceptions=True)
        return [o if isinstance(o, BaseException) else None for o in outcomes]

    async def _send(self, sample: NodeSample) -> None:
        delivered = await self._producer.send(
            NODE_SAMPLES, encode(sample), key=sample.node.encode(), timestamp_ms=sample.ts_ms
        )
        await delivered
