"""The broker over raw sockets: malformed frames (answered or closed as Kafka does, broker
stays up, other connections unaffected), Produce validation error codes, idempotent
producer sequences, fetch long polling, and the ApiVersions fallback."""

import socket
import struct
import threading
import time

import pytest

from fastlog import _codec, protocol
from fastlog.protocol import ApiKey, Errors
from tests.server.wire import (
    Wire,
    batch,
    create_topic,
    fetch_body,
    healthy,
    init_pid,
    produce,
    topic_id,
)


@pytest.fixture
def wire(broker):
    w = Wire(broker)
    yield w
    w.close()


# ---------------------------------------------------------------------------- framing
@pytest.mark.parametrize("garbage", [
    struct.pack(">i", -1),
    struct.pack(">i", 0),
    struct.pack(">i", 0x7FFFFFFF),
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
])
def test_bad_frames_close_the_connection(broker, wire, garbage):
    wire.send_raw(garbage)
    assert wire.closed_by_broker()
    assert healthy(broker)


def test_unknown_api_key_closes(broker, wire):
    wire.send_raw(struct.pack(">ihhih", 10, 9999, 0, 1, -1))
    assert wire.closed_by_broker()
    assert healthy(broker)


def test_unsupported_version_of_other_api_closes(broker, wire):
    wire.send_raw(struct.pack(">ihhih", 10, int(ApiKey.METADATA), 99, 1, -1))
    assert wire.closed_by_broker()


def test_unsupported_api_versions_version_gets_v0_error_reply(wire):
    # a future version: flexible request header v2 (client id, then an empty tag buffer)
    wire.send_raw(struct.pack(">ihhihb", 11, int(ApiKey.API_VERSIONS), 99, 7, -1, 0))
    frame = wire.recv_frame()
    cid, resp = protocol.decode_response(ApiKey.API_VERSIONS, 0, frame)
    assert cid == 7 and resp.error_code == Errors.UNSUPPORTED_VERSION
    keys = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert keys[ApiKey.API_VERSIONS] == (0, 4) and keys[ApiKey.PRODUCE][0] == 0


def test_truncated_body_closes(broker, wire):
    # Metadata v1 claiming 5 topics with no bytes behind the count.
    body = struct.pack(">hhih", int(ApiKey.METADATA), 1, 1, -1) + struct.pack(">i", 5)
    wire.send_raw(struct.pack(">i", len(body)) + body)
    assert wire.closed_by_broker()
    assert healthy(broker)


def test_huge_array_count_allocates_nothing(broker, wire):
    body = struct.pack(">hhih", int(ApiKey.METADATA), 1, 1, -1) + struct.pack(">i", 0x7FFFFFFF)
    wire.send_raw(struct.pack(">i", len(body)) + body)
    assert wire.closed_by_broker()
    assert healthy(broker)


# ---------------------------------------------------------------------------- produce
def test_bad_crc_is_corrupt_message(broker, wire):
    create_topic(broker, "wire-crc")
    b = bytearray(batch([b"hello world"]))
    b[-1] ^= 0x01
    r = produce(wire, "wire-crc", bytes(b))
    assert r.error_code == Errors.CORRUPT_MESSAGE
    assert produce(wire, "wire-crc", batch([b"fine"])).error_code == Errors.NONE


def test_structurally_invalid_and_control_batches_are_invalid_record(broker, wire):
    create_topic(broker, "wire-invalid")
    ctrl = _codec.build_control_batch(True, 5, 0, 0, int(time.time() * 1000))
    # (a control batch is transactional: without a transactional id Kafka refuses that first)
    assert produce(wire, "wire-invalid", ctrl).error_code == \
        Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert produce(wire, "wire-invalid", ctrl, transactional_id="tx").error_code == \
        Errors.INVALID_RECORD
    two = batch([b"a"]) + batch([b"b"])
    assert produce(wire, "wire-invalid", two).error_code == Errors.INVALID_RECORD


def test_truncated_batch_is_rejected(broker, wire):
    create_topic(broker, "wire-trunc")
    b = batch([b"x" * 100])
    r = produce(wire, "wire-trunc", b[:-10])
    assert r.error_code in (Errors.CORRUPT_MESSAGE, Errors.INVALID_RECORD)


def test_decompression_bomb_is_refused_and_broker_survives(broker, wire):
    create_topic(broker, "wire-bomb")
    # One record whose value is 80 MiB of zeros: ~80 KB of gzip, over the 64 MiB cap.
    b = _codec.BatchBuilder(compression=1)
    b.append(int(time.time() * 1000), None, bytes(80 * 1024 * 1024))
    r = produce(wire, "wire-bomb", b.build())
    assert r.error_code != Errors.NONE
    assert healthy(broker)


def test_message_too_large(broker, wire):
    create_topic(broker, "wire-large", configs={"max.message.bytes": "1000"})
    r = produce(wire, "wire-large", batch([b"z" * 2000]))
    assert r.error_code == Errors.MESSAGE_TOO_LARGE


def test_zstd_below_produce_v7_is_unsupported(broker, wire):
    create_topic(broker, "wire-zstd")
    r = produce(wire, "wire-zstd", batch([b"z" * 50], compression=4), version=6)
    assert r.error_code == Errors.UNSUPPORTED_COMPRESSION_TYPE
    assert produce(wire, "wire-zstd", batch([b"z"], compression=4), version=7).error_code == 0


def test_produce_v2_is_unsupported_version(broker, wire):
    create_topic(broker, "wire-v2")
    r = produce(wire, "wire-v2", None, version=2)
    assert r.error_code == Errors.UNSUPPORTED_VERSION


def test_unknown_topic_and_bad_acks(broker, wire):
    assert produce(wire, "wire-nope", batch([b"a"])).error_code == \
        Errors.UNKNOWN_TOPIC_OR_PARTITION
    create_topic(broker, "wire-acks")
    assert produce(wire, "wire-acks", batch([b"a"]), acks=2).error_code == \
        Errors.INVALID_REQUIRED_ACKS


def _produce_many(wire, version, topics, tagged=False):
    """One Produce request of `topics` ([(topic, [(partition, records)])], acks=1); its
    answer's frame. tagged (v9+): with an unknown tagged field at the request's end, which
    the compiled reader leaves to the generic path and the generic decoder skips."""
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 5000, "topic_data": [
        {"name": name, "partition_data": [{"index": i, "records": r} for i, r in parts]}
        for name, parts in topics]}
    wire.cid += 1
    frame = protocol.encode_request(ApiKey.PRODUCE, version, wire.cid, "wire-test", body)
    if tagged:
        assert frame[-1] == 0
        frame = frame[:-1] + b"\x01\x07\x02ab"
    wire.send_raw(struct.pack(">i", len(frame)) + frame)
    return wire.recv_frame()


def _answers(version, frame):
    _, resp = protocol.decode_response(ApiKey.PRODUCE, version, frame)
    return [(t.name, [(p.index, p.error_code, p.base_offset) for p in t.partition_responses])
            for t in resp.responses]


@pytest.mark.parametrize("version", [3, 7, 9, 10, 11])
def test_a_produce_of_many_partitions_answers_each_in_the_requests_order(broker, wire, version):
    """What kafka-python and the Java client send (every partition a broker leads in one
    request) is read and answered in compiled code; an unknown partition or a corrupt
    batch among them is answered for itself while the others are appended, and the
    batches are stored as sent. v9+: the answers are byte for byte those of the generic
    path for the same requests to twin topics (names of the same length)."""
    corrupt = bytearray(batch([b"bad"]))
    corrupt[-1] ^= 0x01
    sent = batch([b"a0", b"a0'"])
    frames = {}
    for kind in ("many", "MANY") if version >= 9 else ("many",):
        a, b = f"wire-{kind}-a{version}", f"wire-{kind}-b{version}"
        create_topic(broker, a, partitions=3)
        create_topic(broker, b, partitions=2)
        rounds = [[(a, [(2, batch([b"a2"])), (0, sent)]), (b, [(1, batch([b"b1"]))])],
                  [(a, [(0, batch([b"x"])), (7, batch([b"y"]))]),
                   (b, [(1, bytes(corrupt)), (0, batch([b"b0"]))])]]
        frames[kind] = [_produce_many(wire, version, topics, tagged=kind == "MANY")
                        for topics in rounds]
    a, b = f"wire-many-a{version}", f"wire-many-b{version}"
    assert [_answers(version, f) for f in frames["many"]] == [
        [(a, [(2, 0, 0), (0, 0, 0)]), (b, [(1, 0, 0)])],
        [(a, [(0, 0, 2), (7, Errors.UNKNOWN_TOPIC_OR_PARTITION, -1)]),
         (b, [(1, Errors.CORRUPT_MESSAGE, -1), (0, 0, 0)])]]
    if version >= 9:   # (after the correlation id)
        assert [f[4:] for f in frames["many"]] == [
            f[4:].replace(b"wire-MANY", b"wire-many") for f in frames["MANY"]]
    wire.send(ApiKey.FETCH, 4, fetch_body(a, 0, 0, min_bytes=0))
    _, resp = protocol.decode_response(ApiKey.FETCH, 4, wire.recv_frame())
    stored = bytes(resp.responses[0].partitions[0].records)
    # from the magic byte on (offset and leader epoch are the broker's), as sent
    assert stored[16:len(sent)] == bytes(sent)[16:]


def test_many_partitions_with_acks_zero_answer_nothing_and_an_error_closes(broker, wire):
    create_topic(broker, "wire-many-acks0", partitions=2)
    topics = [{"name": "wire-many-acks0", "partition_data": [
        {"index": 0, "records": batch([b"p0"])}, {"index": 1, "records": batch([b"p1"])}]}]
    wire.send(ApiKey.PRODUCE, 9, {"transactional_id": None, "acks": 0, "timeout_ms": 5000,
                                  "topic_data": topics})
    # the next answer on this connection is ListOffsets': both partitions took their record
    resp = wire.call(ApiKey.LIST_OFFSETS, 1, {"replica_id": -1, "topics": [
        {"name": "wire-many-acks0", "partitions": [{"partition_index": i, "timestamp": -1}
                                                   for i in (0, 1)]}]})
    assert [p.offset for p in resp.topics[0].partitions] == [1, 1]
    topics[0]["partition_data"].append({"index": 5, "records": batch([b"nowhere"])})
    wire.send(ApiKey.PRODUCE, 9, {"transactional_id": None, "acks": 0, "timeout_ms": 5000,
                                  "topic_data": topics})
    assert wire.closed_by_broker()
    assert healthy(broker)


def test_acks_zero_gets_no_response(broker, wire):
    create_topic(broker, "wire-acks0")
    wire.send(ApiKey.PRODUCE, 7, {
        "transactional_id": None, "acks": 0, "timeout_ms": 5000,
        "topic_data": [{"name": "wire-acks0", "partition_data": [
            {"index": 0, "records": batch([b"fire-and-forget"])}]}]})
    # The next response on this connection is the ListOffsets answer, not a Produce one.
    resp = wire.call(ApiKey.LIST_OFFSETS, 1, {"replica_id": -1, "topics": [
        {"name": "wire-acks0", "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
    assert resp.topics[0].partitions[0].offset == 1


def test_min_insync_replicas_above_one_fails_acks_all(broker, wire):
    create_topic(broker, "wire-isr", configs={"min.insync.replicas": "2"})
    assert produce(wire, "wire-isr", batch([b"a"]), acks=-1).error_code == \
        Errors.NOT_ENOUGH_REPLICAS
    assert produce(wire, "wire-isr", batch([b"a"]), acks=1).error_code == Errors.NONE


# ---------------------------------------------------------------------------- idempotence
def test_idempotent_sequences(broker, wire):
    create_topic(broker, "wire-idem")
    pid, epoch = init_pid(wire)
    assert init_pid(wire)[0] != pid
    first = batch([b"a", b"b"], producer_id=pid, epoch=epoch, seq=0)
    r1 = produce(wire, "wire-idem", first)
    assert r1.error_code == 0
    r2 = produce(wire, "wire-idem", batch([b"c"], producer_id=pid, epoch=epoch, seq=2))
    assert r2.error_code == 0 and r2.base_offset == r1.base_offset + 2
    # a retried duplicate gets its original offset and is not appended again
    dup = produce(wire, "wire-idem", first)
    assert dup.error_code == 0 and dup.base_offset == r1.base_offset
    # a gap
    gap = produce(wire, "wire-idem", batch([b"d"], producer_id=pid, epoch=epoch, seq=9))
    assert gap.error_code == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    # an old epoch after a newer one
    produce(wire, "wire-idem", batch([b"e"], producer_id=pid, epoch=epoch + 1, seq=0))
    old = produce(wire, "wire-idem", batch([b"f"], producer_id=pid, epoch=epoch, seq=3))
    assert old.error_code == Errors.INVALID_PRODUCER_EPOCH
    # an unknown producer that does not start at 0
    unk = produce(wire, "wire-idem", batch([b"g"], producer_id=pid + 500, epoch=0, seq=7))
    assert unk.error_code == Errors.UNKNOWN_PRODUCER_ID
    end = wire.call(ApiKey.LIST_OFFSETS, 1, {"replica_id": -1, "topics": [
        {"name": "wire-idem", "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
    assert end.topics[0].partitions[0].offset == r1.base_offset + 4


# ---------------------------------------------------------------------------- fetch
def test_parked_fetch_is_woken_by_append_and_does_not_block_others(broker):
    create_topic(broker, "wire-longpoll")
    fetcher = Wire(broker)
    other = Wire(broker)
    try:
        # max_wait_ms far beyond the connection's read timeout: an answer at all means
        # the append woke the parked fetch.
        fetcher.send(ApiKey.FETCH, 11, fetch_body("wire-longpoll", 0, 600_000))
        time.sleep(0.3)
        # another connection is served while the fetch is parked
        assert other.call(ApiKey.API_VERSIONS, 2, {}).error_code == 0
        assert produce(other, "wire-longpoll", batch([b"wake"])).error_code == 0
        frame = fetcher.recv_frame()
        _, resp = protocol.decode_response(ApiKey.FETCH, 11, frame)
        p = resp.responses[0].partitions[0]
        assert p.error_code == 0 and p.high_watermark == 1
        assert p.last_stable_offset == 1 and p.aborted_transactions == []
        assert p.preferred_read_replica == -1 and resp.session_id == 0
        assert len(bytes(p.records)) > 0
    finally:
        fetcher.close()
        other.close()


def test_fetch_times_out_empty_and_out_of_range(broker, wire):
    create_topic(broker, "wire-fetch-empty")
    t0 = time.monotonic()
    resp = wire.call(ApiKey.FETCH, 11, fetch_body("wire-fetch-empty", 0, 300))
    assert time.monotonic() - t0 >= 0.25
    p = resp.responses[0].partitions[0]
    assert p.error_code == 0 and not p.records
    resp = wire.call(ApiKey.FETCH, 11, fetch_body("wire-fetch-empty", 42, 0))
    assert resp.responses[0].partitions[0].error_code == Errors.OFFSET_OUT_OF_RANGE


@pytest.mark.parametrize("isolation", [0, 1])
def test_one_partition_fetch_answers_as_the_generic_path(broker, wire, isolation):
    """A consumer's sessionless fetch of one partition is answered in compiled code
    (fastlog.protocol._fetch); the same request with a forgotten topic (which a
    sessionless fetch ignores) takes the generic path: the answers are byte-identical,
    from the middle of the log, at its end and past it. Fetch v12 (flexible) also with
    the partition's last fetched epoch (KIP-595): ours (records), or a newer one (the
    generic path's diverging epoch, as for a fetch past our end in ours). Fetch v13-v17
    name the topic by its id (KIP-516), and the forgotten topic by id too."""
    topic = f"wire-fast-fetch-{isolation}"
    create_topic(broker, topic)
    for i in range(5):
        assert produce(wire, topic, batch([b"v%d-%d" % (i, j) for j in range(3)])
                       ).error_code == 0
    epoch = wire.call(ApiKey.METADATA, 9, {"topics": [{"name": topic}]}
                      ).topics[0].partitions[0].leader_epoch
    tid = topic_id(wire, topic)
    cases = [(v, -1) for v in range(7, 12)] + [(12, -1), (12, epoch), (12, epoch + 1)]
    cases += [(v, -1) for v in range(13, 18)] + [(16, epoch), (16, epoch + 1)]
    for version, last_fetched_epoch in cases:
        for offset in (0, 4, 15, 99):
            answers = []
            for forgotten in ([], [{"topic": "other", "topic_id": tid, "partitions": [0]}]):
                body = fetch_body(topic, offset, 0, min_bytes=0)
                body["topics"][0]["topic_id"] = tid
                body["isolation_level"] = isolation
                body["forgotten_topics_data"] = forgotten
                body["topics"][0]["partitions"][0]["last_fetched_epoch"] = last_fetched_epoch
                wire.send(ApiKey.FETCH, version, body)
                answers.append(wire.recv_frame())
            # (after the correlation id)
            assert answers[0][4:] == answers[1][4:], (version, last_fetched_epoch, offset)
            _, resp = protocol.decode_response(ApiKey.FETCH, version, answers[0])
            part = resp.responses[0].partitions[0]
            if last_fetched_epoch > epoch:   # an epoch we never had: Kafka's (-1, -1)
                assert part.diverging_epoch.epoch == -1 and not part.records
            elif last_fetched_epoch == epoch and offset == 99:   # past our end in it
                assert (part.diverging_epoch.epoch, part.diverging_epoch.end_offset) == (epoch, 15)
            elif offset == 99:
                assert part.error_code == Errors.OFFSET_OUT_OF_RANGE
            else:
                got = _codec.read_records(bytes(part.records or b""))
                assert len(got) == 15 - offset // 3 * 3 and part.high_watermark == 15


def test_zstd_only_to_fetch_v10_and_up(broker, wire):
    create_topic(broker, "wire-zstd-fetch")
    assert produce(wire, "wire-zstd-fetch", batch([b"z"], compression=4)).error_code == 0
    old = wire.call(ApiKey.FETCH, 9, fetch_body("wire-zstd-fetch", 0, 0))
    assert old.responses[0].partitions[0].error_code == Errors.UNSUPPORTED_COMPRESSION_TYPE
    new = wire.call(ApiKey.FETCH, 10, fetch_body("wire-zstd-fetch", 0, 0))
    assert new.responses[0].partitions[0].error_code == 0


def test_good_client_unaffected_by_concurrent_garbage(broker):
    create_topic(broker, "wire-concurrent")
    stop = threading.Event()
    errors = []

    def garbage():
        n = 0
        while not stop.is_set() and n < 200:
            n += 1
            try:
                s = socket.create_connection((broker.host, broker.port), timeout=2)
                s.sendall(b"GET /" + bytes([n % 256]) * 50 + b" HTTP/1.0\r\n\r\n")
                s.recv(10)
                s.close()
            except OSError as e:
                errors.append(e)

    t = threading.Thread(target=garbage)
    t.start()
    try:
        w = Wire(broker)
        for i in range(50):
            assert produce(w, "wire-concurrent", batch([b"ok-%d" % i])).error_code == 0
        w.close()
    finally:
        stop.set()
        t.join(30)
    assert healthy(broker)


def test_log_append_time_topic_rewrites_timestamp_and_crc(broker, wire):
    create_topic(broker, "wire-lat", configs={"message.timestamp.type": "LogAppendTime"})
    old_ts = 1_000_000_000_000
    b = _codec.build_batch([(old_ts, None, b"v1"), (old_ts + 5, None, b"v2")])
    before = int(time.time() * 1000)
    r = produce(wire, "wire-lat", b)
    assert r.error_code == 0 and r.log_append_time_ms >= before
    resp = wire.call(ApiKey.FETCH, 11, fetch_body("wire-lat", 0, 0))
    data = bytes(resp.responses[0].partitions[0].records)
    h = _codec.validate_batch(data)  # the CRC was recomputed
    assert h.timestamp_type == 1 and h.max_timestamp == r.log_append_time_ms


def test_offset_for_leader_epoch(broker, wire):
    create_topic(broker, "wire-epoch")
    produce(wire, "wire-epoch", batch([b"a", b"b", b"c"]))
    r = wire.call(ApiKey.OFFSET_FOR_LEADER_EPOCH, 3, {"replica_id": -1, "topics": [
        {"topic": "wire-epoch", "partitions": [
            {"partition": 0, "current_leader_epoch": 0, "leader_epoch": 0},
            {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 7},
            {"partition": 0, "current_leader_epoch": 5, "leader_epoch": 0},
            {"partition": 3, "current_leader_epoch": -1, "leader_epoch": 0}]}]})
    parts = r.topics[0].partitions
    assert (parts[0].error_code, parts[0].leader_epoch, parts[0].end_offset) == (0, 0, 3)
    assert (parts[1].leader_epoch, parts[1].end_offset) == (-1, -1)
    assert parts[2].error_code == Errors.UNKNOWN_LEADER_EPOCH
    assert parts[3].error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION


def test_acks_zero_error_closes_the_connection(broker, wire):
    wire.send(ApiKey.PRODUCE, 7, {
        "transactional_id": None, "acks": 0, "timeout_ms": 5000,
        "topic_data": [{"name": "wire-no-such-topic", "partition_data": [
            {"index": 0, "records": batch([b"x"])}]}]})
    assert wire.closed_by_broker()


def test_init_producer_id_v3_bumps_the_epoch(broker, wire):
    r = wire.call(ApiKey.INIT_PRODUCER_ID, 3, {"transactional_id": None,
                                               "transaction_timeout_ms": 60000,
                                               "producer_id": -1, "producer_epoch": -1})
    assert r.error_code == 0 and r.producer_epoch == 0
    r2 = wire.call(ApiKey.INIT_PRODUCER_ID, 3, {"transactional_id": None,
                                                "transaction_timeout_ms": 60000,
                                                "producer_id": r.producer_id,
                                                "producer_epoch": r.producer_epoch})
    assert (r2.producer_id, r2.producer_epoch) == (r.producer_id, 1)
    r3 = wire.call(ApiKey.INIT_PRODUCER_ID, 1, {"transactional_id": "txn",
                                                "transaction_timeout_ms": 60000})
    # a transactional id: the transaction coordinator hands out its own producer id
    assert r3.error_code == 0 and r3.producer_epoch == 0
    assert r3.producer_id not in (r.producer_id, -1)


def test_timestamps_too_far_in_the_future_are_invalid(broker, wire):
    create_topic(broker, "wire-ts")
    future = int(time.time() * 1000) + 2 * 3600 * 1000  # after.max.ms defaults to 1 h
    r = produce(wire, "wire-ts", _codec.build_batch([(future, None, b"later")]))
    assert r.error_code == Errors.INVALID_TIMESTAMP
    create_topic(broker, "wire-ts-old", configs={"message.timestamp.before.max.ms": "1000"})
    old = int(time.time() * 1000) - 60_000
    r = produce(wire, "wire-ts-old", _codec.build_batch([(old, None, b"earlier")]))
    assert r.error_code == Errors.INVALID_TIMESTAMP
    assert produce(wire, "wire-ts-old", batch([b"now"])).error_code == 0


def test_client_posing_as_a_follower_is_refused(broker, wire):
    create_topic(broker, "wire-follower")
    for replica_id in (0, 5):
        body = fetch_body("wire-follower", 0, 0)
        body["replica_id"] = replica_id
        r = wire.call(ApiKey.FETCH, 11, body)
        assert r.responses[0].partitions[0].error_code == Errors.NOT_LEADER_OR_FOLLOWER


def _stored(wire, topic):
    resp = wire.call(ApiKey.FETCH, 11, fetch_body(topic, 0, 0))
    data = bytes(resp.responses[0].partitions[0].records)
    return _codec.scan_batches(data).batches, _codec.read_records(data)


@pytest.mark.parametrize("config, sent, stored", [
    ("zstd", 0, 4), ("gzip", 3, 1), ("uncompressed", 3, 0), ("lz4", 3, 3), ("producer", 2, 2)])
def test_topic_compression_type_decides_the_stored_codec(broker, wire, config, sent, stored):
    topic = f"wire-codec-{config}-{sent}"
    create_topic(broker, topic, configs={"compression.type": config})
    values = [b"v%d-" % i + b"z" * i for i in range(30)]
    r = produce(wire, topic, batch(values, compression=sent, producer_id=4, epoch=0, seq=0))
    assert r.error_code == 0 and r.base_offset == 0
    r = produce(wire, topic, batch([b"second"], compression=sent, producer_id=4, epoch=0, seq=30))
    assert r.error_code == 0 and r.base_offset == 30
    batches, records = _stored(wire, topic)
    assert [b.compression for b in batches] == [stored, stored]
    assert [(b.base_offset, b.producer_id, b.base_sequence) for b in batches] == [(0, 4, 0),
                                                                                 (30, 4, 30)]
    assert [r.value for r in records] == values + [b"second"]
    assert [r.offset for r in records] == list(range(31))


def test_recompressed_retry_is_still_a_duplicate(broker, wire):
    create_topic(broker, "wire-codec-retry", configs={"compression.type": "gzip"})
    b = batch([b"a", b"b"], producer_id=5, epoch=0, seq=0)
    assert produce(wire, "wire-codec-retry", b).base_offset == 0
    again = produce(wire, "wire-codec-retry", b)
    assert again.error_code == 0 and again.base_offset == 0
    batches, records = _stored(wire, "wire-codec-retry")
    assert len(batches) == 1 and [r.value for r in records] == [b"a", b"b"]


def test_a_batch_over_max_message_bytes_once_recompressed_is_too_large(broker, wire):
    # Compressible values: 50 KB of them fit under max.message.bytes as zstd, not once
    # the topic stores them uncompressed (Kafka checks the size after recompression).
    create_topic(broker, "wire-codec-large", configs={"compression.type": "uncompressed",
                                                       "max.message.bytes": "20000"})
    r = produce(wire, "wire-codec-large", batch([b"a" * 1000] * 50, compression=4))
    assert r.error_code == Errors.MESSAGE_TOO_LARGE
    assert produce(wire, "wire-codec-large", batch([b"a" * 100] * 5, compression=4)).error_code == 0


def test_topic_compression_level_applies_to_recompressed_batches(broker, wire):
    # Compressible records under zstd at level 1 and at level 19: the stronger level
    # stores fewer bytes, the records read back the same.
    values = [b"%05d-" % i + b"the same words again and again " * 3 for i in range(400)]
    sizes = {}
    for level in (1, 19):
        topic = f"wire-codec-zstd-{level}"
        create_topic(broker, topic, configs={"compression.type": "zstd",
                                             "compression.zstd.level": str(level)})
        assert produce(wire, topic, batch(values)).error_code == 0
        batches, records = _stored(wire, topic)
        assert [b.compression for b in batches] == [4]
        assert [r.value for r in records] == values
        sizes[level] = batches[0].size
    assert sizes[19] < sizes[1]
