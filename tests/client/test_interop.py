"""Cross-client checks: what fastlog.client writes, confluent-kafka and kafka-python read
back exactly (assign mode), and what they write, fastlog.client reads back exactly."""

import pytest

from fastlog.client import Admin, Consumer, Producer, TopicPartition

N = 300


def _records():
    return [(b"key-%d" % i if i % 3 else None, b"value-%d" % i, [("i", b"%d" % i)])
            for i in range(N)]


async def _produce_ours(bootstrap, topic, compression):
    async with Admin(bootstrap) as admin:
        await admin.create_topic(topic, 1, 1)
    async with Producer(bootstrap, compression=compression, acks="all") as p:
        for key, value, headers in _records():
            await p.send(topic, value, key, headers=headers, partition=0)


async def _consume_ours(bootstrap, topic):
    out = []
    async with Consumer(bootstrap) as c:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        await c.seek_to_beginning()
        for _ in range(100):
            out.extend((await c.getmany(200)).get(tp, []))
            if len(out) >= N:
                break
    return [(r.key, r.value, [(k, bytes(v)) for k, v in r.headers]) for r in out]


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_confluent_kafka_reads_what_we_write(bootstrap, topic_name, arun, compression):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    arun(_produce_ours(bootstrap, topic_name, compression))
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "interop",
                                  "enable.auto.commit": False,
                                  "fetch.wait.max.ms": 100})
    try:
        c.assign([confluent_kafka.TopicPartition(topic_name, 0, 0)])
        got = []
        for _ in range(200):
            for m in c.consume(num_messages=N, timeout=0.2):
                assert m.error() is None, m.error()
                got.append((m.key(), m.value(), [(k, v) for k, v in (m.headers() or [])]))
            if len(got) >= N:
                break
    finally:
        c.close()
    assert got == _records()


@pytest.mark.parametrize("compression", ["none", "gzip", "lz4"])
def test_kafka_python_reads_what_we_write(bootstrap, topic_name, arun, compression):
    kafka = pytest.importorskip("kafka")
    arun(_produce_ours(bootstrap, topic_name, compression))
    c = kafka.KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                            fetch_max_wait_ms=100)
    try:
        tp = kafka.TopicPartition(topic_name, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        got = []
        for _ in range(100):
            for records in c.poll(timeout_ms=200).values():
                got.extend((r.key, r.value, [(k, v) for k, v in r.headers]) for r in records)
            if len(got) >= N:
                break
    finally:
        c.close()
    assert got == _records()


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_we_read_what_confluent_kafka_writes(bootstrap, topic_name, arun, compression):
    confluent_kafka = pytest.importorskip("confluent_kafka")

    async def create():
        async with Admin(bootstrap) as admin:
            await admin.create_topic(topic_name, 1, 1)
    arun(create())
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                                  "compression.type": compression,
                                  "enable.idempotence": True})
    for key, value, headers in _records():
        p.produce(topic_name, value=value, key=key, headers=headers, partition=0)
    assert p.flush(30) == 0
    assert arun(_consume_ours(bootstrap, topic_name)) == _records()


@pytest.mark.parametrize("compression", [None, "gzip", "snappy", "lz4"])
def test_we_read_what_kafka_python_writes(bootstrap, topic_name, arun, compression):
    kafka = pytest.importorskip("kafka")

    async def create():
        async with Admin(bootstrap) as admin:
            await admin.create_topic(topic_name, 1, 1)
    arun(create())
    p = kafka.KafkaProducer(bootstrap_servers=bootstrap, compression_type=compression,
                            linger_ms=5)
    try:
        for key, value, headers in _records():
            p.send(topic_name, value=value, key=key, headers=headers, partition=0)
        p.flush(30)
    finally:
        p.close()
    assert arun(_consume_ours(bootstrap, topic_name)) == _records()
