"""DescribeCluster (API 60) through confluent-kafka and on the wire: the cluster id, the
controller and the brokers as Metadata gives them, the cluster's authorized operations
when asked (every one without an authorizer, Kafka's bit field), and v1's endpoint type
(a broker is no controller endpoint)."""

from __future__ import annotations

from confluent_kafka.admin import AclOperation, AdminClient

from fastlog.protocol import ApiKey, Errors
from tests.server.wire import Wire

# Kafka's operations on the cluster resource (AclEntry.supportedOperations(CLUSTER)).
CLUSTER_OPERATIONS = {AclOperation.CREATE, AclOperation.CLUSTER_ACTION,
                      AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
                      AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER, AclOperation.DESCRIBE}


def test_confluent_describe_cluster_matches_metadata(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    md = admin.list_topics(timeout=10)
    got = admin.describe_cluster(include_authorized_operations=True).result(15)
    assert got.cluster_id == md.cluster_id and got.cluster_id
    assert got.controller.id == md.controller_id
    assert [(n.id, n.host, n.port) for n in got.nodes] == [
        (b.id, b.host, b.port) for b in md.brokers.values()]
    assert set(got.authorized_operations) == CLUSTER_OPERATIONS
    plain = admin.describe_cluster().result(15)
    assert plain.authorized_operations is None


def test_describe_cluster_v1_endpoint_types(broker):
    w = Wire(broker)
    try:
        r = w.call(ApiKey.DESCRIBE_CLUSTER, 1, {
            "include_cluster_authorized_operations": False, "endpoint_type": 1})
        assert r.error_code == Errors.NONE and r.endpoint_type == 1
        assert r.cluster_authorized_operations == -(1 << 31)
        assert [b.port for b in r.brokers] == [int(broker.bootstrap.rsplit(":", 1)[1])]
        r = w.call(ApiKey.DESCRIBE_CLUSTER, 1, {
            "include_cluster_authorized_operations": False, "endpoint_type": 2})
        assert r.error_code == Errors.MISMATCHED_ENDPOINT_TYPE and r.brokers == []
        assert "CONTROLLER" in r.error_message
        r = w.call(ApiKey.DESCRIBE_CLUSTER, 1, {
            "include_cluster_authorized_operations": False, "endpoint_type": 7})
        assert r.error_code == Errors.UNSUPPORTED_ENDPOINT_TYPE
    finally:
        w.close()
