"""fastlog.server.partition.PartitionCounts, the replica manager's gauges kept as partitions
change (instead of a walk per scrape): after every kind of change (role changes, ISR
shrink and expansion, a failed log dir, a partition stopped or deleted, a reassignment, a
min.insync.replicas change) the kept counts equal a walk over the hosted partitions
(_exposition.replica_counts, what the scrape computed before), over real Partitions with
real logs and over real brokers in one process; a missed recount is found by the scrape's
check and rebuilt; the lag rows' high watermarks noted by the log walk are the replica
walk's."""

from __future__ import annotations

import asyncio
import logging
import random

from fastlog.server._exposition import (
    GaugeRows,
    HostedWatermarks,
    add_log_rows,
    replica_counts,
)

from fastlog.server.broker import BrokerServer
from fastlog.server.metric_text import LibraryFamilies
from fastlog.server.metrics import BrokerMetrics, late_transactions
from fastlog.server.partition import Partition, PartitionCounts
from fastlog.server.producer_state import LATE_TRANSACTION_BUFFER_MS, ProducerStateEntry
from tests.replication.test_replica_manager import KEY, TOPIC, _config, _until, run
from tests.server.log.conftest import append_n, open_log


def walked(partitions, min_isr_of) -> tuple:
    """(leaders, under-replicated, under min ISR, offline) by a walk over `partitions`."""
    return replica_counts(list(partitions), {}, min_isr_of, 0, 0, lambda: None, 16)[:4]


def kept(counts: PartitionCounts, min_isr_of) -> tuple:
    return (counts.leaders, counts.under_replicated, counts.under_min_isr(min_isr_of),
            len(counts.offline_keys))


def test_kept_counts_equal_the_walk_after_random_changes_of_real_partitions(tmp_path):
    """Real Partitions (single node and cluster ones, three topics) through 1,500 random
    changes as the replica manager makes them (leader and follower roles with any ISR and
    replica set, an ISR written, a failed log dir, stopped and hosted again, a
    min.insync.replicas change): after each, the kept counts are the walk's."""
    rng = random.Random(21)
    logs, parts = [], []
    for i in range(12):
        topic = ("a", "b", "c")[i % 3]
        lg = open_log(tmp_path / f"{topic}-{i}")
        append_n(lg, 2, records=1)
        logs.append(lg)
        parts.append(Partition(topic, i, lg, 0, [1], local_id=None if i < 3 else 1))
    counts, hosted = PartitionCounts(), {}
    min_isr = {"a": 1, "b": 2, "c": 3}
    seen = set()
    try:
        for p in parts:
            hosted[p.key] = p
            counts.host(p)
        for step in range(1500):
            p = rng.choice(parts)
            replicas = rng.sample([1, 2, 3, 4], rng.randint(1, 4))
            op = rng.randrange(7)
            if op == 0 and p.local_id is not None:
                isr = rng.sample(replicas, rng.randint(0, len(replicas)))
                p.make_leader(rng.randint(0, 3), isr, replicas, step, step)
            elif op == 1 and p.local_id is not None:
                p.make_follower(rng.choice([-1, 2, 3]), rng.randint(0, 3), replicas)
            elif op == 2 and p.is_leader:  # an ISR change written (ReplicaManager._update_isr)
                p.isr = rng.sample(p.replicas, rng.randint(1, len(p.replicas)))
                p.recount()
            elif op == 3:  # its log dir failed
                p.offline = True
                p.recount()
            elif op == 4 and p.key in hosted:  # stopped or deleted
                del hosted[p.key]
                counts.drop(p)
            elif op == 5 and p.key not in hosted:  # hosted again (a reassignment back)
                p.offline = False
                hosted[p.key] = p
                counts.host(p)
            elif op == 6:
                min_isr[rng.choice("abc")] = rng.randint(1, 4)
            got = kept(counts, min_isr.__getitem__)
            assert got == walked(hosted.values(), min_isr.__getitem__), (step, op)
            seen.update(i for i, n in enumerate(got) if n)
        assert seen == {0, 1, 2, 3}  # every count was above zero at some point
        # a partition no longer hosted changes nothing any more
        p = next(q for q in parts if q.key in hosted)
        del hosted[p.key]
        counts.drop(p)
        p.offline = True
        p.recount()
        assert kept(counts, min_isr.__getitem__) == walked(hosted.values(), min_isr.__getitem__)
    finally:
        for lg in logs:
            lg.close()


def test_late_transactions_over_the_open_ones_only(tmp_path):
    """late_transactions counts the led, online, hosted partitions whose oldest open
    transaction is late, as the walk did (replica_counts' fifth figure), looking only at
    the producer states with an open transaction; one ended or replaced no longer counts."""
    now, max_timeout = 10**12, 60_000
    late_ms = now - max_timeout - LATE_TRANSACTION_BUFFER_MS - 1
    parts = {}
    for i in range(6):
        p = Partition("txn", i, None, 0, [1, 2], local_id=1)
        p.leader_id = 1 if i != 3 else 2  # 3: a follower here
        parts[p.key] = p
    parts[("txn", 4)].offline = True
    for i, last in ((0, late_ms), (1, now - 1), (3, late_ms), (4, late_ms), (5, late_ms)):
        state = parts[("txn", i)].producer_state
        entry = state.producers[7] = ProducerStateEntry(7, 0)
        entry.last_timestamp = last
        state.update(7, 0, 0, 1, i * 10, i * 10, last, is_transactional=True)
    walk = replica_counts(list(parts.values()), {}, lambda t: 1, now, max_timeout,
                          lambda: None, 16)[4]
    assert late_transactions(parts, now, max_timeout) == walk == 2  # 0 and 5
    parts[("txn", 5)].producer_state.complete_txn(7, 0, True, 0, 60, now)
    assert late_transactions(parts, now, max_timeout) == 1
    parts[("txn", 0)].producer_state.truncate_and_reload()
    assert late_transactions(parts, now, max_timeout) == 0


def test_kept_counts_over_two_brokers_through_roles_isr_and_reassignment(tmp_path):
    """Two brokers in one process replicating a partition: the kept counts of both equal
    the walk after leading and following, an ISR shrink (the follower stopped) and
    expansion, a leadership swap, the partition moved off a broker (stop_replica, log
    kept) and back, a topic of many partitions added, and a partition deleted."""

    async def body(pair):
        rms = (pair.b1.replica_manager, pair.b2.replica_manager)

        def same():
            for b, rm in zip((pair.b1, pair.b2), rms, strict=True):
                def min_isr_of(topic, b=b):
                    return b.log_config(topic).min_insync_replicas
                assert kept(rm.counts, min_isr_of) == walked(rm.partitions.values(),
                                                             min_isr_of)
            return tuple(kept(rm.counts, lambda t: 2) for rm in rms)

        same()
        pair.lead(pair.b1, pair.b2, 1)
        base = same()[0]  # (with __consumer_offsets' 50 partitions, ISR of one each)
        p1 = rms[0].get_partition(*KEY)
        assert (await pair.produce(pair.b1, [b"a"])).error.name == "NONE"
        rms[1].stop_replica(TOPIC, 0, delete=False)  # moved off b2 (log kept)
        same()
        assert await _until(lambda: p1.isr == [1])  # shrink
        under = same()[0]
        assert under == (base[0], base[1] + 1, base[2] + 1, 0)
        rms[1].become_follower(TOPIC, 0, 1, 1, [1, 2])  # moved back: follows, rejoins
        assert await _until(lambda: p1.isr == [1, 2])
        assert same()[0] == base
        pair.lead(pair.b2, pair.b1, 2)  # leadership swap
        assert await _until(lambda: rms[1].get_partition(*KEY).isr == [1, 2])
        same()
        await pair.b1.create_topic("many", 30, 1, {})
        for i in range(30):
            rms[0].become_leader("many", i, 1, [1], [1], 0)
        assert same()[0][0] >= 30
        rms[0].stop_replica("many", 7, delete=True)
        rms[0].delete_partition("many", 8)
        rms[0].become_follower("many", 9, -1, 2, [1])  # no leader
        assert pair.b1.log_manager.get_log("many", 7) is None
        same()

    run(tmp_path, body)


def test_failed_log_dir_counts_and_the_log_walks_watermarks(tmp_path):
    """One broker with two log dirs, one failed (handle_log_dir_failure): its partitions
    are counted offline as by the walk, and the high watermarks the log rows note for the
    lag rows are the replica walk's (offline ones marked offline)."""

    async def main():
        b = BrokerServer(_config(1, tmp_path / "d1", **{
            "log.dirs": f"{tmp_path / 'd1'},{tmp_path / 'd2'}", "min.insync.replicas": "1"}))
        await b.startup()
        try:
            await b.create_topic("t", 8, 1, {})
            rm = b.replica_manager
            for i in range(8):
                r = await rm.append_records([("t", i, bytearray(_batch(i + 1)))], acks=1,
                                            api_version=9, timeout_ms=5000)
                assert r[("t", i)].error.name == "NONE"
            failed = b.log_manager.log_dir_of("t", 0)
            keys = rm.handle_log_dir_failure(failed)
            lost = sum(topic == "t" for topic, _ in keys)
            assert 0 < lost < 8

            def min_isr_of(topic):
                return b.log_config(topic).min_insync_replicas
            assert kept(rm.counts, min_isr_of) == walked(rm.partitions.values(), min_isr_of)
            assert len(rm.counts.offline_keys) == len(keys)
            metrics = BrokerMetrics(b)
            list(metrics.collector._log_series(b))
            from_logs = metrics.collector._watermarks
            from_walk = HostedWatermarks()
            replica_counts(list(rm.partitions.values()), {}, min_isr_of, 0, 0, lambda: None,
                           16, from_walk)
            for topic, i in rm.partitions:
                assert from_logs.get(topic, i) == from_walk.get(topic, i), (topic, i)
            # (from the log walk itself: every hosted partition noted but the offline ones)
            noted = add_log_rows(GaugeRows(4), {}, lambda t: 0, b.log_manager.all_logs(),
                                 lambda: None, 16, HostedWatermarks(), dict(rm.partitions),
                                 set(rm.counts.offline_keys))
            assert noted == len(rm.partitions) - len(keys)
            assert [from_logs.get("t", i) for i in range(8)].count(-2) == lost
        finally:
            await b.shutdown()

    asyncio.run(main())


def test_the_kept_hosted_slots_follow_every_change_between_scrapes(tmp_path):
    """The log rows keep which log figures' slots are hosted (hosted_slots) from one
    scrape to the next; after each change (appends, a topic created, a partition stopped
    without deletion, a failed log dir, a topic deleted) the next scrape's high
    watermarks for the lag rows are the replica walk's, and a partition no longer hosted
    has none, though its log stays listed."""

    async def main():
        b = BrokerServer(_config(1, tmp_path / "d1", **{
            "log.dirs": f"{tmp_path / 'd1'},{tmp_path / 'd2'}", "min.insync.replicas": "1"}))
        await b.startup()
        try:
            rm = b.replica_manager
            metrics = BrokerMetrics(b)

            def same():
                list(metrics.collector._log_series(b))
                from_logs = metrics.collector._watermarks
                from_walk = HostedWatermarks()
                replica_counts(list(rm.partitions.values()), {}, lambda t: 1, 0, 0,
                               lambda: None, 16, from_walk)
                for topic, i in rm.partitions:
                    assert from_logs.get(topic, i) == from_walk.get(topic, i), (topic, i)
                for lg in b.log_manager.all_logs():
                    if (lg.topic, lg.partition) not in rm.partitions:
                        assert from_logs.get(lg.topic, lg.partition) is None
                return from_logs

            await b.create_topic("t", 6, 1, {})
            same()
            for i in range(6):
                r = await rm.append_records([("t", i, bytearray(_batch(i + 2)))], acks=1,
                                            api_version=9, timeout_ms=5000)
                assert r[("t", i)].error.name == "NONE"
            assert same().get("t", 5) == 7
            await b.create_topic("u", 3, 1, {})
            assert same().get("u", 2) == 0
            rm.stop_replica("u", 1, delete=False)  # (its log stays listed)
            assert b.log_manager.get_log("u", 1) is not None
            assert same().get("u", 1) is None
            keys = rm.handle_log_dir_failure(b.log_manager.log_dir_of("t", 0))
            marks = same()
            assert all(marks.get(topic, i) == -2 for topic, i in keys if (topic, i) in
                       rm.partitions)
            await b.delete_topic("u")
            assert same().get("u", 0) is None
        finally:
            await b.shutdown()

    asyncio.run(main())


def test_a_missed_recount_is_found_by_the_scrapes_check_and_rebuilt(tmp_path, caplog):
    """A change made without its recount (as a future code path might): the scrape's
    periodic check finds the kept counts differ from the walk, says so once, and the loop
    rebuilds them; with nothing wrong the check finds nothing."""

    async def main():
        b = BrokerServer(_config(1, tmp_path / "d1", **{"min.insync.replicas": "1"}))
        await b.startup()
        try:
            await b.create_topic("t", 4, 1, {})
            rm = b.replica_manager
            metrics = BrokerMetrics(b)
            check = metrics.collector._check_counts

            def min_isr_of(topic):
                return b.log_config(topic).min_insync_replicas
            assert check(rm, min_isr_of)
            p = rm.get_partition("t", 2)
            p.offline = True  # no recount
            with caplog.at_level(logging.WARNING, "fastlog.server.metrics"):
                assert not check(rm, min_isr_of)
            assert "differ" in caplog.text
            await asyncio.sleep(0.05)  # the loop runs the rebuild
            assert kept(rm.counts, min_isr_of) == walked(rm.partitions.values(), min_isr_of)
            assert rm.counts.offline_keys == {("t", 2)}
            assert check(rm, min_isr_of)
            p.offline = False
            p.recount()  # the rebuilt counts are the ones the partitions update now
            assert not rm.counts.offline_keys and check(rm, min_isr_of)
        finally:
            await b.shutdown()

    asyncio.run(main())


def _batch(n: int) -> bytes:
    from fastlog import _codec
    return _codec.build_batch([(0, None, b"v%d" % i) for i in range(n)])


def test_the_controllers_counts_follow_topics_and_live_brokers(tmp_path):
    """The controller's counts (topics, partitions, offline) are kept while the
    metadata's map of topics and the live brokers stay the same, and counted anew after
    a topic is created, grown or deleted, or the live brokers change."""

    async def main():
        b = BrokerServer(_config(1, tmp_path / "d1"))
        await b.startup()
        try:
            collector = BrokerMetrics(b).collector

            def counts():
                out = LibraryFamilies()
                collector._controller_metrics(out, b)
                got = {f.name: f.samples[0].value for f in out.families}
                prefix = "kafka_controller_kafkacontroller_"
                return tuple(int(got[prefix + k]) for k in
                             ("globaltopiccount", "globalpartitioncount",
                              "offlinepartitionscount"))

            base = counts()
            await b.create_topic("a", 4, 1, {})
            assert counts() == (base[0] + 1, base[1] + 4, 0)
            kept = collector._controller_counts
            assert counts() == (base[0] + 1, base[1] + 4, 0)
            assert collector._controller_counts is kept  # (nothing changed: not counted)
            await b.metadata.add_partitions("a", [[b.node_id]] * 2)
            assert counts() == (base[0] + 1, base[1] + 6, 0)
            node, b.node_id = b.node_id, b.node_id + 1  # (as if its broker were gone)
            try:
                assert counts() == (base[0] + 1, base[1] + 6, base[1] + 6)
            finally:
                b.node_id = node
            await b.delete_topic("a")
            assert counts() == base
        finally:
            await b.shutdown()

    asyncio.run(main())
