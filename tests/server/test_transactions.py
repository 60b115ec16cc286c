"""Transactions on the partition side, through a real broker: markers written with
WriteTxnMarkers (control batches in Kafka's format), fencing by producer and coordinator
epoch, and Kafka's per-partition error codes."""

import time

import pytest

from fastlog import _codec
from fastlog.protocol import ApiKey, Errors
from tests.broker_fixture import broker_fixtures
from tests.server.wire import (
    Wire,
    batch,
    create_topic,
    fetch_body,
    init_pid,
    list_offset,
    produce,
    txn_batch,
)

# These tests write transactional batches straight to partitions, with no coordinator:
# Kafka 3.6+ refuses that (KIP-890, tests/server/txn/test_verification.py) unless the
# check is off, as here.
broker, broker_factory = broker_fixtures({"transaction.partition.verification.enable": "false"})


@pytest.fixture
def wire(broker):
    w = Wire(broker)
    yield w
    w.close()


def write_markers(w, markers, version=1):
    """markers: (pid, epoch, commit, coordinator_epoch, {topic: [partitions]})."""
    resp = w.call(ApiKey.WRITE_TXN_MARKERS, version, {"markers": [
        {"producer_id": pid, "producer_epoch": epoch, "transaction_result": commit,
         "coordinator_epoch": ce, "topics": [{"name": t, "partition_indexes": ps}
                                             for t, ps in topics.items()]}
        for pid, epoch, commit, ce, topics in markers]})
    return {(m.producer_id, t.name, p.partition_index): p.error_code
            for m in resp.markers for t in m.topics for p in t.partitions}


def fetch_batches(w, topic, offset=0, isolation=0):
    body = fetch_body(topic, offset, 0, min_bytes=0)
    body["isolation_level"] = isolation
    part = w.call(ApiKey.FETCH, 11, body).responses[0].partitions[0]
    data = bytes(part.records or b"")
    return part, _codec.scan_batches(data, verify_crc=True).batches, data


@pytest.mark.parametrize("version", [0, 1])
def test_write_txn_markers_appends_control_batches(broker, wire, version):
    topic = f"txn-markers-v{version}"
    create_topic(broker, topic)
    pid, epoch = init_pid(wire)
    assert produce(wire, topic, batch([b"a"], producer_id=pid, epoch=epoch, seq=0)).error_code == 0
    errs = write_markers(wire, [(pid, epoch, True, 3, {topic: [0, 7]}),
                                (pid, epoch, False, 3, {"txn-no-such-topic": [0]})], version)
    assert errs == {(pid, topic, 0): Errors.NONE,
                    (pid, topic, 7): Errors.UNKNOWN_TOPIC_OR_PARTITION,
                    (pid, "txn-no-such-topic", 0): Errors.UNKNOWN_TOPIC_OR_PARTITION}
    _, batches, data = fetch_batches(wire, topic)
    assert [b.is_control for b in batches] == [False, True]
    marker = batches[1]
    assert marker.base_offset == 1 and marker.is_transactional
    assert (marker.producer_id, marker.producer_epoch) == (pid, epoch)
    rec = next(iter(_codec.iter_records(data, marker.position)))
    # key: version 0, type 1 (COMMIT); value: version 0, coordinator epoch 3
    assert bytes(rec.key) == b"\x00\x00\x00\x01"
    assert bytes(rec.value) == b"\x00\x00\x00\x00\x00\x03"


def test_markers_are_fenced_by_older_epochs(broker, wire):
    topic = "txn-fence"
    create_topic(broker, topic)
    pid, epoch = init_pid(wire)
    assert write_markers(wire, [(pid, epoch + 1, False, 5, {topic: [0]})]) == {
        (pid, topic, 0): Errors.NONE}
    # the producer's older epoch is fenced, for data and for markers
    r = produce(wire, topic, batch([b"late"], producer_id=pid, epoch=epoch, seq=0))
    assert r.error_code == Errors.INVALID_PRODUCER_EPOCH
    assert write_markers(wire, [(pid, epoch, True, 5, {topic: [0]})]) == {
        (pid, topic, 0): Errors.INVALID_PRODUCER_EPOCH}
    # a marker without a producer id or epoch is refused; the broker goes on
    assert write_markers(wire, [(-1, 0, True, 5, {topic: [0]}),
                                (pid, -1, True, 5, {topic: [0]})]) == {
        (-1, topic, 0): Errors.INVALID_REQUEST, (pid, topic, 0): Errors.INVALID_REQUEST}
    # a coordinator older than the last one that wrote a marker here is fenced
    assert write_markers(wire, [(pid, epoch + 1, True, 4, {topic: [0]})]) == {
        (pid, topic, 0): Errors.TRANSACTION_COORDINATOR_FENCED}
    assert write_markers(wire, [(pid, epoch + 1, True, 6, {topic: [0]})]) == {
        (pid, topic, 0): Errors.NONE}


def test_transactional_produce(broker, wire):
    topic = "txn-produce"
    create_topic(broker, topic)
    pid, epoch = init_pid(wire)
    # transactional batches need the request's transactional id (both Produce paths)
    for version in (3, 7, 8):
        r = produce(wire, topic, txn_batch([b"a"], pid, epoch, 0), version=version)
        assert r.error_code == Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    r = produce(wire, topic, txn_batch([b"a", b"b"], pid, epoch, 0), transactional_id="tx")
    assert r.error_code == Errors.NONE and r.base_offset == 0
    # a plain batch of the producer while its transaction is open
    r = produce(wire, topic, batch([b"c"], producer_id=pid, epoch=epoch, seq=2))
    assert r.error_code == Errors.INVALID_TXN_STATE
    r = produce(wire, topic, txn_batch([b"c"], pid, epoch, 2), transactional_id="tx")
    assert r.error_code == Errors.NONE and r.base_offset == 2
    assert write_markers(wire, [(pid, epoch, True, 0, {topic: [0]})]) == {
        (pid, topic, 0): Errors.NONE}
    # after the marker the producer may write outside a transaction again
    r = produce(wire, topic, batch([b"d"], producer_id=pid, epoch=epoch, seq=3))
    assert r.error_code == Errors.NONE and r.base_offset == 4


# ---------------------------------------------------------------------------- read_committed
def mixed_log(w, topic):
    """0 p0 | 1-2 a1 a2 (producer A, aborted at 3) | 4 p1 | 5 b1 (producer B, committed at
    6) | 7 c1 (A again, left open) | 8 p2. Returns (pid A, epoch A)."""
    a, ea = init_pid(w)
    b, eb = init_pid(w)
    assert produce(w, topic, batch([b"p0"])).base_offset == 0
    assert produce(w, topic, txn_batch([b"a1", b"a2"], a, ea, 0), transactional_id="ta").base_offset == 1
    assert write_markers(w, [(a, ea, False, 0, {topic: [0]})])[(a, topic, 0)] == Errors.NONE
    assert produce(w, topic, batch([b"p1"])).base_offset == 4
    assert produce(w, topic, txn_batch([b"b1"], b, eb, 0), transactional_id="tb").base_offset == 5
    assert write_markers(w, [(b, eb, True, 0, {topic: [0]})])[(b, topic, 0)] == Errors.NONE
    assert produce(w, topic, txn_batch([b"c1"], a, ea, 2), transactional_id="ta").base_offset == 7
    assert produce(w, topic, batch([b"p2"])).base_offset == 8
    return a, ea


def check_committed_view(w, topic, pid_a, lso, aborted_first=1):
    """ListOffsets and raw fetches of mixed_log's topic with its last stable offset `lso`."""
    assert list_offset(w, topic, 1) == lso
    assert list_offset(w, topic, 0) == 9
    part, batches, _ = fetch_batches(w, topic, isolation=1)
    assert part.high_watermark >= 9 and part.last_stable_offset == lso
    assert max(b.last_offset for b in batches) == lso - 1
    assert [(t.producer_id, t.first_offset) for t in part.aborted_transactions] == [
        (pid_a, aborted_first)]
    # read_uncommitted: everything up to the high watermark, no aborted list
    part, batches, _ = fetch_batches(w, topic, isolation=0)
    assert part.last_stable_offset == lso and max(b.last_offset for b in batches) == part.high_watermark - 1
    assert part.aborted_transactions is None


def kafka_python_committed(broker, topic, want, timeout=20.0):
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None,
                      enable_auto_commit=False, auto_offset_reset="earliest",
                      isolation_level="read_committed")
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        out = poll_until(lambda: [r.value for rs in c.poll(timeout_ms=300).values() for r in rs],
                         want, timeout)
        return out, c.position(tp)
    finally:
        c.close()


def confluent_committed(broker, topic, want, timeout=20.0):
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "txn-read",
                  "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        c.assign([TopicPartition(topic, 0, 0)])

        def step():
            m = c.poll(0.3)
            if m is None:
                return []
            assert m.error() is None, m.error()
            return [m.value()]
        return poll_until(step, want, timeout), c.position([TopicPartition(topic, 0)])[0].offset
    finally:
        c.close()


def aiokafka_committed(broker, topic, want, timeout=20.0):
    import asyncio

    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def go():
        c = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             isolation_level="read_committed")
        await c.start()
        try:
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            await c.seek_to_beginning(tp)
            out = []
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                got = await c.getmany(timeout_ms=300)
                out += [r.value for rs in got.values() for r in rs]
                if len(out) >= len(want):
                    # a little longer: nothing more may come
                    settle = time.monotonic() + 1.0
                    while time.monotonic() < settle:
                        got = await c.getmany(timeout_ms=200)
                        out += [r.value for rs in got.values() for r in rs]
                    break
            return out, await c.position(tp)
        finally:
            await c.stop()
    return asyncio.run(asyncio.wait_for(go(), timeout + 15))


def poll_until(step, want, timeout):
    """Poll until `want` many values came (then a second more, for any extra), bounded."""
    out = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(out) < len(want):
        out += step()
    settle = time.monotonic() + 1.0
    while time.monotonic() < settle:
        out += step()
    return out


CLIENTS = {"kafka-python": kafka_python_committed, "confluent-kafka": confluent_committed,
           "aiokafka": aiokafka_committed}


@pytest.mark.parametrize("client", list(CLIENTS))
def test_read_committed_consumers_see_committed_records_only(broker, wire, client):
    topic = f"txn-read-{client}"
    create_topic(broker, topic)
    a, ea = mixed_log(wire, topic)
    check_committed_view(wire, topic, a, 7)
    values, position = CLIENTS[client](broker, topic, [b"p0", b"p1", b"b1"])
    # the aborted records are skipped, and nothing at or after the open transaction shows
    assert values == [b"p0", b"p1", b"b1"]
    assert position == 7
    # the transaction commits: the rest becomes visible
    assert write_markers(wire, [(a, ea, True, 0, {topic: [0]})])[(a, topic, 0)] == Errors.NONE
    assert list_offset(wire, topic, 1) == 10
    values, position = CLIENTS[client](broker, topic, [b"p0", b"p1", b"b1", b"c1", b"p2"])
    assert values == [b"p0", b"p1", b"b1", b"c1", b"p2"]
    assert position == 10


def test_restart_keeps_open_transactions_and_aborted_index(broker_factory):
    b = broker_factory()
    topic = "txn-restart"
    create_topic(b, topic)
    w = Wire(b)
    try:
        a, ea = mixed_log(w, topic)
    finally:
        w.close()
    for how in ("restart", "kill"):
        if how == "restart":
            b.restart()
        else:
            b.kill()
            b.start()
        w = Wire(b)
        try:
            check_committed_view(w, topic, a, 7)
            # the open transaction is still open: a plain batch of its producer is refused
            r = produce(w, topic, batch([b"x"], producer_id=a, epoch=ea, seq=3))
            assert r.error_code == Errors.INVALID_TXN_STATE
        finally:
            w.close()
    values, _ = kafka_python_committed(b, topic, [b"p0", b"p1", b"b1"])
    assert values == [b"p0", b"p1", b"b1"]


def test_describe_producers(broker, wire):
    topic = "txn-describe"
    create_topic(broker, topic)
    a, ea = init_pid(wire)
    b, eb = init_pid(wire)
    assert produce(wire, topic, batch([b"x", b"y"], producer_id=b, epoch=eb, seq=0)).error_code == 0
    assert produce(wire, topic, txn_batch([b"t"], a, ea, 0), transactional_id="ta").base_offset == 2
    write_markers(wire, [(b, eb, True, 3, {topic: [0]})])
    r = wire.call(ApiKey.DESCRIBE_PRODUCERS, 0, {"topics": [
        {"name": topic, "partition_indexes": [0, 5]}]})
    p0, p5 = r.topics[0].partitions
    assert p0.error_code == Errors.NONE
    assert p5.error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
    got = {s.producer_id: (s.producer_epoch, s.last_sequence, s.coordinator_epoch,
                           s.current_txn_start_offset) for s in p0.active_producers}
    assert got == {a: (ea, 0, -1, 2), b: (eb, 1, 3, -1)}
    assert all(s.last_timestamp > 0 for s in p0.active_producers)


def test_delete_records_past_an_open_transaction_moves_the_lso_with_the_log_start(broker, wire):
    topic = "txn-delete-records"
    create_topic(broker, topic)
    a, ea = init_pid(wire)
    assert produce(wire, topic, txn_batch([b"t"], a, ea, 0), transactional_id="ta").base_offset == 0
    assert produce(wire, topic, batch([b"x", b"y"])).base_offset == 1
    assert list_offset(wire, topic, 1) == 0
    r = wire.call(ApiKey.DELETE_RECORDS, 1, {"timeout_ms": 5000, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "offset": 2}]}]})
    assert r.topics[0].partitions[0].error_code == Errors.NONE
    assert list_offset(wire, topic, 1) == 2
    part, batches, _ = fetch_batches(wire, topic, offset=2, isolation=1)
    assert part.error_code == Errors.NONE and part.last_stable_offset == 2 and batches == []
    assert write_markers(wire, [(a, ea, False, 0, {topic: [0]})])[(a, topic, 0)] == Errors.NONE
    assert list_offset(wire, topic, 1) == 4
    part, batches, _ = fetch_batches(wire, topic, offset=2, isolation=1)
    # (the batch holding offset 2, then the marker) the aborted transaction began before
    # the log start: still listed for the client
    assert [b.base_offset for b in batches] == [1, 3]
    assert [(t.producer_id, t.first_offset) for t in part.aborted_transactions] == [(a, 0)]
