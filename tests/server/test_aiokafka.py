"""aiokafka 0.14 against a real fastlog-server: idempotent produce with every codec,
assign-and-consume from the beginning and from an offset, offsets lookups, admin."""

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

CODECS = [None, "gzip", "snappy", "lz4", "zstd"]


def run(coro, timeout=60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def create(broker, name, partitions=1):
    a = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await a.start()
    try:
        await a.create_topics([NewTopic(name, partitions, 1)])
    finally:
        await a.close()


async def produce(broker, topic, values, **conf):
    p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5, **conf)
    await p.start()
    try:
        futs = [await p.send(topic, value=v, partition=0) for v in values]
        return [(await f).offset for f in futs]
    finally:
        await p.stop()


async def consume(broker, topic, count, offset=None, timeout=20.0):
    c = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None,
                         enable_auto_commit=False, auto_offset_reset="earliest")
    await c.start()
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        if offset is None:
            await c.seek_to_beginning(tp)
        else:
            c.seek(tp, offset)
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline:
            batch = await c.getmany(timeout_ms=500)
            for recs in batch.values():
                out.extend((r.offset, r.value) for r in recs)
        return out
    finally:
        await c.stop()


@pytest.mark.parametrize("codec", CODECS)
def test_idempotent_produce_and_consume_every_codec(broker, codec):
    topic = f"aio-codec-{codec or 'none'}"

    async def scenario():
        await create(broker, topic)
        values = [b"aio-%d-" % i + b"z" * (i % 30) for i in range(120)]
        offsets = await produce(broker, topic, values, compression_type=codec,
                                enable_idempotence=True)
        assert offsets == list(range(120))
        got = await consume(broker, topic, 120)
        assert [v for _, v in got] == values

    run(scenario())


def test_consume_from_offset_and_offset_lookups(broker):
    topic = "aio-offsets"

    async def scenario():
        await create(broker, topic)
        await produce(broker, topic, [b"a", b"b", b"c"])
        t_mid = int(time.time() * 1000) + 1
        await asyncio.sleep(0.05)
        await produce(broker, topic, [b"d"])
        got = await consume(broker, topic, 2, offset=2)
        assert got == [(2, b"c"), (3, b"d")]
        c = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None)
        await c.start()
        try:
            tp = TopicPartition(topic, 0)
            assert await c.beginning_offsets([tp]) == {tp: 0}
            assert await c.end_offsets([tp]) == {tp: 4}
            found = await c.offsets_for_times({tp: t_mid})
            assert found[tp].offset == 3
        finally:
            await c.stop()

    run(scenario())


def test_admin_topic_lifecycle_and_delete_records(broker):
    from aiokafka.admin import RecordsToDelete
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    topic = "aio-admin"

    async def scenario():
        a = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await a.start()
        try:
            await a.create_topics([NewTopic(topic, 2, 1, topic_configs={"retention.ms": "7200000"})])
            assert topic in await a.list_topics()
            await a.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                                  {"segment.bytes": "2097152"})])
            resps = await a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
            configs = {c[0]: c[1] for r in resps for res in r.resources for c in res[4]}
            # AlterConfigs replaces the whole set: retention.ms went back to the default
            assert configs["segment.bytes"] == "2097152"
            assert configs["retention.ms"] == "604800000"
            await produce(broker, topic, [b"%d" % i for i in range(6)])
            tp = TopicPartition(topic, 0)
            low = await a.delete_records({tp: RecordsToDelete(before_offset=4)})
            assert low[tp] == 4
            got = await consume(broker, topic, 2)
            assert [o for o, _ in got] == [4, 5]
            await a.delete_topics([topic])
            assert topic not in await a.list_topics()
        finally:
            await a.close()

    run(scenario())
