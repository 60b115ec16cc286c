"""ACL authorization in cluster mode: ACLs are kept in ZooKeeper's /kafka-acl znodes, an
ACL added or removed through one broker is enforced by the other within seconds, and the
brokers' own replica fetches (over the PLAINTEXT inter-broker listener, so as
User:ANONYMOUS) keep working once the operator grants that principal ClusterAction, as
Kafka requires."""

from __future__ import annotations

from fastlog.protocol import Errors
from fastlog.testing import wait_until
from tests.server.test_authz import (
    TIMEOUT,
    _metadata,
    acl,
    admin_client,
    authz_overrides,
    client_conf,
    create_acls,
    wire_as,
)


def _metadata_error(broker, user, topic) -> int:
    w = wire_as(broker, user)
    try:
        return _metadata(w, topic)
    finally:
        w.close()


def test_acls_follow_across_brokers_and_replication_needs_cluster_action(fresh_cluster):
    import confluent_kafka
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        NewTopic,
        ResourcePatternType,
        ResourceType,
    )

    c = fresh_cluster(ids=(1, 2), **authz_overrides(**{
        "inter.broker.listener.name": "PLAINTEXT"}))
    first, second = c.brokers[1], c.brokers[2]
    # The brokers reach each other as User:ANONYMOUS: they need ClusterAction.
    create_acls(first, [acl("CLUSTER", "kafka-cluster", "User:ANONYMOUS", "CLUSTER_ACTION")])
    assert c.json("/kafka-acl/Cluster/kafka-cluster")["acls"] == [
        {"principal": "User:ANONYMOUS", "permissionType": "Allow",
         "operation": "ClusterAction", "host": "*"}]

    topic = "acl-replicated"
    admin = admin_client(first)
    for f in admin.create_topics([NewTopic(topic, 1, 2)]).values():
        f.result(TIMEOUT)
    c.wait_leaders(topic, 1)
    assert _metadata_error(second, "alice", topic) == Errors.TOPIC_AUTHORIZATION_FAILED

    create_acls(first, [acl("TOPIC", topic, "User:alice", "WRITE")])
    wait_until(lambda: _metadata_error(second, "alice", topic) == Errors.NONE, 10,
               what="the ACL added through broker 1 enforced by broker 2")
    wait_until(lambda: _metadata_error(first, "alice", topic) == Errors.NONE, 10,
               what="the ACL enforced by broker 1 too (whichever leads)")

    # acks=all succeeds only when the follower fetches (ClusterAction) into the ISR
    producer = confluent_kafka.Producer({**client_conf(second, "alice"), "acks": "all",
                                         "message.timeout.ms": 20000})
    failed = []
    for i in range(5):
        producer.produce(topic, f"v{i}".encode(),
                         on_delivery=lambda err, _m: failed.append(err) if err else None)
    assert producer.flush(TIMEOUT) == 0
    assert not failed, failed   # flush counts failed deliveries as done too
    isr = c.state(topic, 0)["isr"]
    assert sorted(isr) == [1, 2]

    alice = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL,
                             "User:alice", "*", AclOperation.WRITE, AclPermissionType.ALLOW)
    admin2 = admin_client(second)
    assert len(admin2.delete_acls([alice])[alice].result(TIMEOUT)) == 1
    wait_until(lambda: _metadata_error(first, "alice", topic) == Errors.TOPIC_AUTHORIZATION_FAILED,
               10, what="the ACL removed through broker 2 no longer allowing on broker 1")
