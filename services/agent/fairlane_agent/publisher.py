"""Publishing node samples to Kafka: idempotent, acks=all, compressed, keyed by node,
with the Kafka record timestamp set to the sample time."""

from __future__ import annotations

import asyncio
import contextlib
from typing import ClassVar

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError, KafkaError

from fairlane_events.codec import encode
from fairlane_events.records import NodeSample
from fairlane_events.topics import NODE_SAMPLES
from fairlane_runtime.errors import ServerUnavailableError
from fairlane_runtime.kafka_security import PLAINTEXT, KafkaSecurity

__all__ = ["SamplePublisher"]


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
    ) -> None:
        self._bootstrap = bootstrap
        self._topic = topic
        self._producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            request_timeout_ms=int(request_timeout_s * 1000),
            **self.PRODUCER_CONFIG,
            **security.aiokafka_kwargs(),
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
            try:
                pending.append(
                    await self._producer.send(
                        self._topic,
                        encode(sample),
                        key=sample.node.encode(),
                        timestamp_ms=sample.ts_ms,
                    )
                )
            except KafkaError as exc:
                outcomes = [exc] * (len(samples) - len(pending))
                break
        acks = await asyncio.gather(*pending, return_exceptions=True)
        return [a if isinstance(a, BaseException) else None for a in acks] + outcomes
