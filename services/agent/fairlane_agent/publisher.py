"""Publishing node samples to Kafka: idempotent, acks=all, compressed, keyed by node,
with the Kafka record timestamp set to the sample time."""

from __future__ import annotations

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError

from fairlane_events.codec import encode
from fairlane_events.records import NodeSample
from fairlane_events.topics import NODE_SAMPLES
from fairlane_runtime.errors import ServerUnavailableError

__all__ = ["SamplePublisher"]


class SamplePublisher:
    def __init__(self, bootstrap: str) -> None:
        self._bootstrap = bootstrap
        self._producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            enable_idempotence=True,
            acks="all",
            compression_type="gzip",
            linger_ms=20,
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

    async def publish(self, samples: list[NodeSample]) -> None:
        """Send one round; returns when every record is acknowledged."""
        futures = [
            await self._producer.send(
                NODE_SAMPLES, encode(s), key=s.node.encode(), timestamp_ms=s.ts_ms
            )
            for s in samples
        ]
        for future in futures:
            await future
