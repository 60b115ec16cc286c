"""KIP-951 in a three-broker ZooKeeper cluster: a Produce v10 or Fetch v12 sent to a broker
that does not lead the partition is answered NOT_LEADER_OR_FOLLOWER with the leader and
its epoch (and, for Produce, the leader's endpoint), so a client can go there without a
Metadata round trip (Fetch v16 adds its endpoint); older versions carry neither, nor do answers without that error.
Metadata v12 gives the same topic id from every broker."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, NewTopic

from fastlog.protocol import ApiKey, Errors
from fastlog.testing import Wire
from tests.server.wire import batch


def _produce(w, version, topic):
    r = w.call(ApiKey.PRODUCE, version, {
        "transactional_id": None, "acks": 1, "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [
            {"index": 0, "records": batch([b"x"])}]}]})
    return r, r.responses[0].partition_responses[0]


def _fetch(w, version, topic, leader_epoch=-1, topic_id=None):
    """The answer for partition 0 (and the whole response with `topic_id`: v13+)."""
    r = w.call(ApiKey.FETCH, version, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "topic_id": topic_id, "partitions": [{
            "partition": 0, "current_leader_epoch": leader_epoch, "fetch_offset": 0,
            "last_fetched_epoch": -1, "log_start_offset": -1,
            "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": [], "rack_id": ""})
    if topic_id is not None:
        return r, r.responses[0].partitions[0]
    return r.responses[0].partitions[0]


def _named_leader(part) -> int:
    """The leader a partition answer names (-1: none, the tag absent)."""
    return -1 if part.current_leader is None else part.current_leader.leader_id


def test_not_leader_answers_name_the_leader(cluster):
    ids = sorted(cluster.brokers)
    leader, other = ids[0], ids[1]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("hints", 1, replica_assignment=[[leader]])],
                        operation_timeout=10)["hints"].result(15)
    assert cluster.wait_leaders("hints", 1) == {0: leader}
    epoch = cluster.state("hints", 0)["leader_epoch"]
    host, port = cluster.brokers[leader].bootstrap.rsplit(":", 1)
    # every broker answers the topic's one id (kept in ZooKeeper with its assignment)
    ids = set()
    for b in cluster.brokers.values():
        w = Wire(b)
        try:
            ids.add(bytes(w.call(ApiKey.METADATA, 12, {
                "topics": [{"name": "hints"}], "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False}).topics[0].topic_id))
        finally:
            w.close()
    assert len(ids) == 1 and ids != {bytes(16)}

    w = Wire(cluster.brokers[other])
    try:
        r, part = _produce(w, 10, "hints")
        assert part.error_code == Errors.NOT_LEADER_OR_FOLLOWER
        assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (
            leader, epoch)
        assert [(n.node_id, n.host, n.port) for n in r.node_endpoints] == [
            (leader, host, int(port))]
        part = _fetch(w, 12, "hints")
        assert part.error_code == Errors.NOT_LEADER_OR_FOLLOWER
        assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (
            leader, epoch)
        # Fetch v16 (by topic id) adds the leader's endpoint, as Produce v10 does
        (topic_id,) = ids
        r, part = _fetch(w, 16, None, topic_id=topic_id)
        assert part.error_code == Errors.NOT_LEADER_OR_FOLLOWER
        assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (
            leader, epoch)
        assert [(n.node_id, n.host, n.port) for n in r.node_endpoints] == [
            (leader, host, int(port))]
        r, part = _fetch(w, 15, None, topic_id=topic_id)
        assert part.current_leader.leader_id == leader and not r.node_endpoints
        # the versions before KIP-951 have no such fields
        r, part = _produce(w, 9, "hints")
        assert part.error_code == Errors.NOT_LEADER_OR_FOLLOWER
        assert _named_leader(part) == -1 and not r.node_endpoints
    finally:
        w.close()

    w = Wire(cluster.brokers[leader])
    try:
        _, part = _produce(w, 10, "hints")
        assert part.error_code == 0 and _named_leader(part) == -1
        part = _fetch(w, 12, "hints", leader_epoch=epoch)
        assert part.error_code == 0 and _named_leader(part) == -1
    finally:
        w.close()
