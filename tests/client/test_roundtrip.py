"""Producer -> broker -> consumer round trips with fastlog.client against a real broker."""

import pytest

from fastlog.client import Admin, Consumer, Producer, TopicPartition
from fastlog.client.partitioner import partition_for_key


async def _create(bootstrap, topic, partitions=1):
    async with Admin(bootstrap) as admin:
        await admin.create_topic(topic, partitions, 1)


async def _read_all(bootstrap, topic, expected, timeout_s=20):
    out = {}
    async with Consumer(bootstrap) as consumer:
        await consumer.assign_topic(topic)
        await consumer.seek_to_beginning()
        for _ in range(int(timeout_s * 4)):
            for tp, records in (await consumer.getmany(250)).items():
                out.setdefault(tp.partition, []).extend(records)
            if sum(map(len, out.values())) >= expected:
                break
    return out


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_every_codec_round_trips(bootstrap, topic_name, arun, compression):
    values = [b"value-%d-" % i + b"x" * (i % 50) for i in range(500)]

    async def go():
        await _create(bootstrap, topic_name)
        async with Producer(bootstrap, compression=compression, linger_ms=2) as p:
            handles = [await p.send(topic_name, v) for v in values]
            await p.flush()
            offsets = [(await h).offset for h in handles]
        assert offsets == list(range(len(values)))
        got = await _read_all(bootstrap, topic_name, len(values))
        assert [r.value for r in got[0]] == values
        assert [r.offset for r in got[0]] == list(range(len(values)))

    arun(go())


def test_keys_headers_and_null_values(bootstrap, topic_name, arun):
    async def go():
        await _create(bootstrap, topic_name)
        sent = [
            (b"k1", b"v1", [("h1", b"a"), ("h2", b"")]),
            (None, b"no key", []),
            (b"tombstone", None, [("why", b"deleted")]),
            (b"", b"", [("n", None)]),
        ]
        async with Producer(bootstrap) as p:
            for key, value, headers in sent:
                await p.send(topic_name, value, key, headers=headers, partition=0,
                             timestamp_ms=1_700_000_000_000)
        got = (await _read_all(bootstrap, topic_name, len(sent)))[0]
        assert [(r.key, r.value, list(r.headers)) for r in got] == \
            [(k, v, h) for k, v, h in sent]
        assert all(r.timestamp == 1_700_000_000_000 for r in got)

    arun(go())


def test_idempotent_producer_many_partitions(bootstrap, topic_name, arun):
    n_parts, n = 8, 4000

    async def go():
        await _create(bootstrap, topic_name, n_parts)
        async with Producer(bootstrap, enable_idempotence=True, acks="all",
                            compression="lz4", batch_size=4096) as p:
            assert p.producer_id >= 0
            handles = [await p.send(topic_name, b"%d" % i, b"key-%d" % i) for i in range(n)]
            await p.flush()
            meta = [await h for h in handles]
        # Keyed records land where Kafka's default partitioner puts them.
        assert all(m.partition == partition_for_key(b"key-%d" % i, n_parts)
                   for i, m in enumerate(meta))
        got = await _read_all(bootstrap, topic_name, n)
        by_position = {(p, r.offset): int(r.value) for p, rs in got.items() for r in rs}
        assert len(by_position) == n
        assert all(by_position[(m.partition, m.offset)] == i for i, m in enumerate(meta))
        for records in got.values():  # order within each partition is send order
            values = [int(r.value) for r in records]
            assert values == sorted(values)

    arun(go())


def test_null_key_records_spread_over_partitions(bootstrap, topic_name, arun):
    async def go():
        await _create(bootstrap, topic_name, 4)
        async with Producer(bootstrap, batch_size=1024, linger_ms=0) as p:
            handles = [await p.send(topic_name, b"x" * 100) for _ in range(200)]
            await p.flush()
            parts = {(await h).partition for h in handles}
        assert len(parts) > 1

    arun(go())


def test_seek_and_positions(bootstrap, topic_name, arun):
    async def go():
        await _create(bootstrap, topic_name)
        async with Producer(bootstrap) as p:
            for i in range(100):
                await p.send(topic_name, b"%d" % i)
        tp = TopicPartition(topic_name, 0)
        async with Consumer(bootstrap) as c:
            c.assign([tp])
            c.seek(tp, 42)
            got = await c.getmany(5000, max_records=3)
            assert [int(r.value) for r in got[tp]] == [42, 43, 44]
            assert await c.position(tp) == 45
            await c.seek_to_end()
            assert await c.position(tp) == 100
            assert (await c.getmany(300)) == {}
            await c.seek_to_beginning(tp)
            got = await c.getmany(5000, max_records=1)
            assert [r.offset for r in got[tp]] == [0]
            assert await c.end_offsets([tp]) == {tp: 100}
            assert await c.beginning_offsets([tp]) == {tp: 0}

    arun(go())


def test_consumer_waits_for_new_records(bootstrap, topic_name, arun):
    import asyncio

    async def go():
        await _create(bootstrap, topic_name)
        tp = TopicPartition(topic_name, 0)
        async with Consumer(bootstrap, fetch_max_wait_ms=200) as c:
            c.assign([tp])
            await c.seek_to_end()
            assert await c.getmany(300) == {}

            async def later():
                await asyncio.sleep(0.3)
                async with Producer(bootstrap) as p:
                    await p.send(topic_name, b"late")
            task = asyncio.ensure_future(later())
            got = await c.getmany(10000)
            await task
            assert [r.value for r in got[tp]] == [b"late"]

    arun(go())


def test_acks_zero_and_send_batch(bootstrap, topic_name, arun):
    async def go():
        await _create(bootstrap, topic_name)
        async with Producer(bootstrap, acks=0) as p:
            handles = [await p.send(topic_name, b"%d" % i, partition=0) for i in range(50)]
            await p.flush()
            assert {(await h).offset for h in handles} == {-1}  # no answer, no offsets
        async with Producer(bootstrap, compression="zstd") as p:
            fut = await p.send_batch(topic_name, 0, [(1000 + i, b"k", b"b%d" % i, [])
                                                     for i in range(50)])
            await p.flush()
            assert fut.result() == 50
        got = (await _read_all(bootstrap, topic_name, 100))[0]
        assert [r.value for r in got] == [b"%d" % i for i in range(50)] + \
            [b"b%d" % i for i in range(50)]
        assert [r.timestamp for r in got[50:]] == [1000 + i for i in range(50)]

    arun(go())


@pytest.mark.parametrize("reset", ["earliest", "latest", "none"])
def test_offset_out_of_range_follows_auto_offset_reset(bootstrap, topic_name, arun, reset):
    from fastlog.client import errors

    async def go():
        await _create(bootstrap, topic_name)
        async with Producer(bootstrap) as p:
            for i in range(10):
                await p.send(topic_name, b"%d" % i)
        tp = TopicPartition(topic_name, 0)
        async with Consumer(bootstrap, auto_offset_reset=reset, fetch_max_wait_ms=100) as c:
            c.assign([tp])
            c.seek(tp, 1000)
            if reset == "none":
                with pytest.raises(errors.KafkaError) as exc:
                    for _ in range(20):
                        await c.getmany(200)
                assert exc.value.code == errors.OFFSET_OUT_OF_RANGE
                return
            got = []
            for _ in range(10):
                got += (await c.getmany(200)).get(tp, [])
                if reset == "earliest" and len(got) >= 10:
                    break
            if reset == "earliest":
                assert [r.offset for r in got] == list(range(10))
            else:
                assert got == [] and await c.position(tp) == 10

    arun(go())


def test_oversized_record_fails_alone_and_idempotent_sequence_continues(bootstrap, topic_name,
                                                                       arun):
    from fastlog.client import errors

    async def go():
        await _create(bootstrap, topic_name)
        async with Producer(bootstrap, enable_idempotence=True, acks="all",
                            max_request_size=100_000, linger_ms=0) as p:
            first = await p.send(topic_name, b"before", partition=0)
            big = await p.send(topic_name, b"x" * 200_000, partition=0)
            after = await p.send(topic_name, b"after", partition=0)
            await p.flush()
            assert (await first).offset == 0
            with pytest.raises(errors.FastlogError) as exc:
                await big
            assert "max_request_size" in str(exc.value)
            assert (await after).offset == 1
        got = (await _read_all(bootstrap, topic_name, 2))[0]
        assert [r.value for r in got] == [b"before", b"after"]

    arun(go())


def test_send_rejects_non_bytes_without_harming_the_batch(bootstrap, topic_name, arun):
    async def go():
        await _create(bootstrap, topic_name)
        async with Producer(bootstrap) as p:
            ok = await p.send(topic_name, b"fine", partition=0)
            with pytest.raises(TypeError):
                await p.send(topic_name, "text is not bytes", partition=0)
            with pytest.raises(TypeError):
                await p.send(topic_name, b"v", key=42, partition=0)
            await p.flush()
            assert (await ok).offset == 0

    arun(go())
