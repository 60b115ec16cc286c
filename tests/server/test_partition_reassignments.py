"""AlterPartitionReassignments and ListPartitionReassignments (KIP-455) on one broker,
answered as Kafka answers for a one-broker cluster: a partition may "move" to where it is,
not to a broker that does not exist, nothing is ever in progress, and a cancellation finds
no reassignment to cancel."""

from kafka import TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import InvalidReplicationAssignmentError, NoReassignmentInProgressError

from fastlog.protocol import ApiKey, Errors
from tests.server.wire import Wire, create_topic


def test_one_broker_answers_as_kafka_does(broker):
    create_topic(broker, "reassign-one", partitions=2)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        got = admin.alter_partition_reassignments({
            TopicPartition("reassign-one", 0): [0],
            TopicPartition("reassign-one", 1): [0, 1],
        })
        assert got == {TopicPartition("reassign-one", 0): None,
                       TopicPartition("reassign-one", 1): InvalidReplicationAssignmentError}
        got = admin.alter_partition_reassignments({TopicPartition("reassign-one", 0): None})
        assert got == {TopicPartition("reassign-one", 0): NoReassignmentInProgressError}
        assert admin.list_partition_reassignments() == {}
        assert admin.list_partition_reassignments([TopicPartition("reassign-one", 0)]) == {}
    finally:
        admin.close()


def test_wire_answers_for_bad_partitions_and_replica_lists(broker):
    create_topic(broker, "reassign-wire")
    w = Wire(broker)
    try:
        r = w.call(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 5000, "topics": [
            {"name": "reassign-wire", "partitions": [
                {"partition_index": 0, "replicas": [0, 0]},
                {"partition_index": 7, "replicas": [0]}]},
            {"name": "reassign-nope", "partitions": [{"partition_index": 0, "replicas": []}]}]})
        assert r.error_code == 0
        got = {(t.name, p.partition_index): (p.error_code, p.error_message)
               for t in r.responses for p in t.partitions}
        assert got[("reassign-wire", 0)][0] == Errors.INVALID_REPLICA_ASSIGNMENT
        assert "Duplicate replica ids" in got[("reassign-wire", 0)][1]
        assert got[("reassign-wire", 7)][0] == Errors.UNKNOWN_TOPIC_OR_PARTITION
        assert got[("reassign-nope", 0)][0] == Errors.UNKNOWN_TOPIC_OR_PARTITION
        r = w.call(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 5000, "topics": None})
        assert r.error_code == 0 and r.topics == []
    finally:
        w.close()
