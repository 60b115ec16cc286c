"""Transactions on the partition side, through a real broker: markers written with
WriteTxnMarkers (control batches in Kafka's format), fencing by producer and coordinator
epoch, and Kafka's per-partition error codes."""

import pytest

from fastlog import _codec
from fastlog.protocol import ApiKey, Errors
from tests.server.wire import Wire, batch, create_topic, fetch_body, init_pid, produce


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
    # a coordinator older than the last one that wrote a marker here is fenced
    assert write_markers(wire, [(pid, epoch + 1, True, 4, {topic: [0]})]) == {
        (pid, topic, 0): Errors.TRANSACTION_COORDINATOR_FENCED}
    assert write_markers(wire, [(pid, epoch + 1, True, 6, {topic: [0]})]) == {
        (pid, topic, 0): Errors.NONE}


def txn_batch(values, pid, epoch, seq):
    return batch(values, producer_id=pid, epoch=epoch, seq=seq, is_transactional=True)


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
