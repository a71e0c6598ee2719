"""The partition Kafka's default partitioner gives each of many keys (pure): murmur2 as
the Java client and aiokafka's ``DefaultPartitioner`` compute it, in numpy over all the
keys of one length at once. aiokafka's murmur2 is a Python loop, 10-15 us a key, and the
outbox relay hashes two keys a placement (placed, then released); numpy's ~1 us a key
from 100 keys on has a fixed cost of ~50-150 us a call, so a few keys take the loop."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from aiokafka.partitioner import DefaultPartitioner

__all__ = ["key_partitions", "murmur2_many"]

_SEED, _M = 0x9747B28C, np.uint32(0x5BD1E995)
_DEFAULT = DefaultPartitioner()
_VECTOR_FROM = 12  # keys; below, aiokafka's loop is cheaper


def key_partitions(keys: Sequence[bytes], partitions: Sequence[int]) -> list[int]:
    """Per key, its partition of ``partitions`` (sorted by id), as the default
    partitioner picks it."""
    if len(keys) < _VECTOR_FROM:
        return [_DEFAULT(key, partitions, partitions) for key in keys]
    index = (murmur2_many(keys) & 0x7FFFFFFF) % len(partitions)
    return [partitions[i] for i in index.tolist()]


def murmur2_many(keys: Sequence[bytes]) -> npt.NDArray[np.uint32]:
    """Kafka's murmur2 of each key."""
    hashes = np.empty(len(keys), dtype=np.uint32)
    by_length: dict[int, list[int]] = {}
    for i, key in enumerate(keys):
        by_length.setdefault(len(key), []).append(i)
    for length, at in by_length.items():
        hashes[at] = _murmur2_of_length([keys[i] for i in at], length)
    return hashes


def _murmur2_of_length(keys: list[bytes], length: int) -> npt.NDArray[np.uint32]:
    data = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(len(keys), length)
    whole = length - length % 4
    words = np.ascontiguousarray(data[:, :whole]).view("<u4")  # little-endian, as Java reads
    h = np.full(len(keys), _SEED ^ length, dtype=np.uint32)
    for column in words.T:
        k = column * _M
        k ^= k >> 24
        k *= _M
        h *= _M
        h ^= k
    tail = data[:, whole:].astype(np.uint32)
    extra = length - whole
    if extra >= 3:
        h ^= tail[:, 2] << 16
    if extra >= 2:
        h ^= tail[:, 1] << 8
    if extra >= 1:
        h ^= tail[:, 0]
        h *= _M
    h ^= h >> 13
    h *= _M
    h ^= h >> 15
    return h
