"""Exactly-once under failures in a three-broker ZooKeeper cluster (issue 20's test of
record): the consume-transform-produce loop of tests/server/txn/eos.py copies 3,000 keyed
records between topics of replication factor 3 (min ISR 2, the transaction and offsets
logs too) while the broker of its transaction coordinator is SIGKILLed (restarted once the
loop went on without it), then the leader of an output partition (restarted likewise). The
loop's client calls time out after 2 s, shorter than a failover (ZooKeeper session 2 s),
so it also starts new clients whose InitProducerId reaches the new coordinator while the
old transaction is open or committing. The output read with read_committed holds every
input record exactly once. And a zombie whose coordinator's broker died is fenced by a
newer instance on the new coordinator, even once the old broker is back."""

from __future__ import annotations

import random
import time

from confluent_kafka.admin import AdminClient, NewTopic

from fastlog.testing import wait_until
from tests.cluster.test_txn_cluster import coordinator_of
from tests.server.txn.eos import FENCED, CopyLoop, produce_input
from tests.server.txn.test_eos import LoopThread, N, expected_values, values_of
from tests.server.txn.test_txn_clients import PARTITIONS, read_confluent

RF3 = {
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.num.partitions": "6",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
}
TXN_ID = "eos-cluster-app"


def all_bootstrap(cluster) -> str:
    return ",".join(b.bootstrap for b in cluster.brokers.values())


def wait_full_isr(cluster, topic, partitions, timeout=30.0):
    wait_until(lambda: all(len((cluster.state(topic, p) or {}).get("isr", [])) == 3
                           for p in range(partitions)), timeout,
               what=f"every replica of {topic} in sync")


def setup(fresh_cluster, prefix, txn_id):
    """A cluster with topics <prefix>-in (N input records) and <prefix>-out, both of
    replication factor 3, and the transaction log in sync: (cluster, bootstrap, each input
    partition's end offset, the broker of txn_id's coordinator)."""
    cluster = fresh_cluster(**RF3)
    bootstrap = all_bootstrap(cluster)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = (f"{prefix}-in", f"{prefix}-out")
    futures = admin.create_topics([NewTopic(t, PARTITIONS, 3) for t in names],
                                  operation_timeout=10)
    for f in futures.values():
        f.result(20)
    cluster.wait_leaders(names[1], PARTITIONS)
    ends = produce_input(bootstrap, names[0], N)
    coordinator = coordinator_of(cluster, txn_id)      # creates __transaction_state
    wait_full_isr(cluster, "__transaction_state", 6)
    return cluster, bootstrap, ends, coordinator


def test_copy_loop_is_exactly_once_across_coordinator_and_leader_kills(fresh_cluster):
    cluster, bootstrap, ends, coordinator = setup(fresh_cluster, "eos", TXN_ID)
    loop = CopyLoop(bootstrap, TXN_ID, "eos-cluster-group", "eos-in", "eos-out", ends,
                    pause=0.1, timeout=2.0)
    runner = LoopThread(loop, budget=120)
    runner.start()
    rng = random.Random()

    runner.wait_copied(int(N * rng.uniform(0.10, 0.25)), 40)
    time.sleep(rng.uniform(0, 0.3))
    cluster.kill(coordinator)                # the transaction coordinator's broker
    at = loop.copied
    runner.wait_copied(min(at + 300, N), 60)  # went on with a new coordinator
    loop.pause = 1.0                         # slower while the broker comes back,
    cluster.start_broker(coordinator)        # so the copy is still going on after
    wait_full_isr(cluster, "eos-out", PARTITIONS)
    wait_full_isr(cluster, "__transaction_state", 6)
    loop.pause = 0.1
    assert runner.is_alive() and loop.copied < N - 300, loop.state()

    leaders = cluster.leaders("eos-out", PARTITIONS)
    victim = leaders[rng.randrange(PARTITIONS)]
    time.sleep(rng.uniform(0, 0.3))
    cluster.kill(victim)                     # a leader of the output topic
    at = loop.copied
    runner.wait_copied(min(at + 300, N), 60)
    cluster.start_broker(victim)
    runner.join(90)
    got = read_confluent(cluster.brokers[victim], ["eos-out"], expect=N, timeout=30)
    assert values_of(got) == expected_values()


def test_zombie_is_fenced_across_a_coordinator_failover(fresh_cluster):
    """An instance with an open transaction loses its coordinator's broker; a newer instance
    with the same transactional.id initializes on the new coordinator (fencing the old
    epoch and aborting the open transaction there), the old broker comes back as a mere
    replica of the transaction log, and the zombie's commit is refused as fenced."""
    txn_id = "eos-cluster-zombie"
    cluster, bootstrap, ends, coordinator = setup(fresh_cluster, "eoz", txn_id)
    old = CopyLoop(bootstrap, txn_id, "eoz-group", "eoz-in", "eoz-out", ends)
    old.step()
    assert old.commits == 1, old.state()
    assert old.produce_batch() == 100 and old.producer.flush(20) == 0   # left open
    cluster.kill(coordinator)
    new = CopyLoop(bootstrap, txn_id, "eoz-group", "eoz-in", "eoz-out", ends)
    new.start()                                        # on the new coordinator
    assert coordinator_of(cluster, txn_id) != coordinator
    assert sum(new.pos.values()) == 100, new.state()
    cluster.start_broker(coordinator)
    try:
        old.producer.commit_transaction(30)
    except Exception as e:  # noqa: BLE001 - checked below
        assert e.args[0].code() in FENCED, e
    else:
        raise AssertionError("the zombie committed")
    old.close()
    runner = LoopThread(new, budget=60)
    runner.start()
    runner.join(65)
    got = read_confluent(cluster.brokers[coordinator], ["eoz-out"], expect=N, timeout=30)
    assert values_of(got) == expected_values()
    raw = read_confluent(cluster.brokers[coordinator], ["eoz-out"], isolation="read_uncommitted",
                         expect=N + 100, timeout=30)
    assert len(raw) == N + 100                         # the zombie's batch, aborted
