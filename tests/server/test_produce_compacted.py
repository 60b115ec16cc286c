"""A compacted topic (cleanup.policy contains compact) refuses a batch holding a record
without a key, as Kafka's LogValidator does: INVALID_RECORD (87) for the whole batch, with
Kafka's sentence; the check rides on the produce path's walk over the records, for
uncompressed and compressed batches, inline and on the verification pool."""

import pytest
from confluent_kafka import KafkaError, Producer
from kafka import KafkaProducer
from kafka.errors import InvalidRecordError as KafkaPythonInvalidRecord

from tests.server.test_confluent_kafka import consume, create


def produce_reports(broker, topic, records, **conf):
    """Send (key, value) records in one batch (a long linger keeps them together); the
    delivery error of each (None: stored)."""
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 500,
                  "message.send.max.retries": 0, **conf})
    # The partition's leader known first: records queued before librdkafka knows it are at
    # times sent one batch each (seen on a loaded machine, about 1 in 300: three
    # one-record batches with one timestamp), and these tests need them in one batch.
    p.list_topics(topic, timeout=10)
    reports = []
    for key, value in records:
        p.produce(topic, value=value, key=key, partition=0,
                  on_delivery=lambda err, msg: reports.append(err))
    assert p.flush(30) == 0
    return reports


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_compacted_topic_refuses_a_batch_with_a_null_key(broker, codec):
    topic = f"compacted-nokey-{codec}"
    create(broker, topic, config={"cleanup.policy": "compact"})
    # Values that compress (librdkafka sends a batch that does not shrink uncompressed).
    value = b"x" * 1000
    bad = produce_reports(broker, topic, [(b"a", value), (None, value), (b"c", value)],
                          **{"compression.codec": codec})
    assert len(bad) == 3
    assert {e.code() if e else None for e in bad} == {KafkaError.INVALID_RECORD}
    good = produce_reports(broker, topic, [(b"a", value), (b"b", value)],
                           **{"compression.codec": codec})
    assert good == [None, None]
    # Only the keyed batch reached the log, at offset 0.
    assert [(o, k) for o, k, _ in consume(broker, topic, 0, 0, 2)] == [(0, b"a"), (1, b"b")]


def test_compact_delete_topic_refuses_too_and_plain_topic_accepts(broker):
    create(broker, "compact-delete-nokey", config={"cleanup.policy": "compact,delete"})
    create(broker, "plain-nokey")
    bad = produce_reports(broker, "compact-delete-nokey", [(None, b"x")])
    assert [e.code() for e in bad] == [KafkaError.INVALID_RECORD]
    assert produce_reports(broker, "plain-nokey", [(None, b"x")]) == [None]


def test_large_gzip_batch_checked_off_the_loop_is_refused_too(broker):
    # ~600 KiB of zeros inflate past the inline gzip bound: checked on the pool.
    topic = "compacted-nokey-large"
    create(broker, topic, config={"cleanup.policy": "compact"})
    records = [(b"k%d" % i, bytes(100_000)) for i in range(6)] + [(None, bytes(100_000))]
    bad = produce_reports(broker, topic, records, **{"compression.codec": "gzip"})
    assert {e.code() if e else None for e in bad} == {KafkaError.INVALID_RECORD}
    assert produce_reports(broker, topic, records[:6], **{"compression.codec": "gzip"}) == [
        None] * 6


def test_kafka_python_sees_kafkas_sentence(broker):
    topic = "compacted-nokey-kp"
    create(broker, topic, config={"cleanup.policy": "compact"})
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, retries=0)
    try:
        fut = p.send(topic, value=b"v", partition=0)
        with pytest.raises(KafkaPythonInvalidRecord):
            fut.get(timeout=15)
    finally:
        p.close(5)
