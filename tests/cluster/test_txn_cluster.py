"""Transactions in a three-broker cluster: the transaction coordinator of an id sits on
the leader of its __transaction_state partition (created on first FindCoordinator), and
its COMMIT/ABORT markers reach partitions led by the other brokers through
WriteTxnMarkers over the inter-broker listener; a transaction whose markers cannot be
written stays in PrepareCommit (other requests for it answer CONCURRENT_TRANSACTIONS or
INVALID_TXN_STATE meanwhile, as Kafka's), across a restart of its coordinator, and
completes once the partition's leader is back."""

from __future__ import annotations

import pytest

from fastlog.protocol import ApiKey, Errors
from fastlog.server.group.offsets import partition_for
from fastlog.testing import wait_until
from tests.server.txn.test_txn_clients import add_partitions, describe, end, init
from tests.server.wire import Wire, markers, produce, txn_batch

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

TXN_OVERRIDES = {
    "transaction.state.log.num.partitions": "6",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
}


def controls(broker, topic, partition):
    """COMMIT/ABORT of the transaction markers of one partition, read from its leader."""
    w = Wire(broker)
    try:
        return markers(w, topic, partition)
    finally:
        w.close()


def coordinator_of(cluster, txn_id):
    w = Wire(cluster.brokers[cluster.alive_ids()[0]])
    try:
        def found():
            r = w.call(ApiKey.FIND_COORDINATOR, 1, {"key": txn_id, "key_type": 1})
            return r.node_id if r.error_code == Errors.NONE else None
        wait_until(lambda: found() is not None, 20, what="a transaction coordinator")
        return found()
    finally:
        w.close()


def test_markers_reach_partitions_led_by_other_brokers(fresh_cluster):
    cluster = fresh_cluster(**TXN_OVERRIDES)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("txc", 3, 1)], operation_timeout=10)["txc"].result(15)
    leaders = cluster.wait_leaders("txc", 3)
    assert len(set(leaders.values())) > 1, leaders   # spread over brokers
    coordinator = coordinator_of(cluster, "txc-id")
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
    # (the coordinator writes CompleteAbort once every marker was acknowledged: after them)
    wait_until(lambda: describe(cluster.brokers[coordinator], "txc-id").transaction_state
               == "CompleteAbort", 20, what="the transaction's CompleteAbort")
    d = describe(cluster.brokers[coordinator], "txc-id")
    assert (d.error_code, d.transaction_state) == (Errors.NONE, "CompleteAbort")


def test_prepare_commit_survives_a_coordinator_restart_and_completes(fresh_cluster):
    cluster = fresh_cluster(**TXN_OVERRIDES)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("txr", 1, 1)], operation_timeout=10)["txr"].result(15)
    data_leader = cluster.wait_leaders("txr", 1)[0]
    coordinator_of(cluster, "probe")                     # creates __transaction_state
    state_leaders = cluster.wait_leaders("__transaction_state", 6)
    txn_id = next(t for t in (f"txr-{i}" for i in range(200))
                  if state_leaders[partition_for(t, 6)] != data_leader)
    coordinator = state_leaders[partition_for(txn_id, 6)]
    assert coordinator_of(cluster, txn_id) == coordinator
    p = Producer({"bootstrap.servers": cluster.brokers[coordinator].bootstrap,
                  "transactional.id": txn_id})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce("txr", value=b"v", partition=0)
    assert p.flush(20) == 0
    cluster.kill(data_leader)            # the marker has nowhere to go now
    p.commit_transaction(30)             # answered once PrepareCommit is durable
    d = describe(cluster.brokers[coordinator], txn_id)
    assert d.transaction_state == "PrepareCommit"
    # while its markers are pending, as Kafka answers:
    w = Wire(cluster.brokers[coordinator])
    try:
        ids = {"transactional_id": txn_id, "producer_id": d.producer_id,
               "producer_epoch": d.producer_epoch}
        assert w.call(ApiKey.END_TXN, 3, {**ids, "committed": True}
                      ).error_code == Errors.CONCURRENT_TRANSACTIONS
        assert w.call(ApiKey.END_TXN, 3, {**ids, "committed": False}
                      ).error_code == Errors.INVALID_TXN_STATE
        added = w.call(ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
            "v3_and_below_transactional_id": txn_id,
            "v3_and_below_producer_id": d.producer_id,
            "v3_and_below_producer_epoch": d.producer_epoch,
            "v3_and_below_topics": [{"name": "txr", "partitions": [0]}]})
        assert added.results_by_topic_v3_and_below[0].results_by_partition[0] \
            .partition_error_code == Errors.CONCURRENT_TRANSACTIONS
        assert w.call(ApiKey.INIT_PRODUCER_ID, 4, {
            "transactional_id": txn_id, "transaction_timeout_ms": 60000, "producer_id": -1,
            "producer_epoch": -1}).error_code == Errors.CONCURRENT_TRANSACTIONS
    finally:
        w.close()
    assert cluster.stop(coordinator) == 0
    cluster.start_broker(coordinator)
    wait_until(lambda: describe(cluster.brokers[coordinator], txn_id).error_code
               == Errors.NONE, 20, what="the id loaded again")
    assert describe(cluster.brokers[coordinator], txn_id).transaction_state == "PrepareCommit"
    cluster.start_broker(data_leader)
    wait_until(lambda: describe(cluster.brokers[coordinator], txn_id).transaction_state
               == "CompleteCommit", 30, what="CompleteCommit once the leader is back")
    assert controls(cluster.brokers[data_leader], "txr", 0) == ["COMMIT"]


def test_a_leader_verifies_with_a_coordinator_on_another_broker(fresh_cluster):
    """KIP-890 across brokers: the partition's leader asks the id's coordinator (another
    broker) with AddPartitionsToTxn v4 verify_only, and refuses a write to a partition
    the transaction did not add; the added one is taken."""
    cluster = fresh_cluster(**TXN_OVERRIDES)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("txv", 2, 1)], operation_timeout=10)["txv"].result(15)
    leaders = cluster.wait_leaders("txv", 2)
    coordinator_of(cluster, "probe")                     # creates __transaction_state
    state_leaders = cluster.wait_leaders("__transaction_state", 6)
    txn_id = next(t for t in (f"txv-{i}" for i in range(200))
                  if state_leaders[partition_for(t, 6)] not in leaders.values())
    coordinator = state_leaders[partition_for(txn_id, 6)]
    assert coordinator_of(cluster, txn_id) == coordinator
    wc = Wire(cluster.brokers[coordinator])
    try:
        r = init(wc, txn_id)
        pid, epoch = r.producer_id, r.producer_epoch
        assert add_partitions(wc, txn_id, pid, epoch, [("txv", 0)]) == {
            ("txv", 0): Errors.NONE}
        for q, expect in ((1, Errors.INVALID_TXN_STATE), (0, Errors.NONE)):
            wl = Wire(cluster.brokers[leaders[q]])
            try:
                r = produce(wl, "txv", txn_batch([b"v"], pid, epoch, 0), partition=q,
                            transactional_id=txn_id)
                assert r.error_code == expect, (q, r)
            finally:
                wl.close()
        assert end(wc, txn_id, pid, epoch, True) == Errors.NONE
    finally:
        wc.close()
    wait_until(lambda: controls(cluster.brokers[leaders[0]], "txv", 0) == ["COMMIT"], 20,
               what="the COMMIT marker")
