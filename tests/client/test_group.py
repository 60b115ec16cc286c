"""Consumer groups with fastlog.client: subscribe, share partitions, rebalance, commit."""

import asyncio

from fastlog.client import Admin, Consumer, Producer, TopicPartition
from fastlog.client.group import (
    assign_range,
    assign_roundrobin,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)


def test_embedded_protocol_round_trips():
    assert decode_subscription(encode_subscription(["a", "b"])) == ["a", "b"]
    tps = [TopicPartition("a", 1), TopicPartition("a", 0), TopicPartition("b", 3)]
    assert sorted(decode_assignment(encode_assignment(tps)),
                  key=lambda tp: (tp.topic, tp.partition)) == sorted(
        tps, key=lambda tp: (tp.topic, tp.partition))


def test_embedded_protocol_matches_kafka_python():
    from kafka.protocol.old.consumer_protocol import (
        ConsumerProtocolMemberAssignment_v0,
        ConsumerProtocolMemberMetadata_v0,
    )

    data = encode_assignment([TopicPartition("t", 0), TopicPartition("t", 2)])
    theirs = ConsumerProtocolMemberAssignment_v0.decode(data)
    assert [(t, sorted(ps)) for t, ps in theirs.assigned_partitions] == [("t", [0, 2])]
    meta = ConsumerProtocolMemberMetadata_v0(0, ["x", "y"], b"").encode()
    assert decode_subscription(meta) == ["x", "y"]
    assert encode_subscription(["x", "y"]) == meta


def test_assignors_split_like_kafka():
    members = {"m1": ["t"], "m2": ["t"], "m3": ["t", "u"]}
    plan = assign_range(members, {"t": 5, "u": 2})
    assert [tp.partition for tp in plan["m1"]] == [0, 1]
    assert [tp.partition for tp in plan["m2"]] == [2, 3]
    assert [(tp.topic, tp.partition) for tp in plan["m3"]] == [("t", 4), ("u", 0), ("u", 1)]
    plan = assign_roundrobin({"a": ["t"], "b": ["t"]}, {"t": 5})
    assert [tp.partition for tp in plan["a"]] == [0, 2, 4]
    assert [tp.partition for tp in plan["b"]] == [1, 3]


def test_two_members_share_then_one_takes_over(bootstrap, topic_name, arun):
    group = topic_name + "-g"

    async def drain(consumer, want, rounds=60):
        got = []
        for _ in range(rounds):
            for records in (await consumer.getmany(250)).values():
                got.extend(int(r.value) for r in records)
            if len(got) >= want:
                break
        return got

    async def go():
        async with Admin(bootstrap) as admin:
            await admin.create_topic(topic_name, 4, 1)
        async with Producer(bootstrap) as p:
            for i in range(400):
                await p.send(topic_name, b"%d" % i, partition=i % 4)
        a = Consumer(bootstrap, auto_offset_reset="earliest")
        b = Consumer(bootstrap, auto_offset_reset="earliest")
        try:
            await a.subscribe([topic_name], group, session_timeout_ms=6000,
                              heartbeat_interval_ms=300, auto_commit_interval_ms=None)
            # b's join makes the coordinator rebalance; a rejoins from its heartbeat.
            join_b = asyncio.ensure_future(b.subscribe(
                [topic_name], group, session_timeout_ms=6000, heartbeat_interval_ms=300,
                auto_commit_interval_ms=None))
            for _ in range(80):
                await a.getmany(100)
                if join_b.done():
                    break
            await join_b
            for _ in range(40):
                await a.getmany(100)
                if len(a.assignment()) == 2:
                    break
            assert sorted(tp.partition for tp in a.assignment() + b.assignment()) == [0, 1, 2, 3]
            assert len(a.assignment()) == 2 and len(b.assignment()) == 2
            got_b = await drain(b, 200)
            assert len(got_b) == 200
            await b.commit()
        finally:
            await b.close()
        try:
            got_a = []
            for _ in range(80):
                for records in (await a.getmany(250)).values():
                    got_a.extend(int(r.value) for r in records)
                if len(a.assignment()) == 4 and len(got_a) >= 200:
                    break
            assert len(a.assignment()) == 4
            # b's partitions were committed at their end: a reads only its own 200 again.
            assert sorted(got_a + got_b) == list(range(400))
            await a.commit()
        finally:
            await a.close()
        async with Admin(bootstrap) as admin:
            committed = await admin.fetch_offsets(group)
        assert {tp.partition: off for tp, (off, _) in committed.items()} == \
            {0: 100, 1: 100, 2: 100, 3: 100}

    arun(go(), timeout=90)


def test_admin_lists_and_describes_an_active_group(bootstrap, topic_name, arun):
    group = topic_name + "-g"

    async def go():
        async with Admin(bootstrap) as admin:
            await admin.create_topic(topic_name, 2, 1)
            c = Consumer(bootstrap, client_id="describe-me")
            try:
                await c.subscribe([topic_name], group, auto_commit_interval_ms=None)
                assert (group, "consumer") in [(g.group_id, g.protocol_type)
                                                for g in await admin.list_groups()]
                (desc,) = await admin.describe_groups([group])
                assert desc.state == "Stable" and desc.protocol_type == "consumer"
                assert desc.protocol in ("range", "roundrobin")
                (member,) = desc.members
                assert member.client_id == "describe-me"
                assert sorted(decode_assignment(member.assignment),
                              key=lambda tp: tp.partition) == \
                    [TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)]
                await c.commit({TopicPartition(topic_name, 1): 0})
            finally:
                await c.close()
            assert await admin.fetch_offsets(group) == {TopicPartition(topic_name, 1): (0, "")}
            (desc,) = await admin.describe_groups([group])
            assert desc.members == [] and desc.state == "Empty"

    arun(go(), timeout=60)
