"""Fetch v13-v16 (fastlog/server/apis.py handle_fetch, fastlog/server/fetch_session.py):
topics named by id (KIP-516), an unknown id answered UNKNOWN_TOPIC_ID, fetch sessions keyed
by topic id (incremental answers, topics forgotten by id, a request naming topics the other
way answered FETCH_SESSION_TOPIC_ID_ERROR), a topic deleted and recreated under its name
seen by a session (INCONSISTENT_TOPIC_ID for the old id, the new id read), v15's
replica_state (KIP-903) and librdkafka reading through v16."""

import uuid
from contextlib import closing

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from fastlog.protocol import ApiKey, Errors
from tests.server.wire import Wire, batch, create_topic, produce, topic_id

ZERO = bytes(16)



def _fetch(w, session_id, epoch, parts=(), forgotten=(), version=13, replica_state=None):
    """A Fetch v13+ body: `parts` is [(topic id, partition, fetch_offset)], `forgotten`
    is [(topic id, [partitions])]."""
    topics = {}
    for tid, partition, offset in parts:
        topics.setdefault(tid, []).append({
            "partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
            "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 20})
    return w.call(ApiKey.FETCH, version, {
        "replica_state": replica_state, "max_wait_ms": 0, "min_bytes": 0,
        "max_bytes": 1 << 20, "isolation_level": 0, "session_id": session_id,
        "session_epoch": epoch,
        "topics": [{"topic_id": t, "partitions": ps} for t, ps in topics.items()],
        "forgotten_topics_data": [{"topic_id": t, "partitions": ps} for t, ps in forgotten],
        "rack_id": ""})


def _answered(resp):
    """{(topic id, partition): partition response} of a Fetch v13+ response."""
    return {(bytes(t.topic_id), p.partition_index): p
            for t in resp.responses for p in t.partitions}


def test_fetch_by_topic_id_and_unknown_ids(broker):
    with closing(Wire(broker)) as wire:
        create_topic(broker, "tid-read", partitions=2)
        assert produce(wire, "tid-read", batch([b"a", b"b"])).error_code == 0
        tid = topic_id(wire, "tid-read")
        assert tid != ZERO
        unknown = uuid.uuid4().bytes
        for version in (13, 14, 15, 16, 17):
            r = _fetch(wire, 0, -1, [(tid, 0, 0), (tid, 1, 0), (unknown, 0, 0), (ZERO, 3, 0)],
                       version=version)
            assert r.error_code == 0
            got = _answered(r)
            assert got[(tid, 0)].error_code == 0 and got[(tid, 0)].high_watermark == 2
            assert len(bytes(got[(tid, 0)].records)) > 0
            assert got[(tid, 1)].error_code == 0 and got[(tid, 1)].high_watermark == 0
            assert got[(unknown, 0)].error_code == Errors.UNKNOWN_TOPIC_ID
            assert got[(ZERO, 3)].error_code == Errors.UNKNOWN_TOPIC_ID
        # the broker serves on after them
        assert produce(wire, "tid-read", batch([b"c"])).error_code == 0


def test_sessions_by_topic_id(broker):
    with closing(Wire(broker)) as wire:
        create_topic(broker, "tid-sess", partitions=3)
        tid = topic_id(wire, "tid-sess")
        unknown = uuid.uuid4().bytes
        full = _fetch(wire, 0, 0, [(tid, p, 0) for p in range(3)] + [(unknown, 0, 0)])
        sid = full.session_id
        assert full.error_code == 0 and sid != 0
        assert set(_answered(full)) == {(tid, 0), (tid, 1), (tid, 2), (unknown, 0)}
        # nothing changed: only the unknown id, answered with its error every time
        r = _fetch(wire, sid, 1)
        assert r.error_code == 0 and r.session_id == sid
        assert {k: p.error_code for k, p in _answered(r).items()} == {
            (unknown, 0): Errors.UNKNOWN_TOPIC_ID}
        # forgotten by id; new data in partition 1: only partition 1
        assert produce(wire, "tid-sess", batch([b"x"]), partition=1).error_code == 0
        r = _fetch(wire, sid, 2, forgotten=[(unknown, [0])])
        got = _answered(r)
        assert set(got) == {(tid, 1)} and got[(tid, 1)].high_watermark == 1
        # partition 2 forgotten: its new data is not answered, partition 0's is
        assert produce(wire, "tid-sess", batch([b"y"]), partition=2).error_code == 0
        assert produce(wire, "tid-sess", batch([b"z"]), partition=0).error_code == 0
        # (partition 1 now asked from its new end)
        r = _fetch(wire, sid, 3, [(tid, 1, 1)], forgotten=[(tid, [2])])
        assert set(_answered(r)) == {(tid, 0)}
        # a request naming topics by name (v12) in this session: Kafka's error 106
        r = wire.call(ApiKey.FETCH, 12, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": sid, "session_epoch": 4, "topics": [],
            "forgotten_topics_data": [], "rack_id": ""})
        assert r.error_code == Errors.FETCH_SESSION_TOPIC_ID_ERROR and r.responses == []
        # and the other way round: a v12 session answered 106 to a v13 request
        r = wire.call(ApiKey.FETCH, 12, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": 0,
            "topics": [{"topic": "tid-sess", "partitions": [{
                "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                "last_fetched_epoch": -1, "log_start_offset": -1,
                "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""})
        named = r.session_id
        assert r.error_code == 0 and named != 0
        r = _fetch(wire, named, 1)
        assert r.error_code == Errors.FETCH_SESSION_TOPIC_ID_ERROR


def test_topic_recreated_under_its_name_seen_by_a_session(broker):
    with closing(Wire(broker)) as wire:
        create_topic(broker, "tid-again")
        assert produce(wire, "tid-again", batch([b"old1", b"old2"])).error_code == 0
        old = topic_id(wire, "tid-again")
        full = _fetch(wire, 0, 0, [(old, 0, 2)])
        sid = full.session_id
        assert sid != 0 and _answered(full)[(old, 0)].error_code == 0
        r = wire.call(ApiKey.DELETE_TOPICS, 3, {"topic_names": ["tid-again"], "timeout_ms": 10000})
        assert r.responses[0].error_code == 0
        create_topic(broker, "tid-again")
        new = topic_id(wire, "tid-again")
        assert new not in (old, ZERO)
        assert produce(wire, "tid-again", batch([b"new"])).error_code == 0
        # the session's partition has the old id: Kafka's INCONSISTENT_TOPIC_ID
        r = _fetch(wire, sid, 1)
        assert r.error_code == 0
        assert {k: p.error_code for k, p in _answered(r).items()} == {
            (old, 0): Errors.INCONSISTENT_TOPIC_ID}
        # the client swaps the ids in its session: the new topic's record, from offset 0
        r = _fetch(wire, sid, 2, [(new, 0, 0)], forgotten=[(old, [0])])
        got = _answered(r)
        assert set(got) == {(new, 0)} and got[(new, 0)].error_code == 0
        assert got[(new, 0)].high_watermark == 1 and b"new" in bytes(got[(new, 0)].records)
        # a new request naming the old id: an id no topic has
        r = _fetch(wire, 0, -1, [(old, 0, 0)])
        assert _answered(r)[(old, 0)].error_code == Errors.UNKNOWN_TOPIC_ID


def test_v15_replica_state_names_the_replica(broker):
    with closing(Wire(broker)) as wire:
        create_topic(broker, "tid-rs")
        assert produce(wire, "tid-rs", batch([b"a"])).error_code == 0
        tid = topic_id(wire, "tid-rs")
        # a consumer (no replica_state, or replica id -1) reads up to the high watermark
        for state in (None, {"replica_id": -1, "replica_epoch": -1}):
            part = _answered(_fetch(wire, 0, -1, [(tid, 0, 0)], version=15,
                                    replica_state=state))[(tid, 0)]
            assert part.error_code == 0 and len(bytes(part.records)) > 0
        # a replica id that is no replica of the partition may not fetch as a follower
        part = _answered(_fetch(wire, 0, -1, [(tid, 0, 0)], version=15,
                                replica_state={"replica_id": 77, "replica_epoch": 3}))[(tid, 0)]
        assert part.error_code == Errors.NOT_LEADER_OR_FOLLOWER


def test_librdkafka_consumes_through_fetch_by_topic_id(broker):
    topic = f"tid-rd-{uuid.uuid4().hex[:8]}"
    create_topic(broker, topic, partitions=3)
    w = Wire(broker)
    try:
        for p in range(3):
            values = [b"p%d-%d" % (p, i) for i in range(20)]
            assert produce(w, topic, batch(values), partition=p).error_code == 0
    finally:
        w.close()
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{topic}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 100})
    got = []
    try:
        c.subscribe([topic])
        for _ in range(120):  # bounded: 120 polls of at most 0.5 s
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
            if len(got) == 60:
                break
    finally:
        c.close()
    assert sorted(got) == sorted(b"p%d-%d" % (p, i) for p in range(3) for i in range(20))


def test_librdkafka_consumer_follows_a_topic_recreated_under_its_name(broker):
    """librdkafka fetches by topic id; when the topic is deleted and created again it
    sees the new id in Metadata and reads the new topic by it. (librdkafka 2.16 keeps its
    position across the change, offset 1 here, as it does against Kafka: the new topic's
    record at offset 0 is not read, those after it are.)"""
    topic = f"tid-re-{uuid.uuid4().hex[:8]}"
    create_topic(broker, topic)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0,
                  "topic.metadata.refresh.interval.ms": 500})
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{topic}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 100, "topic.metadata.refresh.interval.ms": 500})

    def read(want, polls=120):  # bounded: `polls` polls of at most 0.5 s
        got = []
        for _ in range(polls):
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
            if want <= set(got):
                break
        return set(got)

    try:
        c.subscribe([topic])
        p.produce(topic, b"old")
        assert p.flush(20) == 0
        assert read({b"old"}) >= {b"old"}
        admin.delete_topics([topic], operation_timeout=10)[topic].result(15)
        create_topic(broker, topic)
        for value in (b"new0", b"new1", b"new2"):
            p.produce(topic, value)
        assert p.flush(20) == 0
        assert read({b"new1", b"new2"}) == {b"new1", b"new2"}
    finally:
        c.close()
