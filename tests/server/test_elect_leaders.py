"""ElectLeaders (API 43) on one node, through confluent-kafka, the wire and `fastlog
leader-election`: the only replica leads every partition, so a preferred or unclean
election is ELECTION_NOT_NEEDED (left out of an all-partitions answer), an unknown
partition UNKNOWN_TOPIC_OR_PARTITION, an unknown election type INVALID_REQUEST. The
cluster case (through the controller) is tests/cluster/test_elect_leaders_cluster.py."""

from __future__ import annotations

from confluent_kafka import ElectionType, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient

from fastlog.protocol import ApiKey, Errors
from tests.client_fixture import run_fastlog
from tests.server.test_confluent_kafka import create
from tests.server.wire import Wire


def test_confluent_elect_leaders_on_one_node(broker):
    create(broker, "elect-one", partitions=2)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for kind in (ElectionType.PREFERRED, ElectionType.UNCLEAN):
        got = admin.elect_leaders(kind, [TopicPartition("elect-one", 0),
                                         TopicPartition("elect-one", 9)]).result(15)
        codes = {tp.partition: e.code() for tp, e in got.items()}
        assert codes == {0: KafkaError.ELECTION_NOT_NEEDED,
                         9: KafkaError.UNKNOWN_TOPIC_OR_PART}, codes
    # Every partition: none needed an election, so none is listed.
    assert admin.elect_leaders(ElectionType.PREFERRED, None).result(15) == {}


def test_elect_leaders_on_the_wire(broker):
    create(broker, "elect-wire")
    w = Wire(broker)
    try:
        body = {"topic_partitions": [{"topic": "elect-wire", "partitions": [0, 0]}],
                "timeout_ms": 1000}
        r0 = w.call(ApiKey.ELECT_LEADERS, 0, body)
        (res,) = r0.replica_election_results
        assert [(p.partition_id, p.error_code) for p in res.partition_result] == [
            (0, Errors.ELECTION_NOT_NEEDED)]
        r2 = w.call(ApiKey.ELECT_LEADERS, 2, {**body, "election_type": 5})
        assert r2.error_code == Errors.INVALID_REQUEST
    finally:
        w.close()


def test_leader_election_command(broker):
    create(broker, "elect-cli")
    r = run_fastlog("leader-election", "--bootstrap-server", broker.bootstrap,
                    "--election-type", "preferred", "--topic", "elect-cli", "--partition", "0")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "Valid replica already elected for partitions elect-cli-0\n"
    r = run_fastlog("leader-election", "--bootstrap-server", broker.bootstrap,
                    "--election-type", "UNCLEAN", "--all-topic-partitions")
    assert r.returncode == 0, r.stderr
    r = run_fastlog("leader-election", "--bootstrap-server", broker.bootstrap,
                    "--election-type", "preferred", "--topic", "elect-cli", "--partition", "3")
    assert r.returncode == 1
    assert "Failed to elect leader for partitions elect-cli-3" in r.stdout
    assert "UNKNOWN_TOPIC_OR_PARTITION" in r.stderr
    r = run_fastlog("leader-election", "--bootstrap-server", broker.bootstrap,
                    "--election-type", "preferred", "--topic", "elect-cli")
    assert r.returncode == 2 and "--topic needs --partition" in r.stderr
