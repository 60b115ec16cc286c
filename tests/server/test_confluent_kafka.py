"""confluent-kafka (librdkafka 2.16) against a real fastlog-server: admin, idempotent
produce with every codec, assign-and-consume from the beginning and from offsets, list
offsets, configs, delete records, delete topic."""

import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    OffsetSpec,
)

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def create(broker, name, partitions=1, config=None):
    a = admin(broker)  # keep the handle alive until the future resolves
    fs = a.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})],
        operation_timeout=10)
    fs[name].result(15)


def produce(broker, topic, values, partition=0, **conf):
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5,
                  **{k.replace("_", "."): v for k, v in conf.items()}})
    reports = []

    def on_delivery(err, msg):
        reports.append((err, msg.offset() if err is None else None))

    for i, v in enumerate(values):
        p.produce(topic, value=v, key=b"k%d" % i, partition=partition, on_delivery=on_delivery)
    assert p.flush(30) == 0
    assert [e for e, _ in reports if e is not None] == []
    return [o for _, o in reports]


def consume(broker, topic, partition, offset, count, timeout=20.0):
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "assign-only",
                  "enable.auto.commit": False, "enable.auto.offset.store": False,
                  "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, partition, offset)])
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            out.append((m.offset(), m.key(), m.value()))
        return out
    finally:
        c.close()


@pytest.mark.parametrize("codec", CODECS)
def test_idempotent_produce_and_consume_every_codec(broker, codec):
    topic = f"ck-codec-{codec}"
    create(broker, topic)
    values = [b"value-%d-" % i + b"x" * (i % 50) for i in range(200)]
    offsets = produce(broker, topic, values, compression_type=codec, enable_idempotence=True)
    assert sorted(offsets) == list(range(200))
    got = consume(broker, topic, 0, 0, 200)
    assert [v for _, _, v in got] == values
    assert [o for o, _, _ in got] == list(range(200))


def test_topic_compression_type_recompresses_and_consumers_read_it(broker):
    topic = "ck-topic-zstd"
    create(broker, topic, config={"compression.type": "zstd"})
    values = [b"value-%d-" % i + b"x" * (i % 50) for i in range(200)]
    offsets = produce(broker, topic, values, compression_type="lz4", enable_idempotence=True)
    assert sorted(offsets) == list(range(200))
    got = consume(broker, topic, 0, 0, 200)
    assert [v for _, _, v in got] == values
    assert [k for _, k, _ in got] == [b"k%d" % i for i in range(200)]


def test_consume_from_an_offset(broker):
    topic = "ck-from-offset"
    create(broker, topic)
    produce(broker, topic, [b"m%d" % i for i in range(50)])
    got = consume(broker, topic, 0, 37, 13)
    assert [o for o, _, _ in got] == list(range(37, 50))
    assert got[0][2] == b"m37"


def test_list_offsets_earliest_latest_and_by_time(broker):
    topic = "ck-list-offsets"
    create(broker, topic)
    produce(broker, topic, [b"a", b"b", b"c"])
    time.sleep(0.05)
    t_mid = int(time.time() * 1000)
    time.sleep(0.05)
    produce(broker, topic, [b"d", b"e"])
    tp = TopicPartition(topic, 0)
    a = admin(broker)
    res = a.list_offsets({tp: OffsetSpec.earliest()})[tp].result(10)
    assert res.offset == 0
    res = a.list_offsets({tp: OffsetSpec.latest()})[tp].result(10)
    assert res.offset == 5
    res = a.list_offsets({tp: OffsetSpec.for_timestamp(t_mid)})[tp].result(10)
    assert res.offset == 3
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "x"})
    try:
        assert c.get_watermark_offsets(tp, timeout=10) == (0, 5)
        found = c.offsets_for_times([TopicPartition(topic, 0, t_mid)], timeout=10)
        assert found[0].offset == 3
    finally:
        c.close()


def test_create_describe_alter_delete_topic(broker):
    topic = "ck-admin"
    a = admin(broker)
    create(broker, topic, partitions=3, config={"retention.ms": "3600000"})
    md = a.list_topics(timeout=10)
    assert sorted(md.topics[topic].partitions) == [0, 1, 2]
    # already exists
    with pytest.raises(KafkaException) as e:
        a.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    assert e.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    # invalid name
    with pytest.raises(KafkaException) as e:
        a.create_topics([NewTopic("bad name!", 1, 1)])["bad name!"].result(10)
    assert e.value.args[0].code() == KafkaError.TOPIC_EXCEPTION  # INVALID_TOPIC_EXCEPTION
    res = ConfigResource("topic", topic)
    configs = a.describe_configs([res])[res].result(10)
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == 1  # DYNAMIC_TOPIC_CONFIG
    assert configs["segment.bytes"].value == "1073741824"
    assert configs["cleanup.policy"].value == "delete"
    # incremental alter
    res2 = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("segment.bytes", "1048576", incremental_operation=AlterConfigOpType.SET)])
    a.incremental_alter_configs([res2])[res2].result(10)
    configs = a.describe_configs([res])[res].result(10)
    assert configs["segment.bytes"].value == "1048576"
    assert configs["retention.ms"].value == "3600000"
    # bad value
    res3 = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException):
        a.incremental_alter_configs([res3])[res3].result(10)
    a.delete_topics([topic], operation_timeout=10)[topic].result(10)
    deadline = time.monotonic() + 10
    while topic in a.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.1)
    assert topic not in a.list_topics(timeout=10).topics


def test_broker_configs_are_described(broker):
    res = ConfigResource("broker", "0")
    a = admin(broker)
    configs = a.describe_configs([res])[res].result(10)
    assert configs["num.partitions"].value == "1"
    assert configs["log.dirs"].value.endswith("data")
    assert configs["log.dirs"].source == 4  # STATIC_BROKER_CONFIG


def test_delete_records(broker):
    topic = "ck-delete-records"
    create(broker, topic)
    produce(broker, topic, [b"r%d" % i for i in range(10)])
    a = admin(broker)
    fs = a.delete_records([TopicPartition(topic, 0, 4)])
    res = fs[TopicPartition(topic, 0, 4)].result(10)
    assert res.low_watermark == 4
    got = consume(broker, topic, 0, -2, 6)  # OFFSET_BEGINNING
    assert [o for o, _, _ in got] == list(range(4, 10))


def test_auto_create_on_produce(broker):
    offsets = produce(broker, "ck-auto-created", [b"x"])
    assert offsets == [0]
