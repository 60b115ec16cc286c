"""Transactions in a three-broker cluster: the transaction coordinator of an id sits on
the leader of its __transaction_state partition (created on first FindCoordinator), and
its COMMIT/ABORT markers reach partitions led by the other brokers through
WriteTxnMarkers over the inter-broker listener."""

from __future__ import annotations

import pytest

from fastlog import _codec
from fastlog.protocol import ApiKey, Errors
from fastlog.server.group.offsets import partition_for
from fastlog.testing import wait_until
from tests.server.wire import Wire, fetch_body

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

TXN_OVERRIDES = {
    "transaction.state.log.num.partitions": "6",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
}


def controls(broker, topic, partition):
    """COMMIT/ABORT of the control records of one partition, read from its leader."""
    w = Wire(broker)
    try:
        body = fetch_body(topic, 0, 0, min_bytes=0, partition=partition)
        body["isolation_level"] = 0
        part = w.call(ApiKey.FETCH, 11, body).responses[0].partitions[0]
        assert part.error_code == Errors.NONE
        recs = _codec.read_records(bytes(part.records or b""), include_control=True)
        return ["COMMIT" if _codec.parse_control_record(r)[1] == 1 else "ABORT"
                for r in recs if r.key is not None and len(r.key) == 4
                and r.value is not None and len(r.value) == 6]
    finally:
        w.close()


def test_markers_reach_partitions_led_by_other_brokers(fresh_cluster):
    cluster = fresh_cluster(**TXN_OVERRIDES)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("txc", 3, 1)], operation_timeout=10)["txc"].result(15)
    leaders = cluster.wait_leaders("txc", 3)
    assert len(set(leaders.values())) > 1, leaders   # spread over brokers
    w = Wire(cluster.brokers[1])
    try:
        def found():
            r = w.call(ApiKey.FIND_COORDINATOR, 1, {"key": "txc-id", "key_type": 1})
            return r if r.error_code == Errors.NONE else None
        wait_until(lambda: found() is not None, 20, what="a transaction coordinator")
        coordinator = found().node_id
    finally:
        w.close()
    state_leaders = cluster.wait_leaders("__transaction_state", 6)
    assert coordinator == state_leaders[partition_for("txc-id", 6)]
    p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "txc-id"})
    p.init_transactions(30)
    p.begin_transaction()
    for q in range(3):
        p.produce("txc", value=b"committed", partition=q)
    p.commit_transaction(30)
    p.begin_transaction()
    for q in range(3):
        p.produce("txc", value=b"aborted", partition=q)
    assert p.flush(20) == 0
    p.abort_transaction(30)
    for q, leader in leaders.items():
        wait_until(lambda q=q, leader=leader: controls(cluster.brokers[leader], "txc", q)
                   == ["COMMIT", "ABORT"], 20, what=f"both markers on txc-{q}")
    w = Wire(cluster.brokers[coordinator])
    try:
        d = w.call(ApiKey.DESCRIBE_TRANSACTIONS, 0,
                   {"transactional_ids": ["txc-id"]}).transaction_states[0]
        assert (d.error_code, d.transaction_state) == (Errors.NONE, "CompleteAbort")
    finally:
        w.close()
