"""fastlog.client.Admin against a real broker: topics, configs, offsets, records."""

import time

import pytest

from fastlog.client import EARLIEST, LATEST, Admin, Consumer, Producer, TopicPartition, errors


def test_create_describe_delete_topic(bootstrap, topic_name, arun):
    async def go():
        async with Admin(bootstrap) as admin:
            await admin.create_topic(topic_name, 3, 1)
            assert topic_name in await admin.list_topics()
            (info,) = await admin.describe_topics([topic_name])
            assert sorted(info.partitions) == [0, 1, 2]
            assert all(p.leader >= 0 and p.replicas == [p.leader]
                       for p in info.partitions.values())
            with pytest.raises(errors.KafkaError) as exc:
                await admin.create_topic(topic_name, 1, 1)
            assert exc.value.code == errors.TOPIC_ALREADY_EXISTS
            await admin.delete_topic(topic_name)
            assert topic_name not in await admin.list_topics()
            with pytest.raises(errors.UnknownTopic):
                await admin.describe_topics([topic_name])
            with pytest.raises(errors.UnknownTopic):
                await admin.delete_topic(topic_name)

    arun(go())


def test_topic_configs_describe_and_alter(bootstrap, topic_name, arun):
    async def go():
        async with Admin(bootstrap) as admin:
            await admin.create_topic(topic_name, 1, 1, {"retention.ms": "86400000"})
            configs = {c.name: c for c in await admin.describe_configs(topic_name)}
            assert configs["retention.ms"].value == "86400000"
            assert configs["retention.ms"].source == "DYNAMIC_TOPIC_CONFIG"
            await admin.alter_configs(topic_name, {"cleanup.policy": "compact"},
                                      delete=["retention.ms"])
            configs = {c.name: c for c in await admin.describe_configs(topic_name)}
            assert configs["cleanup.policy"].value == "compact"
            assert configs["retention.ms"].source != "DYNAMIC_TOPIC_CONFIG"
            with pytest.raises(errors.UnknownTopic):
                await admin.describe_configs(topic_name + "-absent")

    arun(go())


def test_list_offsets_earliest_latest_and_by_time(bootstrap, topic_name, arun):
    async def go():
        base = int(time.time() * 1000) - 100_000
        async with Admin(bootstrap) as admin:
            await admin.create_topic(topic_name, 1, 1)
            tp = TopicPartition(topic_name, 0)
            async with Producer(bootstrap, linger_ms=0) as p:
                for i in range(10):
                    await p.send(topic_name, b"%d" % i, partition=0, timestamp_ms=base + i * 1000)
            found = await admin.list_offsets({tp: EARLIEST})
            assert found[tp].offset == 0
            assert (await admin.list_offsets({tp: LATEST}))[tp].offset == 10
            at = await admin.list_offsets({tp: base + 3500})
            assert (at[tp].offset, at[tp].timestamp) == (4, base + 4000)
            assert (await admin.list_offsets({tp: base + 10_000_000}))[tp].offset == -1
        async with Consumer(bootstrap) as c:
            got = await c.offsets_for_times({tp: base + 5000})
            assert got[tp].offset == 5
            assert (await c.offsets_for_times({tp: base + 99_000_000}))[tp] is None

    arun(go())


def test_delete_records_moves_log_start(bootstrap, topic_name, arun):
    async def go():
        tp = TopicPartition(topic_name, 0)
        async with Admin(bootstrap) as admin:
            await admin.create_topic(topic_name, 1, 1)
            async with Producer(bootstrap, linger_ms=0) as p:
                for i in range(20):
                    await p.send(topic_name, b"%d" % i, partition=0)
            assert await admin.delete_records({tp: 7}) == {tp: 7}
            assert (await admin.list_offsets({tp: EARLIEST}))[tp].offset == 7
        async with Consumer(bootstrap) as c:
            c.assign([tp])
            await c.seek_to_beginning()
            got = await c.getmany(5000, max_records=1)
            assert [int(r.value) for r in got[tp]] == [7]

    arun(go())


def test_describe_log_dirs_sizes_and_disk(bootstrap, topic_name, arun):
    async def go():
        async with Admin(bootstrap) as admin:
            await admin.create_topic(topic_name, 2, 1)
            async with Producer(bootstrap, linger_ms=0) as p:
                await p.send(topic_name, b"v" * 1000, partition=1)
            everything = await admin.describe_log_dirs()
            (node,) = everything
            (desc,) = everything[node].values()
            assert desc.error is None and 0 < desc.usable_bytes <= desc.total_bytes
            assert desc.replicas[TopicPartition(topic_name, 0)].size == 0
            one = desc.replicas[TopicPartition(topic_name, 1)]
            assert one.size > 1000 and one.offset_lag == 0 and not one.is_future
            # Only the partitions asked about, from the brokers named.
            asked = await admin.describe_log_dirs([node], [TopicPartition(topic_name, 1)])
            (desc,) = asked[node].values()
            assert list(desc.replicas) == [TopicPartition(topic_name, 1)]

    arun(go())


def test_unknown_topic_is_one_clear_error(bootstrap, arun):
    async def go():
        async with Consumer(bootstrap) as c:
            with pytest.raises(errors.UnknownTopic) as exc:
                await c.assign_topic("surely-no-such-topic")
            assert str(exc.value) == "topic 'surely-no-such-topic' does not exist"

    arun(go())


def test_unreachable_broker_is_one_clear_error(arun, closed_port):
    port = closed_port

    async def go():
        with pytest.raises(errors.BrokerUnavailable) as exc:
            async with Admin(f"127.0.0.1:{port}"):
                pass
        assert str(exc.value) == f"cannot connect to broker 127.0.0.1:{port}: connection refused"

    arun(go())
