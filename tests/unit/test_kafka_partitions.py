"""The outbox relay's partitions are the producer's own: the vectorised murmur2 (reads
of 12 keys and more; fewer take aiokafka's own) gives every key the partition aiokafka's
DefaultPartitioner gives it, so a placement's events stay on one partition, in order,
across a change of relay replica or release."""

from __future__ import annotations

import uuid

from aiokafka.partitioner import DefaultPartitioner, murmur2
from hypothesis import given
from hypothesis import strategies as st

from fairlane_scheduler.adapters.kafka_partitions import key_partitions, murmur2_many


@given(st.lists(st.binary(max_size=41), max_size=30))
def test_murmur2_of_keys_of_any_length(keys: list[bytes]) -> None:
    assert murmur2_many(keys).tolist() == [murmur2(key) for key in keys]


@given(st.lists(st.binary(max_size=41), max_size=40), st.integers(1, 12))
def test_the_default_partitioners_choice(keys: list[bytes], count: int) -> None:
    partitions = list(range(100, 100 + count))
    expected = [DefaultPartitioner()(key, partitions, partitions) for key in keys]
    assert key_partitions(keys, partitions) == expected


def test_placement_ids() -> None:
    keys = [str(uuid.uuid4()).encode() for _ in range(2_000)]
    partitions = [0, 1, 2]
    expected = [DefaultPartitioner()(key, partitions, partitions) for key in keys]
    assert key_partitions(keys, partitions) == expected
