"""kafka-python 3.x against a real fastlog-server: admin (create/describe/alter/delete
topics, delete records), idempotent produce with every codec, assign-and-consume from the
beginning and from an offset, beginning/end offsets and offsets_for_times."""

import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
from kafka.codec import has_snappy
from kafka.errors import InvalidTopicError, TopicAlreadyExistsError

CODECS = [None, "gzip", "lz4", "zstd",
          pytest.param("snappy", marks=pytest.mark.skipif(
              not has_snappy(), reason="kafka-python finds no snappy library"))]


@pytest.fixture(scope="module")
def admin(broker):
    a = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    yield a
    a.close()


def produce(broker, topic, values, partition=0, **conf):
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5, **conf)
    try:
        futs = [p.send(topic, value=v, key=b"k", partition=partition) for v in values]
        p.flush(30)
        return [f.get(10).offset for f in futs]
    finally:
        p.close(5)


def consume(broker, topic, partition, count, offset=None, timeout=20.0):
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None,
                      enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        tp = TopicPartition(topic, partition)
        c.assign([tp])
        if offset is None:
            c.seek_to_beginning(tp)
        else:
            c.seek(tp, offset)
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=500).values():
                out.extend((r.offset, r.value) for r in recs)
        return out
    finally:
        c.close()


@pytest.mark.parametrize("codec", CODECS)
def test_idempotent_produce_and_consume_every_codec(broker, admin, codec):
    topic = f"kp-codec-{codec or 'none'}"
    admin.create_topics([NewTopic(topic, 1, 1)])
    values = [b"kp-%d-" % i + b"y" * (i % 40) for i in range(150)]
    offsets = produce(broker, topic, values, compression_type=codec, enable_idempotence=True)
    assert offsets == list(range(150))
    got = consume(broker, topic, 0, 150)
    assert [v for _, v in got] == values


def test_consume_from_an_offset(broker, admin):
    topic = "kp-from-offset"
    admin.create_topics([NewTopic(topic, 1, 1)])
    produce(broker, topic, [b"m%d" % i for i in range(30)])
    got = consume(broker, topic, 0, 10, offset=20)
    assert [o for o, _ in got] == list(range(20, 30))


def test_offsets_earliest_latest_by_time(broker, admin):
    topic = "kp-offsets"
    admin.create_topics([NewTopic(topic, 1, 1)])
    produce(broker, topic, [b"a", b"b"])
    time.sleep(0.05)
    t_mid = int(time.time() * 1000)
    time.sleep(0.05)
    produce(broker, topic, [b"c"])
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None)
    try:
        tp = TopicPartition(topic, 0)
        assert c.beginning_offsets([tp]) == {tp: 0}
        assert c.end_offsets([tp]) == {tp: 3}
        found = c.offsets_for_times({tp: t_mid})
        assert found[tp].offset == 2
        assert c.offsets_for_times({tp: int(time.time() * 1000) + 60_000})[tp] is None
    finally:
        c.close()


def test_admin_topic_lifecycle(broker, admin):
    topic = "kp-admin"
    admin.create_topics([NewTopic(topic, 2, 1, topic_configs={"cleanup.policy": "delete"})])
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics([NewTopic(topic, 2, 1)])
    with pytest.raises(InvalidTopicError):
        admin.create_topics([NewTopic("no/slashes", 1, 1)])
    desc = admin.describe_topics([topic])
    assert len(desc[0]["partitions"]) == 2
    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                        configs={"retention.ms": "60000"})])
    res = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)],
                                 config_filter="all")
    entries = res["topic"][topic]
    assert entries["retention.ms"]["value"] == "60000"
    assert entries["segment.bytes"]["value"] == "1073741824"
    admin.delete_topics([topic])
    assert topic not in admin.list_topics()


def test_delete_records(broker, admin):
    topic = "kp-delete-records"
    admin.create_topics([NewTopic(topic, 1, 1)])
    produce(broker, topic, [b"%d" % i for i in range(8)])
    tp = TopicPartition(topic, 0)
    admin.delete_records({tp: 5})
    got = consume(broker, topic, 0, 3)
    assert [o for o, _ in got] == [5, 6, 7]
