"""Flexible (KIP-482) versions of the core APIs against a real broker: librdkafka
(confluent-kafka) and kafka-python negotiate the highest versions both sides speak —
Produce 9-10, Fetch 12, Metadata 12-13, the group APIs' flexible versions — and produce,
consume and commit as before (the broker's per-version request counts show what was
used); and what those versions add does what Kafka does: topic ids in Metadata (v10+,
kept across a restart) and topics asked for by id (v12+), Fetch v12's diverging epoch,
ListOffsets v8-v9's local-start and tiered timestamps, CreateTopics v5-v7's answer of what
the topic got (its id from v7), DeleteTopics v6 by name or id, and the batched versions:
OffsetFetch v8-v9 of several groups, FindCoordinator v4 of several keys; JoinGroup v9 tells a
restarted static leader to skip the assignment (KIP-814)."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from fastlog.protocol import ApiKey, Errors
from fastlog.testing import BrokerProcess
from tests.server.group.test_group_wire import join_body
from tests.server.scrape import http_overrides, scrape
from tests.server.test_confluent_kafka import create
from tests.server.wire import Wire, create_topic, healthy

REQ = "kafka_network_requestmetrics_requests_total"


@pytest.fixture(scope="module")
def fbroker(tmp_path_factory):
    """One broker with the HTTP endpoint (its port as .http_port)."""
    props, port = http_overrides()
    b = BrokerProcess(tmp_path_factory.mktemp("flex"), props)
    b.start()
    b.http_port = port
    yield b
    b.stop()


def _versions(broker) -> dict[tuple[str, int], float]:
    """{(API name, version): requests served so far}."""
    out = {}
    for (name, labels), v in scrape(broker.http_port).items():
        if name == REQ:
            lab = dict(labels)
            out[(lab["request"], int(lab["version"]))] = v
    return out


def _used(before, after) -> set[tuple[str, int]]:
    return {k for k, v in after.items() if v > before.get(k, 0)}


def test_librdkafka_negotiates_the_flexible_versions(fbroker):
    topic = f"rd-{uuid.uuid4().hex[:8]}"
    create(fbroker, topic, partitions=2)
    before = _versions(fbroker)
    p = Producer({"bootstrap.servers": fbroker.bootstrap, "linger.ms": 5,
                  "enable.idempotence": True})
    reports = []
    for i in range(200):
        p.produce(topic, value=b"v%d" % i, key=b"k%d" % (i % 7),
                  on_delivery=lambda e, m: reports.append(e))
    assert p.flush(30) == 0 and len(reports) == 200 and set(reports) == {None}
    c = Consumer({"bootstrap.servers": fbroker.bootstrap, "group.id": f"g-{topic}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 200 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
        assert sorted(got) == sorted(b"v%d" % i for i in range(200))
        c.commit(asynchronous=False)
        committed = c.committed([c.assignment()[0]], timeout=10)
        assert committed[0].offset > 0
    finally:
        c.close()
    used = _used(before, _versions(fbroker))
    # librdkafka 2.16's highest: Produce 10, Fetch 16 (topics by id, KIP-516),
    # Metadata 13, OffsetCommit 9, OffsetFetch 9 (the groups array of v8+)
    for api, version in (("Produce", 10), ("Fetch", 16), ("Metadata", 13),
                         ("OffsetCommit", 9), ("OffsetFetch", 9), ("ApiVersions", 3)):
        assert (api, version) in used, (api, version, sorted(used))
    assert not {k for k in used if k[0] in ("Produce", "Fetch") and k[1] < 10}


def test_kafka_python_negotiates_the_flexible_versions(fbroker):
    topic = f"kp-{uuid.uuid4().hex[:8]}"
    create(fbroker, topic, partitions=1)
    before = _versions(fbroker)
    prod = KafkaProducer(bootstrap_servers=fbroker.bootstrap, linger_ms=5)
    try:
        metas = [prod.send(topic, b"x%d" % i) for i in range(50)]
        prod.flush(30)
        assert [m.get(10).offset for m in metas] == list(range(50))
    finally:
        prod.close(10)
    cons = KafkaConsumer(topic, bootstrap_servers=fbroker.bootstrap, group_id=f"g-{topic}",
                         auto_offset_reset="earliest", enable_auto_commit=False,
                         consumer_timeout_ms=20000)
    try:
        got = []
        for m in cons:
            got.append(m.value)
            if len(got) == 50:
                break
        assert got == [b"x%d" % i for i in range(50)]
        cons.commit()
        assert cons.committed(TopicPartition(topic, 0)) == 50
    finally:
        cons.close()  # LeaveGroup
    used = _used(before, _versions(fbroker))
    for api, version in (("Produce", 11 if ("Produce", 11) in used else 9), ("Fetch", 12),
                         ("JoinGroup", 7), ("SyncGroup", 5), ("LeaveGroup", 5),
                         ("OffsetCommit", 8), ("OffsetFetch", 8), ("FindCoordinator", 4)):
        assert (api, version) in used, (api, version, sorted(used))


def _metadata(w, version, topics):
    return w.call(ApiKey.METADATA, version, {
        "topics": topics, "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False})


def test_topic_ids_in_metadata_and_topics_asked_for_by_id(broker_factory):
    b = broker_factory()
    create_topic(b, "withid", partitions=2)
    w = Wire(b)
    try:
        r = _metadata(w, 10, [{"name": "withid"}])
        (t,) = r.topics
        assert t.error_code == 0 and t.name == "withid" and len(t.partitions) == 2
        topic_id = bytes(t.topic_id)
        assert topic_id != bytes(16)
        assert bytes(_metadata(w, 9, [{"name": "withid"}]).topics[0].topic_id) == bytes(16)
        # v12: by id (the name comes back), and an unknown id
        unknown = uuid.uuid4().bytes
        r = _metadata(w, 12, [{"topic_id": topic_id, "name": None},
                              {"topic_id": unknown, "name": None}])
        got = {bytes(t.topic_id): (t.error_code, t.name, len(t.partitions)) for t in r.topics}
        assert got == {topic_id: (Errors.NONE, "withid", 2),
                       unknown: (Errors.UNKNOWN_TOPIC_ID, None, 0)}
        r = _metadata(w, 13, [{"name": "withid"}])
        assert r.error_code == 0 and bytes(r.topics[0].topic_id) == topic_id
    finally:
        w.close()
    # a topic name is required before v12, a name or an id from v12: the request is
    # refused (connection closed)
    for version, topic in ((11, {"name": None}), (12, {"name": None, "topic_id": bytes(16)})):
        w = Wire(b)
        try:
            w.send(ApiKey.METADATA, version, {"topics": [topic],
                                              "allow_auto_topic_creation": False})
            assert w.closed_by_broker()
        finally:
            w.close()
    assert healthy(b)
    b.restart()
    w = Wire(b)
    try:
        assert bytes(_metadata(w, 12, [{"name": "withid"}]).topics[0].topic_id) == topic_id
    finally:
        w.close()


def _fetch12(w, topic, offset, last_fetched_epoch, current_leader_epoch=-1):
    r = w.call(ApiKey.FETCH, 12, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [{
            "partition": 0, "current_leader_epoch": current_leader_epoch,
            "fetch_offset": offset, "last_fetched_epoch": last_fetched_epoch,
            "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": [], "rack_id": ""})
    return r.responses[0].partitions[0]


def test_fetch_v12_answers_a_diverging_epoch(broker_factory):
    b = broker_factory()
    create_topic(b, "div")
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
    for i in range(5):
        p.produce("div", b"r%d" % i, partition=0)
    assert p.flush(20) == 0
    w = Wire(b)
    try:
        epoch = _metadata(w, 12, [{"name": "div"}]).topics[0].partitions[0].leader_epoch
        # the fetcher's log ends in our epoch, at or below our end: records, no divergence
        part = _fetch12(w, "div", 2, epoch, epoch)
        assert part.error_code == 0 and part.high_watermark == 5
        assert len(bytes(part.records)) > 0
        assert part.diverging_epoch is None or part.diverging_epoch.epoch == -1
        # its log goes past ours in our epoch: diverging at our end, no records
        part = _fetch12(w, "div", 9, epoch, epoch)
        assert part.error_code == 0
        assert (part.diverging_epoch.epoch, part.diverging_epoch.end_offset) == (epoch, 5)
        assert len(bytes(part.records or b"")) == 0 and part.high_watermark == 5
        # an epoch this log never had (newer): Kafka's undefined (-1, -1)
        part = _fetch12(w, "div", 3, epoch + 1)
        assert (part.diverging_epoch.epoch, part.diverging_epoch.end_offset) == (-1, -1)
        # no last fetched epoch (-1, what consumers send): read as before
        part = _fetch12(w, "div", 9, -1)
        assert part.error_code == Errors.OFFSET_OUT_OF_RANGE
    finally:
        w.close()


def test_list_offsets_v8_v9_local_start_and_tiered_offsets(broker_factory):
    b = broker_factory()
    create_topic(b, "lo")
    p = Producer({"bootstrap.servers": b.bootstrap})
    # Timestamps one millisecond apart: the last record holds the largest, however
    # librdkafka batches the four (records of one millisecond tie, and a tie across
    # batches keeps the first batch's offset, as in Kafka).
    base = int(time.time() * 1000)
    for i in range(4):
        p.produce("lo", b"r%d" % i, partition=0, timestamp=base + i)
    assert p.flush(20) == 0
    w = Wire(b)
    try:
        def offset(version, ts):
            r = w.call(ApiKey.LIST_OFFSETS, version, {
                "replica_id": -1, "isolation_level": 0, "topics": [{
                    "name": "lo", "partitions": [{"partition_index": 0, "timestamp": ts,
                                                  "current_leader_epoch": -1}]}]})
            part = r.topics[0].partitions[0]
            return part.error_code, part.offset
        assert offset(8, -4) == (0, 0)      # the local log's start: all of it is local
        assert offset(9, -5) == (0, -1)     # nothing in remote storage
        assert offset(9, -1) == (0, 4)
        assert offset(7, -3) == (0, 3)      # max timestamp
    finally:
        w.close()


def test_create_topics_v5_answers_what_the_topic_got(broker_factory):
    b = broker_factory({"num.partitions": "3"})
    w = Wire(b)
    try:
        for validate_only in (True, False):
            r = w.call(ApiKey.CREATE_TOPICS, 5, {"topics": [{
                "name": "made", "num_partitions": -1, "replication_factor": -1,
                "assignments": [], "configs": [{"name": "retention.ms", "value": "3600000"}]}],
                "timeout_ms": 10000, "validate_only": validate_only})
            (t,) = r.topics
            assert t.error_code == 0 and (t.num_partitions, t.replication_factor) == (3, 1)
            configs = {c.name: (c.value, c.config_source) for c in t.configs}
            assert configs["retention.ms"] == ("3600000", 1)        # DYNAMIC_TOPIC_CONFIG
            assert configs["cleanup.policy"] == ("delete", 5)       # DEFAULT_CONFIG
        assert len(_metadata(w, 12, [{"name": "made"}]).topics[0].partitions) == 3
        r = w.call(ApiKey.CREATE_TOPICS, 5, {"topics": [{
            "name": "made", "num_partitions": 1, "replication_factor": 1, "assignments": [],
            "configs": []}], "timeout_ms": 10000, "validate_only": False})
        (t,) = r.topics
        assert t.error_code == Errors.TOPIC_ALREADY_EXISTS and t.num_partitions == -1
    finally:
        w.close()


def test_create_topics_v7_and_delete_topics_v6_by_id(broker_factory):
    b = broker_factory()
    w = Wire(b)
    try:
        r = w.call(ApiKey.CREATE_TOPICS, 7, {"topics": [
            {"name": n, "num_partitions": 1, "replication_factor": 1, "assignments": [],
             "configs": []} for n in ("byid", "byname", "both")],
            "timeout_ms": 10000, "validate_only": False})
        ids = {t.name: bytes(t.topic_id) for t in r.topics}
        assert {t.error_code for t in r.topics} == {0} and bytes(16) not in ids.values()
        md = _metadata(w, 12, [{"name": n} for n in ids])
        assert {t.name: bytes(t.topic_id) for t in md.topics} == ids
        unknown = uuid.uuid4().bytes
        r = w.call(ApiKey.DELETE_TOPICS, 6, {"topics": [
            {"name": None, "topic_id": ids["byid"]}, {"name": "byname"},
            {"name": None, "topic_id": unknown}, {"name": "both", "topic_id": ids["both"]}],
            "timeout_ms": 10000})
        got = {(t.name, bytes(t.topic_id)): t.error_code for t in r.responses}
        assert got == {("byid", ids["byid"]): Errors.NONE, ("byname", ids["byname"]): Errors.NONE,
                       (None, unknown): Errors.UNKNOWN_TOPIC_ID,
                       ("both", ids["both"]): Errors.INVALID_REQUEST}
        md = _metadata(w, 12, [{"name": n} for n in ids])
        assert {t.name: t.error_code for t in md.topics} == {
            "byid": Errors.UNKNOWN_TOPIC_OR_PARTITION,
            "byname": Errors.UNKNOWN_TOPIC_OR_PARTITION, "both": Errors.NONE}
    finally:
        w.close()


def test_offset_fetch_v8_v9_of_several_groups_and_find_coordinator_v4(fbroker):
    topic = f"of-{uuid.uuid4().hex[:8]}"
    create(fbroker, topic, partitions=2)
    groups = [f"{topic}-a", f"{topic}-b", f"{topic}-none"]
    w = Wire(fbroker)
    try:
        r = w.call(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": groups})
        assert sorted(c.key for c in r.coordinators) == sorted(groups)
        assert {(c.error_code, c.node_id, c.port) for c in r.coordinators} == {
            (0, 0, int(fbroker.bootstrap.rsplit(":", 1)[1]))}
        for g, offset in zip(groups[:2], (5, 9), strict=True):
            r = w.call(ApiKey.OFFSET_COMMIT, 9, {
                "group_id": g, "generation_id_or_member_epoch": -1, "member_id": "",
                "group_instance_id": None, "topics": [{"name": topic, "partitions": [
                    {"partition_index": 1, "committed_offset": offset,
                     "committed_leader_epoch": -1, "committed_metadata": "m"}]}]})
            assert r.topics[0].partitions[0].error_code == 0
        for version in (8, 9):
            r = w.call(ApiKey.OFFSET_FETCH, version, {"require_stable": True, "groups": [
                {"group_id": g, "member_id": None, "member_epoch": -1,
                 "topics": [{"name": topic, "partition_indexes": [0, 1]}]} for g in groups]})
            got = {g.group_id: (g.error_code, {(p.partition_index, p.committed_offset)
                                               for t in g.topics for p in t.partitions})
                   for g in r.groups}
            assert got == {groups[0]: (0, {(0, -1), (1, 5)}), groups[1]: (0, {(0, -1), (1, 9)}),
                           groups[2]: (0, {(0, -1), (1, -1)})}
            # all of a group's offsets (null topics)
            r = w.call(ApiKey.OFFSET_FETCH, version, {"require_stable": False, "groups": [
                {"group_id": groups[1], "member_id": None, "member_epoch": -1,
                 "topics": None}]})
            assert [(t.name, [(p.partition_index, p.committed_offset) for p in t.partitions])
                    for t in r.groups[0].topics] == [(topic, [(1, 9)])]
    finally:
        w.close()


def test_join_group_v9_a_restarted_static_leader_skips_the_assignment(fbroker):
    group = f"static-{uuid.uuid4().hex[:8]}"
    w = Wire(fbroker)
    try:
        first = w.call(ApiKey.JOIN_GROUP, 9, {**join_body(group, instance="i1"), "reason": None})
        assert first.error_code == 0 and first.leader == first.member_id
        assert first.skip_assignment is False and len(first.members) == 1
        sync = w.call(ApiKey.SYNC_GROUP, 5, {
            "group_id": group, "generation_id": first.generation_id,
            "member_id": first.member_id, "group_instance_id": "i1",
            "protocol_type": "consumer", "protocol_name": "range",
            "assignments": [{"member_id": first.member_id, "assignment": b"A"}]})
        assert sync.error_code == 0 and (sync.protocol_type, sync.protocol_name) == (
            "consumer", "range")
        # v8: the restarted leader is told the old leader id (it syncs as a follower)
        again = w.call(ApiKey.JOIN_GROUP, 8, {**join_body(group, instance="i1"),
                                              "reason": "restart"})
        assert again.error_code == 0 and again.generation_id == first.generation_id
        assert again.leader == first.member_id != again.member_id and not again.members
        # v9: it is the leader, with the members, and skips the assignment
        third = w.call(ApiKey.JOIN_GROUP, 9, {**join_body(group, instance="i1"), "reason": None})
        assert third.error_code == 0 and third.generation_id == first.generation_id
        assert third.leader == third.member_id and third.skip_assignment is True
        assert [m.group_instance_id for m in third.members] == ["i1"]
        sync = w.call(ApiKey.SYNC_GROUP, 5, {
            "group_id": group, "generation_id": third.generation_id,
            "member_id": third.member_id, "group_instance_id": "i1",
            "protocol_type": "consumer", "protocol_name": "range", "assignments": []})
        assert sync.error_code == 0 and bytes(sync.assignment) == b"A"
        # a SyncGroup v5 naming another protocol is refused (Kafka's check)
        sync = w.call(ApiKey.SYNC_GROUP, 5, {
            "group_id": group, "generation_id": third.generation_id,
            "member_id": third.member_id, "group_instance_id": "i1",
            "protocol_type": "consumer", "protocol_name": "roundrobin", "assignments": []})
        assert sync.error_code == Errors.INCONSISTENT_GROUP_PROTOCOL
    finally:
        w.close()
