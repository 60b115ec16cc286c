"""Fault tests on a real cluster: ZooKeeper and three fastlog-server processes, a topic of
3 partitions with RF=3 and min.insync.replicas=2, an idempotent acks=all producer of
unique increasing values, and the checker of tests/replication/cluster.py (no acknowledged
record lost, no duplicate, order kept per partition, replicas byte-identical below the
high watermark). Nemesis loops are bounded; a longer soak is tests/replication/soak.py."""

from __future__ import annotations

import asyncio
import time

import pytest

from fastlog import _codec
from fastlog.client.connection import BrokerConnection
from fastlog.protocol import ApiKey, Errors
from tests.client_fixture import run_fastlog
from tests.replication.cluster import HwMonitor, Load, check

pytestmark = pytest.mark.slow

TOPIC = "chk"
PARTITIONS = 3


def _others(cluster, node_id):
    return [b for b in cluster.brokers if b != node_id]


def _wait_new_leader(cluster, partition, old, timeout=30.0):
    return cluster.wait(
        lambda: (lambda st: st["leader"] not in (old, -1) and st["leader"])(
            cluster.states(TOPIC, PARTITIONS)[partition]),
        timeout, f"a leader other than {old} for partition {partition}")


def test_leader_sigkill_and_restart_loses_nothing(cluster_factory):
    cluster = cluster_factory()
    cluster.create_topic(TOPIC, PARTITIONS)
    load = Load(cluster.bootstrap, TOPIC, PARTITIONS).start()
    hw = HwMonitor(cluster.bootstrap, TOPIC, PARTITIONS).start()
    try:
        load.wait_acked(200)
        for rnd in range(2):  # bounded nemesis loop: kill the leader of a partition, restart it
            partition = rnd % PARTITIONS
            victim = cluster.leader_of(TOPIC, partition)
            epoch = cluster.states(TOPIC, PARTITIONS)[partition]["leader_epoch"]
            cluster.kill(victim)
            _wait_new_leader(cluster, partition, victim)
            assert cluster.states(TOPIC, PARTITIONS)[partition]["leader_epoch"] > epoch
            load.wait_acked(100)
            cluster.restart(victim)
            cluster.wait_full_isr(TOPIC, PARTITIONS)
            load.wait_acked(100)
    finally:
        load.stop()
        hw.stop()
    report = check(cluster, TOPIC, PARTITIONS, load)
    assert report.ok, str(report)
    assert report.acked >= 600 and not load.failed, (str(report), list(load.failed.items())[:3])
    # consumers never saw the high watermark go backwards across the failovers
    assert hw.polls > 20 and not hw.decreases, (hw.polls, hw.decreases)


def test_paused_leader_is_fenced_and_acknowledges_nothing_it_lost(cluster_factory):
    cluster = cluster_factory()
    cluster.create_topic(TOPIC, PARTITIONS)
    load = Load(cluster.bootstrap, TOPIC, PARTITIONS).start()
    hw = HwMonitor(cluster.bootstrap, TOPIC, PARTITIONS).start()
    try:
        load.wait_acked(200)
        victim = cluster.leader_of(TOPIC, 0)
        cluster.pause(victim)  # longer than its ZooKeeper session: a zombie when it wakes
        _wait_new_leader(cluster, 0, victim)
        time.sleep(1.0)
        cluster.resume(victim)
        load.wait_acked(200)
        cluster.wait_full_isr(TOPIC, PARTITIONS)
        load.wait_acked(100)
    finally:
        load.stop()
        hw.stop()
    report = check(cluster, TOPIC, PARTITIONS, load)
    assert report.ok, str(report)
    assert not load.failed, list(load.failed.items())[:3]
    assert hw.polls > 20 and not hw.decreases, (hw.polls, hw.decreases)


async def _produce_raw(host, port, partition, value: bytes, acks=-1, timeout_ms=3000):
    conn = BrokerConnection(host, port)
    await conn.connect()
    try:
        batch = _codec.build_batch([(int(time.time() * 1000), None, value)])
        resp = await conn.request(ApiKey.PRODUCE, {
            "transactional_id": None, "acks": acks, "timeout_ms": timeout_ms,
            "topic_data": [{"name": TOPIC, "partition_data": [
                {"index": partition, "records": batch}]}]}, timeout=timeout_ms / 1000 + 10)
        return resp.responses[0].partition_responses[0].error_code
    finally:
        await conn.close()


def test_two_of_three_down_refuses_writes_and_loses_nothing(cluster_factory):
    cluster = cluster_factory()
    cluster.create_topic(TOPIC, PARTITIONS)
    load = Load(cluster.bootstrap, TOPIC, PARTITIONS).start()
    try:
        load.wait_acked(200)
        leader = cluster.leader_of(TOPIC, 0)
        down = _others(cluster, leader)
        for b in down:
            cluster.kill(b)
        # the controller drops the dead brokers from partition 0's ISR: one left < 2
        cluster.wait(lambda: cluster.states(TOPIC, PARTITIONS)[0]["isr"] == [leader], 30,
                     "partition 0's ISR shrunk to its leader")
        b = cluster.brokers[leader]
        code = asyncio.run(_produce_raw(b.host, b.port, 0, b"-1"))
        assert code == Errors.NOT_ENOUGH_REPLICAS
        # acks=1 still works on the lone leader (the availability/durability trade of acks)
        assert asyncio.run(_produce_raw(b.host, b.port, 0, b"-2", acks=1)) == Errors.NONE
        # fastlog topics shows it as under-replicated (Kafka's filter flag)
        r = run_fastlog("topics", "--bootstrap-server", b.bootstrap, "--describe",
                        "--topic", TOPIC, "--under-replicated-partitions")
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert any("Partition: 0\t" in ln and f"Isr: {leader}" in ln for ln in lines), lines
        assert all(ln.startswith(f"\tTopic: {TOPIC}") for ln in lines), lines
        stalled = load.acked_count()
        time.sleep(1.0)
        acked_while_down = load.acked_count() - stalled
        for b in down:
            cluster.restart(b)
        cluster.wait_full_isr(TOPIC, PARTITIONS)
        load.wait_acked(200)
    finally:
        load.stop()
    assert acked_while_down <= 5  # at most what was already in flight when they died
    report = check(cluster, TOPIC, PARTITIONS, load)
    # the two raw records (-1 refused, -2 acks=1) are not the load's: order check ignores them
    report.out_of_order = [x for x in report.out_of_order if x[2] >= 0]
    assert report.ok, str(report)


def test_checker_control_debug_ack_before_replication_loses_records(cluster_factory):
    """The checker's own test: acknowledging before replicating, then losing the leader
    while its followers lag (paused), must show up as lost acknowledged records."""
    cluster = cluster_factory(**{"fastlog.debug.ack.before.replication": "true"})
    cluster.create_topic(TOPIC, PARTITIONS)
    load = Load(cluster.bootstrap, TOPIC, PARTITIONS).start()
    try:
        load.wait_acked(200)
        victim = cluster.leader_of(TOPIC, 0)
        followers = _others(cluster, victim)
        for b in followers:
            cluster.pause(b)
        base = dict(load.acked)
        cluster.wait(lambda: sum(1 for v, (p, _) in list(load.acked.items())
                                 if p == 0 and v not in base) >= 20,
                     20, "records acknowledged by the leader alone")
        cluster.kill(victim)
        for b in followers:
            cluster.resume(b)
        _wait_new_leader(cluster, 0, victim)
        cluster.restart(victim)
        cluster.wait_full_isr(TOPIC, PARTITIONS)
        # (the idempotent producer may now fail fatally: the new leader never saw the
        # sequence numbers it was told were written, which is the point)
    finally:
        load.stop()
    report = check(cluster, TOPIC, PARTITIONS, load)
    assert len(report.lost) > 0, str(report)
    assert not report.diverged, str(report)  # lost everywhere alike: the logs still agree
