"""KIP-392 on a real cluster: brokers in racks r1/r2/r3 with the rack-aware replica
selector; librdkafka with client.rack set to a follower's rack is sent there by the
leader (Fetch v11 preferred_read_replica) and reads every record, in order."""

from __future__ import annotations

import logging
import time

import pytest

from tests.replication.cluster import Cluster, Load, read_all

pytestmark = pytest.mark.slow

TOPIC = "racks"


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def test_consumer_reads_from_the_follower_in_its_rack(zk_server, tmp_path):
    from confluent_kafka import Consumer, TopicPartition

    from fastlog.testing import make_chroot

    racks = {1: "r1", 2: "r2", 3: "r3"}
    cluster = Cluster(tmp_path, make_chroot(zk_server.hosts), racks=racks, **{
        "replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector"})
    try:
        cluster.start()
        cluster.create_topic(TOPIC, 1)
        load = Load(cluster.bootstrap, TOPIC, 1, rate=500).start()
        load.wait_acked(300)
        load.stop()
        leader = cluster.leader_of(TOPIC, 0)
        follower = next(b for b in cluster.brokers if b != leader)
        lines = _Lines()
        log = logging.getLogger(f"rdkafka-{time.time_ns()}")
        log.addHandler(lines)
        log.setLevel(logging.DEBUG)
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "rack-reader",
                      "client.rack": racks[follower], "auto.offset.reset": "earliest",
                      "enable.auto.commit": False, "debug": "fetch", "logger": log})
        try:
            c.assign([TopicPartition(TOPIC, 0, 0)])
            got = []
            deadline = time.monotonic() + 30
            while len(got) < len(load.acked) and time.monotonic() < deadline:
                for m in c.consume(500, 0.5):
                    if not m.error():
                        got.append(int(m.value()))
        finally:
            c.close()
        assert got == sorted(load.acked), (len(got), len(load.acked))
        moved = [ln for ln in lines.lines if "preferred replica updated" in ln]
        assert moved and f"to {follower} (leader is {leader})" in moved[0], moved
        # and the plain checker still sees the same data from the leader
        data, _ = read_all(cluster.bootstrap, TOPIC, 1)
        assert [v for _, v in data[0]] == got
    finally:
        cluster.close()
