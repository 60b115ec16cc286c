"""fastlog.client's transactional producer against a real broker: commit and abort over
two partitions (the coordinator's state, and what a read_committed librdkafka consumer
reads), offsets sent in a transaction, fencing by a second producer of the same id, and
the misuse it refuses."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from fastlog.client import Admin, Producer, TopicPartition, errors
from fastlog.protocol import ApiKey, Errors


async def _create(bootstrap, topic, partitions=2):
    async with Admin(bootstrap) as admin:
        await admin.create_topic(topic, partitions, 1)


async def _state(producer, txn_id):
    conn = await producer.cluster.connection(await producer.cluster.find_coordinator(txn_id, 1))
    resp = await conn.request(ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [txn_id]},
                              version=0)
    return resp.transaction_states[0].transaction_state


async def _until_state(producer, txn_id, want):
    for _ in range(200):
        if await _state(producer, txn_id) == want:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{txn_id} never reached {want}")


def _read_committed(bootstrap, topic, partitions, expect, timeout=20.0):
    """What a read_committed librdkafka consumer reads of the topic from offset 0."""
    import time

    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTP

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}",
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        c.assign([CTP(topic, p, 0) for p in range(partitions)])
        got, deadline = [], time.monotonic() + timeout
        while len(got) < expect and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                got.append(m.value())
        while (m := c.poll(0.5)) is not None:     # nothing more arrives
            if not m.error():
                got.append(m.value())
        return sorted(got)
    finally:
        c.close()


def test_commit_and_abort(bootstrap, topic_name, arun):
    txn_id = f"fl-txn-{uuid.uuid4().hex[:6]}"

    async def go():
        await _create(bootstrap, topic_name)
        async with Producer(bootstrap, transactional_id=txn_id, acks="all") as p:
            assert p.producer_id >= 0 and p.producer_epoch == 0
            await p.begin_transaction()
            for i in range(10):
                await p.send(topic_name, b"c%d" % i, partition=i % 2)
            await p.commit_transaction()
            await _until_state(p, txn_id, "CompleteCommit")
            await p.begin_transaction()
            await p.send(topic_name, b"gone", partition=0)
            await p.abort_transaction()
            await _until_state(p, txn_id, "CompleteAbort")
            await p.begin_transaction()       # nothing sent: ends without the coordinator
            await p.commit_transaction()
    arun(go())
    assert _read_committed(bootstrap, topic_name, 2, 10) == sorted(b"c%d" % i for i in range(10))


def test_offsets_sent_in_a_transaction(bootstrap, topic_name, arun):
    txn_id = f"fl-txn-{uuid.uuid4().hex[:6]}"
    group = f"fl-group-{uuid.uuid4().hex[:6]}"
    tp = TopicPartition(topic_name, 1)

    async def go():
        await _create(bootstrap, topic_name)
        async with Producer(bootstrap, transactional_id=txn_id, acks="all") as p, \
                Admin(bootstrap) as admin:
            for offset, commit in ((3, False), (8, True)):
                await p.begin_transaction()
                await p.send(topic_name, b"x", partition=0)
                await p.send_offsets_to_transaction({tp: offset}, group)
                assert tp not in await admin.fetch_offsets(group, [tp])   # pending
                if commit:
                    await p.commit_transaction()
                else:
                    await p.abort_transaction()
            await _until_state(p, txn_id, "CompleteCommit")
            assert (await admin.fetch_offsets(group, [tp]))[tp][0] == 8
    arun(go())


def test_a_second_producer_fences_the_first(bootstrap, topic_name, arun):
    txn_id = f"fl-txn-{uuid.uuid4().hex[:6]}"

    async def go():
        await _create(bootstrap, topic_name)
        async with Producer(bootstrap, transactional_id=txn_id, acks="all") as zombie:
            await zombie.begin_transaction()
            await zombie.send(topic_name, b"zombie", partition=0)
            await zombie.flush()
            async with Producer(bootstrap, transactional_id=txn_id, acks="all") as fresh:
                assert fresh.producer_id == zombie.producer_id
                assert fresh.producer_epoch > zombie.producer_epoch
                with pytest.raises(errors.KafkaError) as info:
                    await zombie.commit_transaction()
                assert info.value.code in (Errors.PRODUCER_FENCED, Errors.INVALID_PRODUCER_EPOCH)
                with pytest.raises(errors.KafkaError):
                    await zombie.begin_transaction()   # fenced for good
                await fresh.begin_transaction()
                await fresh.send(topic_name, b"alive", partition=1)
                await fresh.commit_transaction()
    arun(go())


def test_misuse_is_refused_with_one_sentence(bootstrap, topic_name, arun):
    with pytest.raises(errors.FastlogError, match="acks=all"):
        Producer(bootstrap, transactional_id="x")

    async def go():
        await _create(bootstrap, topic_name)
        async with Producer(bootstrap, transactional_id=f"fl-{uuid.uuid4().hex[:6]}",
                            acks="all") as p:
            with pytest.raises(errors.FastlogError, match="begin_transaction"):
                await p.send(topic_name, b"outside")
            with pytest.raises(errors.FastlogError, match="begin_transaction"):
                await p.commit_transaction()
            await p.begin_transaction()
            with pytest.raises(errors.FastlogError, match="already open"):
                await p.begin_transaction()
            await p.abort_transaction()
        async with Producer(bootstrap) as plain:
            with pytest.raises(errors.FastlogError, match="transactional_id"):
                await plain.begin_transaction()
    arun(go())
