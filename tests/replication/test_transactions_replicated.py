"""Transactions on a replicated partition (a real 3-broker cluster): followers copy the
transactional batches and markers as data and build their own producer state and
.txnindex from what they append, so a new leader after a failover answers read_committed
ListOffsets and fetches exactly as the old one did."""

from __future__ import annotations

import glob
import os

import pytest

from fastlog.protocol import ApiKey, Errors
from tests.replication.cluster import Cluster
from tests.server.test_transactions import (
    check_committed_view,
    kafka_python_committed,
    mixed_log,
)
from tests.server.wire import Wire

pytestmark = pytest.mark.slow

TOPIC = "txn-replicated"


def txn_index_bytes(cluster: Cluster, node_id: int) -> bytes:
    d = cluster.brokers[node_id].data_dir / f"{TOPIC}-0"
    return b"".join(open(p, "rb").read() for p in sorted(glob.glob(os.path.join(d, "*.txnindex"))))


def test_followers_build_the_txn_state_and_a_new_leader_keeps_it(cluster_factory):
    # The test writes transactional batches to the partition without a coordinator, which
    # KIP-890's verification would refuse.
    cluster = cluster_factory(**{"transaction.partition.verification.enable": "false"})
    cluster.create_topic(TOPIC, 1)
    leader = cluster.leader_of(TOPIC, 0)
    w = Wire(cluster.brokers[leader])
    try:
        a, _ = mixed_log(w, TOPIC)
        check_committed_view(w, TOPIC, a, 7)
    finally:
        w.close()
    want = txn_index_bytes(cluster, leader)
    assert len(want) == 34
    followers = [b for b in cluster.brokers if b != leader]
    cluster.wait(lambda: all(txn_index_bytes(cluster, f) == want for f in followers), 20,
                 "the followers' .txnindex to match the leader's")
    cluster.kill(leader)
    cluster.wait(lambda: cluster.leader_of(TOPIC, 0) in followers, 30, "a new leader")
    new = cluster.brokers[cluster.leader_of(TOPIC, 0)]

    def committed_view():
        w = Wire(new)
        try:
            r = w.call(ApiKey.LIST_OFFSETS, 2, {"replica_id": -1, "isolation_level": 1, "topics": [
                {"name": TOPIC, "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
            p = r.topics[0].partitions[0]
            if p.error_code != Errors.NONE:
                return False
            check_committed_view(w, TOPIC, a, 7)
            return True
        finally:
            w.close()

    cluster.wait(committed_view, 30, "the new leader's read_committed view")
    values, position = kafka_python_committed(new, TOPIC, [b"p0", b"p1", b"b1"])
    assert values == [b"p0", b"p1", b"b1"] and position == 7
