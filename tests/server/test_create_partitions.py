"""CreatePartitions (API 37) against a real fastlog-server: confluent-kafka's and
kafka-python's admin clients grow a topic, the new partitions take and serve records from
offset 0, refusals carry Kafka's codes (shrink/equal, unknown topic, bad assignments,
duplicate topics), validate_only changes nothing and the growth survives a restart."""

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from fastlog.protocol import ApiKey, Errors
from tests.server.wire import Wire


def admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def create(broker, name, partitions):
    a = admin(broker)
    fs = a.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)],
                         operation_timeout=10)
    fs[name].result(15)


def grow(broker, name, total, validate_only=False):
    """Run confluent's create_partitions; None on success, else the KafkaError."""
    a = admin(broker)
    fs = a.create_partitions([NewPartitions(name, total)], validate_only=validate_only,
                             operation_timeout=10)
    try:
        fs[name].result(15)
    except KafkaException as e:
        return e.args[0]
    return None


def partition_count(broker, name):
    md = admin(broker).list_topics(name, timeout=10)
    t = md.topics[name]
    assert t.error is None, t.error
    return len(t.partitions)


def produce_to(broker, topic, partition, values):
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1})
    reports = []
    for v in values:
        p.produce(topic, v, partition=partition,
                  on_delivery=lambda err, msg: reports.append((err, msg.partition(),
                                                               msg.offset())))
    assert p.flush(15) == 0
    assert all(err is None for err, _, _ in reports), reports
    return [(part, off) for _, part, off in reports]


def consume_from(broker, topic, partition, n):
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"cp-{topic}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, partition, 0)])
    got = []
    try:
        for _ in range(200):
            if len(got) >= n:
                break
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append((m.partition(), m.offset(), m.value()))
    finally:
        c.close()
    return got


def test_confluent_admin_grows_topic_and_new_partitions_work(broker):
    create(broker, "cp-grow", 2)
    produce_to(broker, "cp-grow", 0, [b"old"])
    assert grow(broker, "cp-grow", 5) is None
    assert partition_count(broker, "cp-grow") == 5
    for p in (2, 3, 4):
        assert produce_to(broker, "cp-grow", p, [b"n%d-%d" % (p, i) for i in range(3)]) == [
            (p, 0), (p, 1), (p, 2)]
        assert consume_from(broker, "cp-grow", p, 3) == [
            (p, i, b"n%d-%d" % (p, i)) for i in range(3)]
    # the old partitions keep their records
    assert consume_from(broker, "cp-grow", 0, 1) == [(0, 0, b"old")]


def test_kafka_python_admin_grows_topic(broker):
    from kafka import KafkaAdminClient
    from kafka.admin import NewPartitions as KpNewPartitions

    create(broker, "cp-kp", 1)
    a = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        a.create_partitions({"cp-kp": KpNewPartitions(3)})
    finally:
        a.close()
    assert partition_count(broker, "cp-kp") == 3


def test_shrink_or_same_count_is_invalid_partitions(broker):
    create(broker, "cp-shrink", 3)
    err = grow(broker, "cp-shrink", 2)
    assert err is not None and err.code() == Errors.INVALID_PARTITIONS
    assert "Topic currently has 3 partitions, which is higher than the requested 2." in err.str()
    err = grow(broker, "cp-shrink", 3)
    assert err is not None and err.code() == Errors.INVALID_PARTITIONS
    assert partition_count(broker, "cp-shrink") == 3


def test_unknown_topic(broker):
    err = grow(broker, "cp-no-such-topic", 4)
    assert err is not None and err.code() == Errors.UNKNOWN_TOPIC_OR_PARTITION


def test_validate_only_changes_nothing(broker):
    create(broker, "cp-validate", 2)
    assert grow(broker, "cp-validate", 6, validate_only=True) is None
    assert partition_count(broker, "cp-validate") == 2
    err = grow(broker, "cp-validate", 1, validate_only=True)  # still validated
    assert err is not None and err.code() == Errors.INVALID_PARTITIONS


def _create_partitions(w, topics, validate_only=False, version=1):
    r = w.call(ApiKey.CREATE_PARTITIONS, version, {
        "topics": topics, "timeout_ms": 10000, "validate_only": validate_only})
    return {t.name: (t.error_code, t.error_message) for t in r.results}


@pytest.mark.parametrize("version", [0, 1])
def test_wire_assignments_and_duplicates(broker, version):
    topic = f"cp-wire-{version}"
    create(broker, topic, 1)
    w = Wire(broker)
    try:
        # a topic named twice is refused, whatever else the request says
        got = _create_partitions(w, [{"name": topic, "count": 2, "assignments": None}] * 2,
                                 version=version)
        assert got[topic][0] == Errors.INVALID_REQUEST
        # an assignment naming a broker that does not exist, or the wrong number of them
        bad = [
            [{"broker_ids": [12345]}],
            [{"broker_ids": [0]}, {"broker_ids": [0]}],
            [{"broker_ids": [0, 0]}],
        ]
        for assignments in bad:
            got = _create_partitions(w, [{"name": topic, "count": 2,
                                          "assignments": assignments}], version=version)
            assert got[topic][0] == Errors.INVALID_REPLICA_ASSIGNMENT, assignments
            assert got[topic][1]
        assert partition_count(broker, topic) == 1
        # a valid explicit assignment: this broker, by the id Metadata gives it
        (node_id,) = admin(broker).list_topics(timeout=10).brokers
        got = _create_partitions(w, [{"name": topic, "count": 2,
                                      "assignments": [{"broker_ids": [node_id]}]}],
                                 version=version)
        assert got[topic] == (Errors.NONE, None)
        assert partition_count(broker, topic) == 2
    finally:
        w.close()


def test_growth_survives_restart(broker_factory):
    b = broker_factory()
    create(b, "cp-restart", 1)
    assert grow(b, "cp-restart", 4) is None
    produce_to(b, "cp-restart", 3, [b"kept"])
    b.restart()
    assert partition_count(b, "cp-restart") == 4
    assert consume_from(b, "cp-restart", 3, 1) == [(3, 0, b"kept")]
    assert sorted(p.name for p in b.data_dir.iterdir() if p.name.startswith("cp-restart-")) == [
        f"cp-restart-{p}" for p in range(4)]
