"""Cluster-mode follow-ups (three real brokers, one real ZooKeeper): CreateTopics honours
explicit replica assignments (the first replica leads), topic admin requests are served by
the controller only (NOT_CONTROLLER elsewhere, which real admin clients retry through any
bootstrap broker), and Metadata gives each broker's endpoint for the listener the request
arrived on."""

import socket
import types

import pytest

from fastlog.protocol import ApiKey, Errors
from fastlog.testing import make_chroot, wait_until
from tests.cluster.harness import ClusterHarness
from tests.server.wire import Wire

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaException, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic  # noqa: E402


def _admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _error_code(fut):
    with pytest.raises(KafkaException) as e:
        fut.result(15)
    return e.value.args[0].code()


def test_create_topics_keeps_explicit_assignment(cluster):
    admin = _admin(cluster.brokers[1])
    fut = admin.create_topics([NewTopic("fu-assign", 2, replica_assignment=[[1, 2], [2, 3]])],
                              operation_timeout=10)["fu-assign"]
    fut.result(15)
    assert cluster.json("/brokers/topics/fu-assign")["partitions"] == {"0": [1, 2], "1": [2, 3]}
    # the first replica of each list is the preferred, hence the initial, leader
    assert cluster.wait_leaders("fu-assign", 2) == {0: 1, 1: 2}
    assert sorted(cluster.state("fu-assign", 0)["isr"]) == [1, 2]

    # a first replica other than the lowest id leads too (not Kafka's default placement)
    fut = admin.create_topics([NewTopic("fu-assign-b", 1, replica_assignment=[[3, 1]])],
                              operation_timeout=10)["fu-assign-b"]
    fut.result(15)
    assert cluster.json("/brokers/topics/fu-assign-b")["partitions"] == {"0": [3, 1]}
    assert cluster.wait_leaders("fu-assign-b", 1) == {0: 3}


@pytest.mark.parametrize("assignment", [
    [[1, 9]],            # broker 9 is not registered
    [[1, 1]],            # a broker twice in one partition
    [[1, 2], [3]],       # replication factors differ
])
def test_create_topics_refuses_bad_assignment(cluster, assignment):
    admin = _admin(cluster.brokers[2])
    fut = admin.create_topics([NewTopic("fu-bad", len(assignment), replica_assignment=assignment)],
                              operation_timeout=10)["fu-bad"]
    assert _error_code(fut) == Errors.INVALID_REPLICA_ASSIGNMENT
    assert not cluster.zk.exists("/brokers/topics/fu-bad")


def test_create_topics_refuses_gappy_partition_numbers(cluster):
    w = Wire(cluster.brokers[cluster.controller()])
    try:
        r = w.call(ApiKey.CREATE_TOPICS, 4, {
            "topics": [{"name": "fu-gap", "num_partitions": -1, "replication_factor": -1,
                        "assignments": [{"partition_index": 0, "broker_ids": [1]},
                                        {"partition_index": 2, "broker_ids": [2]}],
                        "configs": []}],
            "timeout_ms": 10000, "validate_only": False})
    finally:
        w.close()
    assert r.topics[0].error_code == Errors.INVALID_REPLICA_ASSIGNMENT
    assert not cluster.zk.exists("/brokers/topics/fu-gap")


def test_topic_admin_requests_only_on_the_controller(cluster):
    controller = cluster.controller()
    others = [i for i in cluster.brokers if i != controller]
    w = Wire(cluster.brokers[others[0]])
    try:
        r = w.call(ApiKey.CREATE_TOPICS, 4, {
            "topics": [{"name": "fu-nc", "num_partitions": 1, "replication_factor": 1,
                        "assignments": [], "configs": []}],
            "timeout_ms": 10000, "validate_only": False})
        assert [t.error_code for t in r.topics] == [Errors.NOT_CONTROLLER]
        r = w.call(ApiKey.DELETE_TOPICS, 1, {"topic_names": ["fu-nc"], "timeout_ms": 10000})
        assert [t.error_code for t in r.responses] == [Errors.NOT_CONTROLLER]
        r = w.call(ApiKey.CREATE_PARTITIONS, 1, {
            "topics": [{"name": "fu-nc", "count": 2, "assignments": None}],
            "timeout_ms": 10000, "validate_only": False})
        assert [t.error_code for t in r.results] == [Errors.NOT_CONTROLLER]
        md = w.call(ApiKey.METADATA, 1, {"topics": []})
        assert md.controller_id == controller
    finally:
        w.close()
    assert not cluster.zk.exists("/brokers/topics/fu-nc")


@pytest.mark.parametrize("bootstrap", [1, 2, 3])
def test_confluent_admin_succeeds_through_any_broker(cluster, bootstrap):
    topic = f"fu-any-{bootstrap}"
    admin = _admin(cluster.brokers[bootstrap])
    admin.create_topics([NewTopic(topic, 1, 2)], operation_timeout=10)[topic].result(15)
    cluster.wait_leaders(topic, 1)
    admin.create_partitions([NewPartitions(topic, 2)], operation_timeout=10)[topic].result(15)
    cluster.wait_leaders(topic, 2)
    admin.delete_topics([topic], operation_timeout=10)[topic].result(15)
    assert not cluster.zk.exists(f"/brokers/topics/{topic}")


@pytest.mark.parametrize("bootstrap", [1, 2, 3])
def test_kafka_python_admin_succeeds_through_any_broker(cluster, bootstrap):
    kafka_admin = pytest.importorskip("kafka.admin")
    topic = f"fu-kp-{bootstrap}"
    admin = kafka_admin.KafkaAdminClient(bootstrap_servers=cluster.brokers[bootstrap].bootstrap,
                                         request_timeout_ms=15000)
    try:
        admin.create_topics([kafka_admin.NewTopic(topic, 1, 2)])
        cluster.wait_leaders(topic, 1)
        admin.create_partitions({topic: kafka_admin.NewPartitions(2)})
        cluster.wait_leaders(topic, 2)
        admin.delete_topics([topic])
    finally:
        admin.close()


def test_fastlog_admin_succeeds_through_any_broker(cluster):
    from fastlog.client.sync import SyncAdmin as FastlogAdmin

    for bootstrap in cluster.brokers:
        topic = f"fu-fl-{bootstrap}"
        admin = FastlogAdmin(cluster.brokers[bootstrap].bootstrap)
        try:
            admin.create_topic(topic, 1, 2)
            cluster.wait_leaders(topic, 1)
            admin.create_partitions(topic, 2)
            admin.delete_topic(topic)
        finally:
            admin.close()


def _free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def test_endpoints_follow_the_listener_of_the_request(zk_server, tmp_path):
    """Two listeners per broker: PLAINTEXT advertises a port nobody listens on, INTERNAL is
    the inter-broker listener. Metadata and FindCoordinator answer with the endpoints of
    the listener the request came in on, and followers replicate through INTERNAL."""
    c = ClusterHarness(tmp_path, make_chroot(zk_server.hosts), ids=(1, 2))
    internal, dead = {}, {}
    for i, b in c.brokers.items():
        plain, internal[i], dead[i] = _free_ports(3)
        b.port = plain
        b.overrides.update({
            "listeners": f"PLAINTEXT://127.0.0.1:{plain},INTERNAL://127.0.0.1:{internal[i]}",
            "advertised.listeners":
                f"PLAINTEXT://127.0.0.1:{dead[i]},INTERNAL://127.0.0.1:{internal[i]}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
        })
    try:
        c.start()
        reg = c.json("/brokers/ids/1")
        assert reg["endpoints"] == [f"PLAINTEXT://127.0.0.1:{dead[1]}",
                                    f"INTERNAL://127.0.0.1:{internal[1]}"]
        assert reg["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT",
                                                         "INTERNAL": "PLAINTEXT"}

        def metadata_ports(host_port):
            w = Wire(types.SimpleNamespace(host="127.0.0.1", port=host_port))
            try:
                md = w.call(ApiKey.METADATA, 1, {"topics": []})
                fc = w.call(ApiKey.FIND_COORDINATOR, 1, {"key": "fu-group", "key_type": 0})
            finally:
                w.close()
            return {b.node_id: b.port for b in md.brokers}, fc

        for arrived_on in (c.brokers[1].port, c.brokers[2].port):
            ports, _ = metadata_ports(arrived_on)
            assert ports == dead
        ports, fc = wait_until(
            lambda: (r := metadata_ports(internal[2])) and r[1].error_code == Errors.NONE and r,
            20, what="a group coordinator")
        assert ports == internal
        assert fc.port == internal[fc.node_id]

        # replication works although the PLAINTEXT endpoints are dead: followers fetch
        # through INTERNAL
        bootstrap = f"127.0.0.1:{internal[1]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("fu-listeners", 1, 2,
                                      config={"min.insync.replicas": "2"})],
                            operation_timeout=10)["fu-listeners"].result(15)
        c.wait_leaders("fu-listeners", 1)
        p = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                      "message.timeout.ms": 20000})
        for n in range(5):
            p.produce("fu-listeners", b"v%d" % n, partition=0)
        assert p.flush(25) == 0
        st = wait_until(lambda: (s := c.state("fu-listeners", 0)) and len(s["isr"]) == 2 and s,
                        15, what="both replicas in the ISR")
        assert sorted(st["isr"]) == [1, 2]
    finally:
        c.close()
