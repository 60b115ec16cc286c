"""Fetch sessions (KIP-227, fastlog/server/fetch_session.py) over the wire: a full fetch
creates one; incremental fetches answer only partitions with news; forgotten partitions
are dropped; a wrong epoch is 71, an unknown id 70; a full cache gives way as Kafka's
does; a session is bounded in size; and kafka-python's consumer, which uses sessions, reads
200 partitions through one."""

import time

import pytest

from fastlog import protocol
from fastlog.protocol import ApiKey, Errors
from tests.server.scrape import http_overrides, scrape
from tests.server.wire import Wire, batch, create_topic, produce

SESSIONS = "kafka_server_fetchsessioncache_numincrementalfetchsessions"
CACHED = "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached"
EVICTIONS = "kafka_server_fetchsessioncache_incrementalfetchsessionevictions_total"


def body(session_id, epoch, parts=(), forgotten=(), max_wait_ms=0, replica_id=-1):
    """A Fetch v11 body: `parts` is [(topic, partition, fetch_offset)], `forgotten` is
    [(topic, [partitions])]."""
    topics = {}
    for topic, partition, offset in parts:
        topics.setdefault(topic, []).append({
            "partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
            "log_start_offset": -1, "partition_max_bytes": 1 << 20})
    return {"replica_id": replica_id, "max_wait_ms": max_wait_ms, "min_bytes": 1,
            "max_bytes": 1 << 20, "isolation_level": 0, "session_id": session_id,
            "session_epoch": epoch,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            "forgotten_topics_data": [{"topic": t, "partitions": ps} for t, ps in forgotten],
            "rack_id": ""}


def answered(resp):
    """{(topic, partition): partition response} of a Fetch response."""
    return {(t.topic, p.partition_index): p for t in resp.responses for p in t.partitions}


@pytest.fixture
def wire(broker):
    w = Wire(broker)
    yield w
    w.close()


def test_incremental_fetches_answer_only_what_changed(broker, wire):
    create_topic(broker, "fs-inc", partitions=3)
    full = wire.call(ApiKey.FETCH, 11, body(0, 0, [("fs-inc", p, 0) for p in range(3)]))
    sid = full.session_id
    assert full.error_code == 0 and sid != 0
    assert set(answered(full)) == {("fs-inc", 0), ("fs-inc", 1), ("fs-inc", 2)}
    # nothing changed: an empty answer
    r = wire.call(ApiKey.FETCH, 11, body(sid, 1))
    assert r.error_code == 0 and r.session_id == sid and r.responses == []
    # new data in partition 1: only partition 1, with its records and high watermark
    assert produce(wire, "fs-inc", batch([b"a", b"b"]), partition=1).error_code == 0
    r = wire.call(ApiKey.FETCH, 11, body(sid, 2))
    got = answered(r)
    assert list(got) == [("fs-inc", 1)]
    assert got[("fs-inc", 1)].high_watermark == 2 and len(bytes(got[("fs-inc", 1)].records)) > 0
    # the consumer moves its offset: the request carries partition 1 alone, no news
    r = wire.call(ApiKey.FETCH, 11, body(sid, 3, [("fs-inc", 1, 2)]))
    assert r.error_code == 0 and r.responses == []
    # a parked incremental fetch is woken by an append and answers that partition only
    wire.send(ApiKey.FETCH, 11, body(sid, 4, max_wait_ms=600_000))
    time.sleep(0.2)
    other = Wire(broker)
    try:
        assert produce(other, "fs-inc", batch([b"c"]), partition=2).error_code == 0
    finally:
        other.close()
    _, r = protocol.decode_response(ApiKey.FETCH, 11, wire.recv_frame())
    assert list(answered(r)) == [("fs-inc", 2)]
    # partition 2 forgotten, partition 0 at offset 0 still cached: data in 2 is not answered
    r = wire.call(ApiKey.FETCH, 11, body(sid, 5, forgotten=[("fs-inc", [2])]))
    assert r.responses == []
    assert produce(wire, "fs-inc", batch([b"d"]), partition=2).error_code == 0
    assert produce(wire, "fs-inc", batch([b"e"]), partition=0).error_code == 0
    r = wire.call(ApiKey.FETCH, 11, body(sid, 6))
    assert list(answered(r)) == [("fs-inc", 0)]
    # an epoch -1 full fetch closes the session: its id is unknown afterwards
    r = wire.call(ApiKey.FETCH, 11, body(sid, -1, [("fs-inc", 0, 1)]))
    assert r.error_code == 0 and r.session_id == 0 and list(answered(r)) == [("fs-inc", 0)]
    r = wire.call(ApiKey.FETCH, 11, body(sid, 7))
    assert r.error_code == Errors.FETCH_SESSION_ID_NOT_FOUND


def test_errors_are_answered_every_time(broker, wire):
    create_topic(broker, "fs-err")
    full = wire.call(ApiKey.FETCH, 11, body(0, 0, [("fs-err", 0, 0), ("fs-err", 9, 0)]))
    sid = full.session_id
    assert answered(full)[("fs-err", 9)].error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
    for epoch in (1, 2):
        got = answered(wire.call(ApiKey.FETCH, 11, body(sid, epoch)))
        assert list(got) == [("fs-err", 9)]
        assert got[("fs-err", 9)].error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
    # forgetting the last partitions closes the session (Kafka: an empty session is removed)
    r = wire.call(ApiKey.FETCH, 11, body(sid, 3, forgotten=[("fs-err", [0, 9])]))
    assert r.error_code == 0 and r.session_id == 0
    assert wire.call(ApiKey.FETCH, 11, body(sid, 4)).error_code == Errors.FETCH_SESSION_ID_NOT_FOUND


def test_quiet_partitions_answer_when_anything_changes(broker, wire):
    """A consumer's session partitions that had nothing new are not read again until
    something changes: the log start (DeleteRecords), the topic itself (deleted), or
    what the consumer asks (its offset)."""
    create_topic(broker, "fs-quiet", partitions=2)
    for p in (0, 1):
        assert produce(wire, "fs-quiet", batch([b"a", b"b", b"c"]), partition=p).error_code == 0
    sid = wire.call(ApiKey.FETCH, 11, body(0, 0, [("fs-quiet", 0, 3), ("fs-quiet", 1, 3)])).session_id
    for epoch in (1, 2, 3):  # read once more after the full fetch, then quiet
        assert wire.call(ApiKey.FETCH, 11, body(sid, epoch)).responses == []
    r = wire.call(ApiKey.DELETE_RECORDS, 1, {"topics": [{"name": "fs-quiet", "partitions": [
        {"partition_index": 1, "offset": 2}]}], "timeout_ms": 5000})
    assert r.topics[0].partitions[0].error_code == 0
    got = answered(wire.call(ApiKey.FETCH, 11, body(sid, 4)))
    assert list(got) == [("fs-quiet", 1)] and got[("fs-quiet", 1)].log_start_offset == 2
    # the consumer rewinds partition 0: its records are answered
    got = answered(wire.call(ApiKey.FETCH, 11, body(sid, 5, [("fs-quiet", 0, 1)])))
    assert list(got) == [("fs-quiet", 0)] and len(bytes(got[("fs-quiet", 0)].records)) > 0
    r = wire.call(ApiKey.DELETE_TOPICS, 3, {"topic_names": ["fs-quiet"], "timeout_ms": 10000})
    assert r.responses[0].error_code == 0
    got = answered(wire.call(ApiKey.FETCH, 11, body(sid, 6)))
    assert {k: p.error_code for k, p in got.items()} == {
        ("fs-quiet", 0): Errors.UNKNOWN_TOPIC_OR_PARTITION,
        ("fs-quiet", 1): Errors.UNKNOWN_TOPIC_OR_PARTITION}


def test_wrong_epoch_and_unknown_id(broker, wire):
    create_topic(broker, "fs-epoch")
    sid = wire.call(ApiKey.FETCH, 11, body(0, 0, [("fs-epoch", 0, 0)])).session_id
    assert sid != 0
    r = wire.call(ApiKey.FETCH, 11, body(sid, 5))
    assert r.error_code == Errors.INVALID_FETCH_SESSION_EPOCH and r.responses == []
    # the right epoch still works after a wrong one; a replayed epoch is refused
    assert wire.call(ApiKey.FETCH, 11, body(sid, 1)).error_code == 0
    assert wire.call(ApiKey.FETCH, 11, body(sid, 1)).error_code == Errors.INVALID_FETCH_SESSION_EPOCH
    unknown = 1 if sid != 1 else 2
    r = wire.call(ApiKey.FETCH, 11, body(unknown, 1))
    assert r.error_code == Errors.FETCH_SESSION_ID_NOT_FOUND and r.responses == []
    # below version 7 there are no sessions: session id 0 in every answer
    old = wire.call(ApiKey.FETCH, 6, body(0, -1, [("fs-epoch", 0, 0)]))
    assert list(answered(old)) == [("fs-epoch", 0)]


def test_full_cache_gives_way_as_kafka(broker_factory):
    overrides, port = http_overrides()
    b = broker_factory({**overrides, "max.incremental.fetch.session.cache.slots": "1"})
    create_topic(b, "fs-cache")
    w = Wire(b)
    try:
        first = w.call(ApiKey.FETCH, 11, body(0, 0, [("fs-cache", 0, 0)])).session_id
        assert first != 0
        # full, and the one session is neither stale nor old: no room for another consumer
        r = w.call(ApiKey.FETCH, 11, body(0, 0, [("fs-cache", 0, 0)]))
        assert r.error_code == 0 and r.session_id == 0 and list(answered(r)) == [("fs-cache", 0)]
        assert w.call(ApiKey.FETCH, 11, body(first, 1)).error_code == 0
        # a follower's (privileged) session outranks a consumer's and evicts it
        follower = w.call(ApiKey.FETCH, 11, body(0, 0, [("fs-cache", 0, 0)], replica_id=1))
        assert follower.session_id not in (0, first)
        assert w.call(ApiKey.FETCH, 11, body(first, 2)).error_code == Errors.FETCH_SESSION_ID_NOT_FOUND
        m = scrape(port)
        assert m[(SESSIONS, frozenset())] == 1 and m[(CACHED, frozenset())] == 1
        assert m[(EVICTIONS, frozenset())] == 1
    finally:
        w.close()


def test_stale_session_gives_way(broker_factory):
    b = broker_factory({"max.incremental.fetch.session.cache.slots": "1",
                        "fastlog.fetch.session.eviction.ms": "300"})
    create_topic(b, "fs-stale")
    w = Wire(b)
    try:
        first = w.call(ApiKey.FETCH, 11, body(0, 0, [("fs-stale", 0, 0)])).session_id
        assert first != 0
        time.sleep(0.5)  # idle longer than the eviction time
        second = w.call(ApiKey.FETCH, 11, body(0, 0, [("fs-stale", 0, 0)])).session_id
        assert second not in (0, first)
        assert w.call(ApiKey.FETCH, 11, body(first, 1)).error_code == Errors.FETCH_SESSION_ID_NOT_FOUND
        assert w.call(ApiKey.FETCH, 11, body(second, 1)).error_code == 0
    finally:
        w.close()


def test_kafka_python_consumer_reads_200_partitions_through_a_session(broker_factory):
    """librdkafka (confluent-kafka) always fetches without a session (session id 0, epoch
    -1); kafka-python's consumer uses them (enable_incremental_fetch_sessions)."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    overrides, port = http_overrides()
    b = broker_factory(overrides)
    create_topic(b, "fs-200", partitions=200)
    producer = KafkaProducer(bootstrap_servers=b.bootstrap, linger_ms=5)
    expected = set()
    for i in range(1000):
        value = b"v%d" % i
        producer.send("fs-200", value=value, partition=i % 200)
        expected.add((i % 200, value))
    producer.flush(30)
    producer.close(10)
    consumer = KafkaConsumer(bootstrap_servers=b.bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, fetch_max_wait_ms=100,
                             max_partition_fetch_bytes=4096)
    try:
        consumer.assign([TopicPartition("fs-200", p) for p in range(200)])
        seen = set()
        sessions = 0
        deadline = time.monotonic() + 60
        while len(seen) < len(expected) and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=500).items():
                for r in records:
                    assert (tp.partition, r.value) not in seen
                    seen.add((tp.partition, r.value))
            sessions = max(sessions, scrape(port)[(SESSIONS, frozenset())])
        assert seen == expected
        assert sessions >= 1
        # the consumer forgets a partition while it holds unread records of it
        assert 0 < scrape(port)[(CACHED, frozenset())] <= 200
    finally:
        consumer.close()


def _request(session_id, epoch, partitions=(), forgotten=()):
    """A decoded Fetch request as fastlog.protocol gives it, for the session cache alone."""
    from types import SimpleNamespace as NS
    topics = [NS(topic="t", partitions=[NS(partition=p, fetch_offset=0, partition_max_bytes=1,
                                           current_leader_epoch=-1, last_fetched_epoch=-1,
                                           log_start_offset=-1)
                                        for p in partitions])] if partitions else []
    return NS(session_id=session_id, session_epoch=epoch, topics=topics,
              forgotten_topics_data=[NS(topic="t", partitions=list(forgotten))] if forgotten else [])


def _answers(topics):
    return [{"topic": t.topic, "partitions": [{
        "partition_index": fp.partition, "error_code": 0, "high_watermark": 0,
        "last_stable_offset": 0, "log_start_offset": 0, "preferred_read_replica": -1,
        "records": b""} for fp in t.partitions]} for t in topics]


def test_session_size_is_bounded(monkeypatch):
    from fastlog.server import fetch_session as fs

    monkeypatch.setattr(fs, "MAX_SESSION_PARTITIONS", 3)
    m = fs.FetchManager(10)
    ctx = m.new_context(_request(0, 0, range(4)), False, 0)
    assert ctx.respond(_answers(ctx.topics))[1] == 0  # too large: no session
    ctx = m.new_context(_request(0, 0, range(3)), False, 0)
    sid = ctx.respond(_answers(ctx.topics))[1]
    assert sid != 0 and m.cache.num_partitions == 3
    # growing past the bound closes the session
    ctx = m.new_context(_request(sid, 1, [7]), False, 1)
    assert ctx.error == Errors.FETCH_SESSION_ID_NOT_FOUND
    assert len(m.cache) == 0 and m.cache.num_partitions == 0


def test_a_session_by_topic_id_resolves_an_id_once_it_is_known():
    """Fetch v13+: a session keeps a partition of an id the broker does not know yet (its
    name None, answered UNKNOWN_TOPIC_ID by the fetch loop) and names it once the id is
    known (Kafka's maybeResolveUnknownName); forgotten topics are named by id."""
    from types import SimpleNamespace as NS

    from fastlog.server import fetch_session as fs

    known: dict[bytes, str] = {}
    tid = b"\x01" * 16

    def request(session_id, epoch, partitions=(), forgotten=()):
        topics = [NS(topic_id=tid, partitions=[NS(
            partition=p, fetch_offset=0, partition_max_bytes=1, current_leader_epoch=-1,
            last_fetched_epoch=-1, log_start_offset=-1) for p in partitions])]
        return NS(session_id=session_id, session_epoch=epoch,
                  topics=topics if partitions else [],
                  forgotten_topics_data=[NS(topic_id=tid, partitions=list(forgotten))]
                  if forgotten else [])

    m = fs.FetchManager(10)
    ctx = m.new_context(request(0, 0, [0, 1]), False, 0, 13, known.get)
    assert [(t.topic, t.topic_id) for t in ctx.topics] == [(None, tid)]
    sid = ctx.respond(_answers(ctx.topics))[1]
    assert sid != 0 and m.cache.get(sid).uses_topic_ids
    known[tid] = "later"
    ctx = m.new_context(request(sid, 1), False, 1, 13, known.get)
    assert [(t.topic, t.topic_id, len(t.partitions)) for t in ctx.topics] == [("later", tid, 2)]
    ctx = m.new_context(request(sid, 2, forgotten=[1]), False, 2, 13, known.get)
    assert [cp.partition for t in ctx.topics for cp in t.partitions] == [0]
    # the same session asked with topic names (v12): Kafka's FETCH_SESSION_TOPIC_ID_ERROR
    assert m.new_context(request(sid, 3), False, 3, 12).error == \
        Errors.FETCH_SESSION_TOPIC_ID_ERROR
