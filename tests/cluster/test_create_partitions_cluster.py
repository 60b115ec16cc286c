"""CreatePartitions in cluster mode (three real brokers, one real ZooKeeper): the topic
grows through /brokers/topics/<t>, the controller gives the new partitions leaders spread
over the brokers with the topic's replication factor, records go in and come out of them
through any bootstrap broker, and explicit assignments are checked against live brokers."""

import time

import pytest

from fastlog.protocol import ApiKey, Errors
from tests.server.wire import Wire

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic  # noqa: E402


def test_grow_topic_over_three_brokers(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("cp-spread", 2, 2)], operation_timeout=10)["cp-spread"].result(15)
    cluster.wait_leaders("cp-spread", 2)
    admin.create_partitions([NewPartitions("cp-spread", 6)],
                            operation_timeout=10)["cp-spread"].result(15)
    leaders = cluster.wait_leaders("cp-spread", 6)
    assert set(leaders.values()) == {1, 2, 3}
    assignment = cluster.json("/brokers/topics/cp-spread")["partitions"]
    assert sorted(assignment, key=int) == [str(p) for p in range(6)]
    assert all(len(set(r)) == 2 for r in assignment.values())

    p = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5})
    for part in range(6):
        p.produce("cp-spread", b"v%d" % part, partition=part)
    assert p.flush(20) == 0
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "cp-spread-check",
                  "enable.auto.commit": False})
    got = set()
    try:
        c.assign([TopicPartition("cp-spread", part, 0) for part in range(6)])
        deadline = time.monotonic() + 30
        while len(got) < 6 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.add((m.partition(), m.offset(), m.value()))
    finally:
        c.close()
    assert got == {(part, 0, b"v%d" % part) for part in range(6)}

    # shrinking is refused with Kafka's code, whichever broker is asked
    fut = admin.create_partitions([NewPartitions("cp-spread", 3)],
                                  operation_timeout=10)["cp-spread"]
    with pytest.raises(KafkaException) as e:
        fut.result(15)
    assert e.value.args[0].code() == Errors.INVALID_PARTITIONS


def test_explicit_assignments_checked_against_live_brokers(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("cp-assign", 1, 2)], operation_timeout=10)["cp-assign"].result(15)
    cluster.wait_leaders("cp-assign", 1)
    w = Wire(cluster.brokers[cluster.controller()])  # others answer NOT_CONTROLLER
    try:
        def ask(assignments):
            r = w.call(ApiKey.CREATE_PARTITIONS, 1, {
                "topics": [{"name": "cp-assign", "count": 2, "assignments": assignments}],
                "timeout_ms": 10000, "validate_only": False})
            return r.results[0].error_code
        assert ask([{"broker_ids": [1, 99]}]) == Errors.INVALID_REPLICA_ASSIGNMENT
        assert ask([{"broker_ids": [1]}]) == Errors.INVALID_REPLICA_ASSIGNMENT  # rf 1 != 2
        assert ask([{"broker_ids": [3, 2]}]) == Errors.NONE
    finally:
        w.close()
    cluster.wait_leaders("cp-assign", 2)
    assert cluster.json("/brokers/topics/cp-assign")["partitions"]["1"] == [3, 2]
    assert cluster.state("cp-assign", 1)["leader"] == 3
