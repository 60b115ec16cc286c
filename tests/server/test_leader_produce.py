"""One partition's everyday Produce in one compiled step (fastlog/server/_leader_produce.pyx,
ReplicaManager.leader_produce), on brokers in this process fed Produce frames: the same
frames through a broker with the step and one without (every request on the Python path)
give the same answers, the same `.log` bytes, the same topic counters and the same
producer state, for plain and idempotent producers, acks 0, 1 and -1, compressed batches,
and everything the step leaves to the Python path (a new producer, a new epoch, a retried
duplicate answered with its original offset, a sequence gap, an old epoch, a timestamp out
of range, a corrupt batch, a roll). After a restart the producer state written by the
step's appends still spots a retried duplicate and takes the next sequence. A full disk
(a real 1 MiB tmpfs) is answered KAFKA_STORAGE_ERROR on either path, and flush.messages'
fsync is done before the answer."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from fastlog import _codec
from fastlog.protocol import ApiKey, decode_response, encode_request
from fastlog.server.broker import BrokerServer
from fastlog.server.config import KafkaConfig
from tests.server.wire import HandlerConnection
from tests.tmpfs_fixture import small_tmpfs

TOPIC = "t"
PID = 4000


def _batch(n: int, *, pid: int = -1, epoch: int = -1, seq: int = -1, ts: int | None = None,
           compression: int = 0) -> bytes:
    now = int(time.time() * 1000) if ts is None else ts
    return _codec.build_batch([(now, b"k%d" % i, b"value-%d" % i * 3) for i in range(n)],
                              compression=compression, producer_id=pid,
                              producer_epoch=epoch, base_sequence=seq)


def _frame(records: bytes, acks: int = 1, version: int = 9, corr: int = 1,
           others: int = 0) -> bytes:
    """A Produce request of `records` to partition 0 (and, with `others`, a plain batch
    to each of partitions 1..others in the same request)."""
    parts = [{"index": 0, "records": records}] + [
        {"index": i, "records": _batch(2 + i)} for i in range(1, others + 1)]
    return encode_request(ApiKey.PRODUCE, version, corr, "test", {
        "transactional_id": None, "acks": acks, "timeout_ms": 30000,
        "topic_data": [{"name": TOPIC, "partition_data": parts}]})


def _steps() -> list[tuple[str, bytes, int]]:
    """(what, records, acks): one sequence of requests (framed once for both brokers)."""
    old = int(time.time() * 1000) - 30 * 24 * 3600 * 1000
    out = [("plain", _batch(3), 1), ("plain acks=0", _batch(2), 0),
           ("plain acks=all", _batch(4), -1), ("lz4", _batch(20, compression=3), 1),
           ("zstd", _batch(20, compression=4), 1),
           ("new producer", _batch(5, pid=PID, epoch=0, seq=0), 1)]
    out += [(f"next sequence {i}", _batch(5, pid=PID, epoch=0, seq=5 * i), acks)
            for i, acks in ((1, 1), (2, -1), (3, 0), (4, 1))]
    out += [("retried duplicate", _batch(5, pid=PID, epoch=0, seq=10), 1),
            ("sequence gap", _batch(5, pid=PID, epoch=0, seq=40), 1),
            ("after the gap", _batch(5, pid=PID, epoch=0, seq=25), 1),
            ("timestamp out of range", _batch(2, ts=old), 1),
            ("new epoch", _batch(5, pid=PID, epoch=1, seq=0), 1),
            ("old epoch", _batch(5, pid=PID, epoch=0, seq=30), 1),
            ("new epoch, next", _batch(5, pid=PID, epoch=1, seq=5), 1)]
    bad = bytearray(_batch(3))
    bad[-1] ^= 0xFF   # the CRC no longer matches
    out.append(("corrupt", bytes(bad), 1))
    out += [(f"plain {i}", _batch(7), 1) for i in range(40)]   # segment.bytes: rolls too
    return out


async def _run(tmp: Path, steps, enabled: bool, others: int = 0) -> dict:
    config = KafkaConfig.from_sources(None, [
        "listeners=PLAINTEXT://127.0.0.1:0", f"log.dirs={tmp}", "num.partitions=1",
        "log.segment.bytes=4096"])
    broker = BrokerServer(config)
    await broker.startup()
    conn = HandlerConnection()
    try:
        await broker.create_topic(TOPIC, 1 + others, 1,
                                  {"message.timestamp.before.max.ms": "3600000"})
        broker.replica_manager.leader_produce.enabled = enabled
        answers, stepped = [], []
        step = broker.replica_manager.leader_produce
        for what, frame, acks in steps:
            frame = bytearray(frame)
            before = step.taken
            parts = await broker.apis.handle(conn, memoryview(frame))
            if step.taken > before:
                stepped.append(what)
            if acks == 0:
                answers.append((what, parts))
                continue
            r = decode_response(ApiKey.PRODUCE, 9, b"".join(bytes(p) for p in parts))[1]
            answers.append((what, *((p.index, p.error_code, p.base_offset, p.log_start_offset)
                                    for p in r.responses[0].partition_responses)))
        stats = broker.topic_stats.topics[TOPIC]
        counters = {k: getattr(stats, k) for k in stats.__slots__}
        ps = broker.replica_manager.partitions[(TOPIC, 0)].producer_state
        producers = {pid: (e.epoch, e.last_timestamp, e.current_txn_first_offset,
                           [(b.first_seq, b.last_seq, b.first_offset, b.last_offset)
                            for b in e.batches]) for pid, e in ps.producers.items()}
        taken = broker.replica_manager.leader_produce.taken
    finally:
        await broker.shutdown()
    logs = {f"{f.parent.name}/{f.name}": f.read_bytes()
            for f in sorted(tmp.glob(f"{TOPIC}-*/*.log"))}
    return {"answers": answers, "counters": counters, "producers": producers,
            "ps_end": ps.map_end_offset, "logs": logs, "taken": taken, "stepped": stepped}


@pytest.mark.parametrize("others", [0, 2], ids=["one partition", "three partitions"])
def test_compiled_step_answers_and_stores_what_the_python_path_does(tmp_path, others):
    steps = [(what, _frame(records, acks, corr=i, others=others), acks)
             for i, (what, records, acks) in enumerate(_steps())]
    fast = asyncio.run(_run(tmp_path / "fast", steps, True, others))
    slow = asyncio.run(_run(tmp_path / "slow", steps, False, others))
    assert slow["taken"] == 0
    assert fast["taken"] >= 40 * (1 + others), fast["taken"]   # the everyday ones
    if not others:
        # an idempotent producer's next batches take the step; what is unusual does not
        assert {f"next sequence {i}" for i in range(1, 5)} | {"new epoch, next"} <= set(
            fast["stepped"])
        assert not {"new producer", "retried duplicate", "sequence gap", "old epoch",
                    "new epoch", "timestamp out of range", "corrupt"} & set(fast["stepped"])
    assert len(fast["answers"]) == len(slow["answers"])
    for a, b in zip(fast["answers"], slow["answers"], strict=True):
        assert a == b
    answers = dict((a[0], a[1][1:]) for a in fast["answers"] if a[1] is not None)
    assert answers["retried duplicate"][:2] == (0, answers["next sequence 2"][1])
    assert answers["sequence gap"][0] == 45        # OUT_OF_ORDER_SEQUENCE_NUMBER
    assert answers["old epoch"][0] == 47           # INVALID_PRODUCER_EPOCH
    assert answers["timestamp out of range"][0] == 32   # INVALID_TIMESTAMP
    assert answers["corrupt"][0] == 2              # CORRUPT_MESSAGE
    assert answers["new epoch, next"][0] == 0
    assert fast["counters"] == slow["counters"]
    assert fast["counters"]["messages_in"] > 0
    assert fast["producers"] == slow["producers"]
    assert fast["ps_end"] == slow["ps_end"]
    assert len(fast["logs"]) > 1                   # it rolled
    assert fast["logs"] == slow["logs"]


async def _produce(broker, conn, records, corr: int = 1):
    parts = await broker.apis.handle(conn, memoryview(bytearray(_frame(records, corr=corr))))
    r = decode_response(ApiKey.PRODUCE, 9, b"".join(bytes(p) for p in parts))[1]
    p = r.responses[0].partition_responses[0]
    return p.error_code, p.base_offset


async def _restarted(tmp: Path) -> list:
    config = KafkaConfig.from_sources(None, [
        "listeners=PLAINTEXT://127.0.0.1:0", f"log.dirs={tmp}", "num.partitions=1"])
    conn, out = HandlerConnection(), []
    broker = BrokerServer(config)
    await broker.startup()
    try:
        await broker.create_topic(TOPIC, 1, 1, {})
        for i in range(8):
            out.append(await _produce(broker, conn, _batch(3, pid=PID, epoch=2, seq=3 * i)))
        taken = broker.replica_manager.leader_produce.taken
        assert taken >= 6, taken
    finally:
        await broker.shutdown()
    broker = BrokerServer(config)
    await broker.startup()
    try:
        # the last batches again (a producer retrying over the restart), then the next one
        for i in (6, 7, 8):
            out.append(await _produce(broker, conn, _batch(3, pid=PID, epoch=2, seq=3 * i)))
        out.append(await _produce(broker, conn, _batch(3, pid=PID, epoch=2, seq=3 * 10)))
    finally:
        await broker.shutdown()
    return out


def test_producer_state_of_compiled_appends_survives_a_restart(tmp_path):
    out = asyncio.run(_restarted(tmp_path))
    assert [e for e, _ in out[:8]] == [0] * 8
    assert [o for _, o in out[:8]] == [3 * i for i in range(8)]
    assert out[8] == (0, 18) and out[9] == (0, 21)   # duplicates: their original offsets
    assert out[10] == (0, 24)                        # the next sequence
    assert out[11][0] == 45                          # a gap: OUT_OF_ORDER_SEQUENCE_NUMBER


async def _started(log_dir: Path) -> BrokerServer:
    """A single-node broker on `log_dir`, started."""
    broker = BrokerServer(KafkaConfig.from_sources(None, [
        "listeners=PLAINTEXT://127.0.0.1:0", f"log.dirs={log_dir}", "num.partitions=1"]))
    await broker.startup()
    return broker


async def _until_full(disk: Path, enabled: bool) -> dict:
    """Produce to a broker whose log dir is `disk` until an append fails for want of
    space (or 2,000 requests): the answers and the topic's counters."""
    broker = await _started(disk)
    conn, answers = HandlerConnection(), []
    try:
        await broker.create_topic(TOPIC, 1, 1, {})
        broker.replica_manager.leader_produce.enabled = enabled
        (disk / "filler").write_bytes(b"\0" * (600 << 10))
        records = _codec.build_batch([(int(time.time() * 1000), None, b"x" * 500)] * 4)
        for i in range(2_000):
            answers.append(await _produce(broker, conn, records, corr=i))
            if answers[-1][0] != 0:
                answers.append(await _produce(broker, conn, records, corr=i + 1))
                break
        stats = broker.topic_stats.topics[TOPIC]
        taken = broker.replica_manager.leader_produce.taken
        counters = {k: getattr(stats, k) for k in stats.__slots__}
    finally:
        await broker.shutdown()
    return {"answers": answers, "counters": counters, "taken": taken}


def test_a_full_disk_is_a_storage_error_on_either_path(tmp_path):
    with small_tmpfs(tmp_path / "fast", "1m") as fast_disk:
        fast = asyncio.run(_until_full(fast_disk, True))
    with small_tmpfs(tmp_path / "slow", "1m") as slow_disk:
        slow = asyncio.run(_until_full(slow_disk, False))
    assert fast["taken"] > 10 and slow["taken"] == 0
    assert fast["answers"][-2][0] == 56 and fast["answers"][-1][0] == 56   # KAFKA_STORAGE_ERROR
    assert fast["answers"] == slow["answers"]
    assert fast["counters"] == slow["counters"]


async def _flushed(tmp: Path) -> tuple[list, int, int]:
    broker = await _started(tmp)
    conn = HandlerConnection()
    try:
        await broker.create_topic(TOPIC, 1, 1, {"flush.messages": "6"})
        out = [await _produce(broker, conn, _batch(2), corr=i) for i in range(12)]
        log_ = broker.replica_manager.partitions[(TOPIC, 0)].log
        return out, broker.replica_manager.leader_produce.taken, log_.recovery_point
    finally:
        await broker.shutdown()


def test_flush_messages_is_waited_for_before_the_answer(tmp_path):
    out, taken, recovery_point = asyncio.run(_flushed(tmp_path))
    assert out == [(0, 2 * i) for i in range(12)]
    assert taken >= 10
    assert recovery_point >= 18     # the fsyncs flush.messages asked for were done


def test_a_replicated_leader_takes_the_step_and_acks_all_waits_for_the_isr(tmp_path):
    from tests.replication.test_replica_manager import KEY, run
    from tests.replication.test_replica_manager import TOPIC as REPLICATED

    async def produce(broker, records, acks):
        frame = encode_request(ApiKey.PRODUCE, 9, 1, "test", {
            "transactional_id": None, "acks": acks, "timeout_ms": 5000, "topic_data": [
                {"name": REPLICATED, "partition_data": [{"index": 0, "records": records}]}]})
        parts = await broker.apis.handle(HandlerConnection(), memoryview(bytearray(frame)))
        if parts is None:
            return None
        r = decode_response(ApiKey.PRODUCE, 9, b"".join(bytes(p) for p in parts))[1]
        p = r.responses[0].partition_responses[0]
        return p.error_code, p.base_offset

    async def body(pair):
        pair.lead(pair.b1, pair.b2, 1)
        p2 = pair.b2.replica_manager.get_partition(*KEY)
        end = 0
        for i in range(12):
            acks = (-1, 1, 0)[i % 3]
            answer = await produce(pair.b1, _batch(3), acks)
            if acks == -1:
                assert answer == (0, end)
                assert p2.log.log_end_offset >= end + 3   # the ISR has it
            elif acks == 1:
                assert answer == (0, end)
            end += 3
        assert pair.b1.replica_manager.leader_produce.taken >= 10
        # the follower refuses clients (the Python path's answer)
        assert (await produce(pair.b2, _batch(3), 1))[0] == 6   # NOT_LEADER_OR_FOLLOWER
        assert pair.b2.replica_manager.leader_produce.taken == 0

    run(tmp_path, body)


def _future_batch() -> bytes:
    return _batch(2, ts=int(time.time() * 1000) + 3600 * 1000)


def _changes() -> list:
    """(what, records or a change of the broker's state, acks): every setting the step
    keeps per topic changes between two requests, and the next request must see it."""

    def topic_configs(configs):
        return lambda broker: broker.set_topic_configs(TOPIC, configs)

    def broker_configs(configs):
        return lambda broker: broker.alter_broker_configs("<default>", configs)

    async def recreate(broker):
        await broker.delete_topic(TOPIC)
        await broker.create_topic(TOPIC, 1, 1, {})

    async def not_hosted(broker):   # (its log stays open, as in a reassignment)
        broker.replica_manager.stop_replica(TOPIC, 0, delete=False)

    async def hosted_again(broker):
        broker.replica_manager.make_leader(TOPIC, 0, broker.log_config(TOPIC), 0,
                                           [broker.node_id])

    return [
        ("plain", _batch(3), 1), ("plain again", _batch(3), 1),
        ("-> LogAppendTime", topic_configs({"message.timestamp.type": "LogAppendTime"}), 0),
        ("log append time", _batch(3), 1),
        ("-> defaults", topic_configs({}), 0), ("plain after", _batch(3), 1),
        ("-> max.message.bytes 100", topic_configs({"max.message.bytes": "100"}), 0),
        ("too large", _batch(3), 1),
        ("-> gzip", topic_configs({"compression.type": "gzip"}), 0),
        ("recompressed", _batch(3), 1),
        ("-> after.max.ms", topic_configs({"message.timestamp.after.max.ms": "60000"}), 0),
        ("from the future", _future_batch(), 1),
        ("-> min.insync.replicas 2", topic_configs({"min.insync.replicas": "2"}), 0),
        ("acks=all short of the ISR", _batch(3), -1),
        ("acks=1 short of the ISR", _batch(3), 1),
        ("-> defaults again", topic_configs({}), 0),
        ("future, allowed", _future_batch(), 1), ("acks=all", _batch(3), -1),
        ("-> broker after.max.ms", broker_configs(
            {"log.message.timestamp.after.max.ms": "60000"}), 0),
        ("from the future, broker limit", _future_batch(), 1),
        ("-> broker defaults", broker_configs({}), 0),
        ("future, allowed again", _future_batch(), 1),
        ("-> deleted and created again", recreate, 0),
        ("plain in the new topic", _batch(3), 1), ("plain in the new topic 2", _batch(3), 1),
        # the partitions kept per topic: one that goes (its log open) and comes back
        ("-> partition not hosted", not_hosted, 0), ("not hosted", _batch(3), 1),
        ("-> partition hosted again", hosted_again, 0), ("hosted again", _batch(3), 1),
        ("hosted again 2", _batch(3), 1),
    ]


async def _run_changes(tmp: Path, changes: list, enabled: bool) -> dict:
    broker = await _started(tmp)
    conn = HandlerConnection()
    try:
        await broker.create_topic(TOPIC, 1, 1, {})
        step = broker.replica_manager.leader_produce
        step.enabled = enabled
        answers, stepped, reread = [], [], []
        for i, (what, records, acks) in enumerate(changes):
            if callable(records):
                await records(broker)
                continue
            before, read = step.taken, step.facts_read
            parts = await broker.apis.handle(conn, memoryview(bytearray(
                _frame(records, acks, corr=i))))
            if step.taken > before:
                stepped.append(what)
            if step.facts_read > read:
                reread.append(what)
            r = decode_response(ApiKey.PRODUCE, 9, b"".join(bytes(p) for p in parts))[1]
            p = r.responses[0].partition_responses[0]
            answers.append((what, p.error_code, p.base_offset, p.log_start_offset,
                            p.log_append_time_ms != -1))
        stats = broker.topic_stats.topics[TOPIC]
        counters = {k: getattr(stats, k) for k in stats.__slots__}
        total = {k: getattr(broker.topic_stats.all_topics, k) for k in stats.__slots__}
    finally:
        await broker.shutdown()
    logs = {f.name: f.read_bytes() for f in sorted((tmp / f"{TOPIC}-0").glob("*.log"))}
    return {"answers": answers, "stepped": stepped, "reread": reread, "counters": counters,
            "total": total, "logs": logs}


def test_a_change_between_two_requests_is_seen_by_the_next(tmp_path):
    """The settings the step keeps (per topic: LogAppendTime, max.message.bytes, the
    codec, the timestamp limits, min.insync.replicas, the counters) change between
    requests (the topic's configs, the broker's dynamic defaults, a deletion and a new
    topic of the same name): the answers, bytes and counters are the Python path's."""
    changes = _changes()   # (the same batches, bytes and all, for both brokers)
    fast = asyncio.run(_run_changes(tmp_path / "fast", changes, True))
    slow = asyncio.run(_run_changes(tmp_path / "slow", changes, False))
    for a, b in zip(fast["answers"], slow["answers"], strict=True):
        assert a == b
    answers = {a[0]: a[1:] for a in fast["answers"]}
    assert answers["log append time"][0] == 0 and answers["log append time"][3]
    assert answers["too large"][0] == 10                    # MESSAGE_TOO_LARGE
    assert answers["from the future"][0] == 32              # INVALID_TIMESTAMP
    assert answers["from the future, broker limit"][0] == 32
    assert answers["acks=all short of the ISR"][0] == 19    # NOT_ENOUGH_REPLICAS
    assert answers["plain in the new topic"][:2] == (0, 0)  # a new log
    assert answers["not hosted"][0] == 3                    # UNKNOWN_TOPIC_OR_PARTITION
    assert answers["hosted again"][:2] == (0, 6)            # the same log goes on
    # the first request after each change read the topic's settings again, no other did
    firsts = ["plain"] + [next(w for w, r, _ in changes[i + 1:] if not callable(r))
                          for i, (_, r, _) in enumerate(changes) if callable(r)]
    firsts.remove("not hosted")   # (no partition there: nothing else is read)
    assert fast["reread"] == firsts
    # the everyday ones took the step (the first after a change of settings re-arms the
    # log's compiled append on the Python path)
    assert {"plain again", "acks=all", "future, allowed again",
            "plain in the new topic 2", "hosted again 2"} <= set(fast["stepped"])
    assert not {"log append time", "too large", "recompressed", "from the future",
                "acks=all short of the ISR", "from the future, broker limit",
                "not hosted"} & set(
        fast["stepped"])
    assert fast["counters"] == slow["counters"] and fast["total"] == slow["total"]
    assert fast["counters"]["total_produce_requests"] == 4   # the new topic's own
    assert fast["logs"] == slow["logs"]
