# fastlog/client/partitioner.py: which partition a produced record goes to.
#
# Keyed records: murmur2 of the key bytes, made positive by masking the sign bit, modulo the
# partition count -- the same choice as the Java client and kafka-python, so a key lands in
# the same partition whichever of these clients wrote it. Records without a key stick to one
# partition until the producer closes a batch for that topic, then move on round-robin
# (Kafka's "sticky" partitioner, which keeps batches full). Called by the producer on its
# event loop thread only.

from __future__ import annotations

import struct

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF
_words = struct.Struct("<I")


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 hash of data, as an unsigned 32-bit int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    tail = length & ~3
    for (k,) in _words.iter_unpack(memoryview(data)[:tail]):
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    extra = length & 3
    if extra == 3:
        h ^= data[tail + 2] << 16
    if extra >= 2:
        h ^= data[tail + 1] << 8
    if extra >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition the Java client's default partitioner picks for a non-null key."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


class StickyPartitioner:
    """Null-key placement: one partition per topic until next_batch() moves it along."""

    def __init__(self) -> None:
        self._current: dict[str, int] = {}
        self._counter = 0

    def partition(self, topic: str, num_partitions: int) -> int:
        p = self._current.get(topic)
        if p is None or p >= num_partitions:
            p = self._counter % num_partitions
            self._counter += 1
            self._current[topic] = p
        return p

    def next_batch(self, topic: str, num_partitions: int) -> None:
        """A batch for topic was closed: the next null-key records go to another partition."""
        if num_partitions > 1:
            self._current[topic] = (self._current.get(topic, 0) + 1) % num_partitions
