"""Score records go into one batch per partition, in order, and a full batch goes out
before the next record of its partition (fairlane_scorer.delivery.Deliveries)."""

import asyncio
from typing import Any

from fairlane_scorer.delivery import Deliveries


class Batch:
    """aiokafka's BatchBuilder as Deliveries uses it: takes ``room`` records."""

    def __init__(self, room: int) -> None:
        self.room, self.records, self.closed = room, list[bytes](), False

    def append(self, *, timestamp: int, key: bytes, value: bytes) -> object | None:
        if len(self.records) == self.room:
            return None
        self.records.append(value)
        return object()

    def close(self) -> None:
        self.closed = True


class Kafka:
    def __init__(self, room: int) -> None:
        self.room = room
        self.sent: list[tuple[int, list[bytes]]] = []

    def create_batch(self) -> Batch:
        return Batch(self.room)

    async def send_batch(self, batch: Batch, topic: str, *, partition: int) -> Any:
        assert batch.closed
        self.sent.append((partition, batch.records))
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


class Producer:
    def __init__(self, kafka: Kafka) -> None:
        self.kafka = kafka

    def _ensure_producer(self) -> Kafka:
        return self.kafka


async def test_records_are_batched_per_partition_in_order() -> None:
    kafka = Kafka(room=2)
    out = Deliveries(Producer(kafka))  # type: ignore[arg-type]
    records = [(p, b"k", f"{p}-{i}".encode(), i) for i, p in enumerate([0, 1, 0, 0, 1, 0])]
    await out.publish_all("scores", records)
    assert kafka.sent == [(0, [b"0-0", b"0-2"])]  # full when its third record came
    await out.settle()
    assert sorted(kafka.sent) == [
        (0, [b"0-0", b"0-2"]),
        (0, [b"0-3", b"0-5"]),
        (1, [b"1-1", b"1-4"]),
    ]
