"""Replication inside one process: two real BrokerServers (single-node metadata, real logs
in tmp dirs, real sockets on 127.0.0.1) whose roles are set by hand the way the ZooKeeper
role handler sets them. Without ZooKeeper the leader keeps ISR changes local, so this
checks the data path and the rules: follower fetches and byte-identical logs, the high
watermark, acks=all, min.insync.replicas, ISR shrink and expansion, epoch truncation and
the refusals (client on a follower, replica id that is not a replica)."""

from __future__ import annotations

import asyncio
import glob
import os
import time

from fastlog import _codec
from fastlog.protocol import Errors
from fastlog.server.broker import BrokerServer
from fastlog.server.config import KafkaConfig

TOPIC = "rep"
KEY = (TOPIC, 0)


def _config(node_id: int, path, **extra) -> KafkaConfig:
    props = {
        "broker.id": str(node_id), "listeners": "PLAINTEXT://127.0.0.1:0",
        "log.dirs": str(path), "replica.lag.time.max.ms": "600",
        "replica.fetch.wait.max.ms": "100", "replica.fetch.backoff.ms": "50",
        "min.insync.replicas": "2", "group.initial.rebalance.delay.ms": "0",
    }
    props.update({k: str(v) for k, v in extra.items()})
    return KafkaConfig(props)


def _batch(values, producer_id=-1, epoch=-1, seq=-1) -> bytearray:
    ts = int(time.time() * 1000)
    return bytearray(_codec.build_batch([(ts, None, v) for v in values], producer_id=producer_id,
                                        producer_epoch=epoch, base_sequence=seq))


async def _until(cond, timeout=10.0, step=0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        await asyncio.sleep(step)
    return cond()


def _crcs(broker: BrokerServer, below: int) -> list[tuple[int, int, int]]:
    """(base offset, leader epoch, CRC) of every batch below `below` in the segment files."""
    out = []
    d = broker.log_manager.get_log(*KEY).dir
    for path in sorted(glob.glob(os.path.join(d, "*.log"))):
        with open(path, "rb") as f:
            data = f.read()
        for b in _codec.scan_batches(data, verify_crc=True).batches:
            if b.base_offset < below:
                out.append((b.base_offset, b.partition_leader_epoch, b.crc))
    return out


class Pair:
    """Broker 1 leads, broker 2 follows (roles set by hand)."""

    def __init__(self, tmp_path, **extra):
        self.b1 = BrokerServer(_config(1, tmp_path / "b1", **extra))
        self.b2 = BrokerServer(_config(2, tmp_path / "b2", **extra))

    async def start(self):
        for b in (self.b1, self.b2):
            await b.startup()
            await b.create_topic(TOPIC, 1, 1, {})
        ports = {1: self.b1.advertised_port, 2: self.b2.advertised_port}
        for b in (self.b1, self.b2):
            b.replica_manager.broker_endpoint = lambda bid: ("127.0.0.1", ports[bid])
        return self

    def lead(self, leader, follower, epoch, isr=(1, 2)):
        leader.replica_manager.become_leader(TOPIC, 0, epoch, list(isr), [1, 2], 0)
        follower.replica_manager.become_follower(TOPIC, 0, leader.node_id, epoch, [1, 2])

    async def produce(self, broker, values, acks=-1, timeout_ms=5000, **kw):
        res = await broker.replica_manager.append_records(
            [(TOPIC, 0, _batch(values, **kw))], acks=acks, api_version=9, timeout_ms=timeout_ms)
        return res[KEY]

    async def stop(self):
        for b in (self.b1, self.b2):
            await b.shutdown()


def run(tmp_path, body, **extra):
    async def main():
        pair = await Pair(tmp_path, **extra).start()
        try:
            await asyncio.wait_for(body(pair), 60)
        finally:
            await pair.stop()
    asyncio.run(main())


def test_acks_all_waits_for_follower_and_logs_are_identical(tmp_path):
    async def body(pair):
        pair.lead(pair.b1, pair.b2, 1)
        p1 = pair.b1.replica_manager.get_partition(*KEY)
        p2 = pair.b2.replica_manager.get_partition(*KEY)
        for i in range(20):
            r = await pair.produce(pair.b1, [b"v%d" % i, b"w%d" % i])
            assert r.error == Errors.NONE, r
            assert r.base_offset == 2 * i
            # acknowledged => the follower has it and the leader's HW covers it
            assert p2.log.log_end_offset >= r.base_offset + 2
            assert p1.high_watermark >= r.base_offset + 2
        assert await _until(lambda: p2.high_watermark == 40)
        assert p1.high_watermark == 40
        assert _crcs(pair.b1, 40) == _crcs(pair.b2, 40)
        assert {e for _, e, _ in _crcs(pair.b2, 40)} == {1}
        assert p2.log.leader_epoch_cache.entries() == [(1, 0)]
    run(tmp_path, body)


def test_follower_refuses_clients_and_leader_refuses_strange_replica_ids(tmp_path):
    async def body(pair):
        pair.lead(pair.b1, pair.b2, 1)
        rm1, rm2 = pair.b1.replica_manager, pair.b2.replica_manager
        assert rm1.is_leader(*KEY) and not rm2.is_leader(*KEY)
        assert rm2.leader_for(*KEY) == 1 and rm1.leader_for(*KEY) == 1
        r = await pair.produce(pair.b2, [b"x"])
        assert r.error == Errors.NOT_LEADER_OR_FOLLOWER
        p2 = rm2.get_partition(*KEY)
        res = rm2.read_partition(p2, 0, 1024, min_one_batch=True, from_follower=False,
                                 api_version=11)
        assert res.error == Errors.NOT_LEADER_OR_FOLLOWER
        p1 = rm1.get_partition(*KEY)
        for bogus in (7, 1):  # not a replica; the leader itself
            res = rm1.read_partition(p1, 0, 1024, min_one_batch=True, from_follower=True,
                                     api_version=11, replica_id=bogus)
            assert res.error == Errors.NOT_LEADER_OR_FOLLOWER
    run(tmp_path, body)


def test_isr_shrinks_then_expands_and_min_insync_refuses(tmp_path):
    async def body(pair):
        pair.lead(pair.b1, pair.b2, 1)
        rm1, rm2 = pair.b1.replica_manager, pair.b2.replica_manager
        p1 = rm1.get_partition(*KEY)
        assert (await pair.produce(pair.b1, [b"a"])).error == Errors.NONE
        # the follower stops fetching: acks=all times out, then it leaves the ISR
        rm2.stop_replica(TOPIC, 0, delete=False)
        r = await pair.produce(pair.b1, [b"b"], timeout_ms=200)
        assert r.error == Errors.REQUEST_TIMED_OUT
        assert await _until(lambda: p1.isr == [1])
        assert rm1.metrics["isr_shrinks"] == 1
        # the ISR of one is below min.insync.replicas=2: refused before appending
        end = p1.log.log_end_offset
        r = await pair.produce(pair.b1, [b"c"])
        assert r.error == Errors.NOT_ENOUGH_REPLICAS
        assert p1.log.log_end_offset == end
        assert (await pair.produce(pair.b1, [b"d"], acks=1)).error == Errors.NONE
        # an ISR of one: the HW follows the leader's end
        assert p1.high_watermark == p1.log.log_end_offset
        # the follower comes back, catches up and rejoins
        rm2.become_follower(TOPIC, 0, 1, 1, [1, 2])
        assert await _until(lambda: p1.isr == [1, 2])
        assert rm1.metrics["isr_expands"] == 1
        r = await pair.produce(pair.b1, [b"e"])
        assert r.error == Errors.NONE
        hw = p1.high_watermark
        assert _crcs(pair.b1, hw) == _crcs(pair.b2, hw)
    run(tmp_path, body)


def test_new_leader_truncates_old_leaders_divergent_tail_by_epoch(tmp_path):
    async def body(pair):
        pair.lead(pair.b1, pair.b2, 1)
        rm1, rm2 = pair.b1.replica_manager, pair.b2.replica_manager
        for i in range(5):
            assert (await pair.produce(pair.b1, [b"c%d" % i])).error == Errors.NONE
        committed = rm1.get_partition(*KEY).high_watermark
        assert committed == 5
        # the follower is cut off; the old leader appends 3 more with acks=1 (never committed)
        rm2.stop_replica(TOPIC, 0, delete=False)
        for i in range(3):
            assert (await pair.produce(pair.b1, [b"lost%d" % i], acks=1)).error == Errors.NONE
        assert rm1.get_partition(*KEY).log.log_end_offset == 8
        # broker 2 becomes leader at epoch 2 and takes new writes, ISR of one
        rm2.become_leader(TOPIC, 0, 2, [2], [1, 2], 1)
        for i in range(4):
            assert (await pair.produce(pair.b2, [b"n%d" % i], acks=1)).error == Errors.NONE
        p2 = rm2.get_partition(*KEY)
        assert p2.log.log_end_offset == 9
        # the old leader follows: OffsetForLeaderEpoch(1) -> epoch 1 ends at 5 -> truncate
        rm1.become_follower(TOPIC, 0, 2, 2, [1, 2])
        p1 = rm1.get_partition(*KEY)
        assert await _until(lambda: p1.log.log_end_offset == 9 and p1.high_watermark == 9)
        assert await _until(lambda: p2.isr == [2, 1])
        assert _crcs(pair.b1, 9) == _crcs(pair.b2, 9)
        assert [e for _, e, _ in _crcs(pair.b1, 9)] == [1] * 5 + [2] * 4
        assert p1.log.leader_epoch_cache.entries() == [(1, 0), (2, 5)]
        assert rm1.metrics["follower_truncations"] == 1
        assert rm1.metrics["unclean_truncated_records"] == 0
    run(tmp_path, body)


def test_follower_replays_producer_state_so_a_new_leader_spots_duplicates(tmp_path):
    async def body(pair):
        pair.lead(pair.b1, pair.b2, 1)
        rm2 = pair.b2.replica_manager
        r = await pair.produce(pair.b1, [b"x", b"y"], producer_id=42, epoch=0, seq=0)
        assert r.error == Errors.NONE and r.base_offset == 0
        pair.b1.replica_manager.stop_replica(TOPIC, 0, delete=False)
        rm2.become_leader(TOPIC, 0, 2, [2], [1, 2], 1)
        # the producer retries the same batch on the new leader: answered, not re-appended
        r = await pair.produce(pair.b2, [b"x", b"y"], acks=1, producer_id=42, epoch=0, seq=0)
        assert r.error == Errors.NONE and r.base_offset == 0
        assert rm2.get_partition(*KEY).log.log_end_offset == 2
        r = await pair.produce(pair.b2, [b"z"], acks=1, producer_id=42, epoch=0, seq=2)
        assert r.error == Errors.NONE and r.base_offset == 2
    run(tmp_path, body)


def test_debug_switch_acknowledges_before_replication(tmp_path):
    async def body(pair):
        pair.lead(pair.b1, pair.b2, 1)
        pair.b2.replica_manager.stop_replica(TOPIC, 0, delete=False)
        r = await pair.produce(pair.b1, [b"unsafe"], timeout_ms=2000)
        assert r.error == Errors.NONE
        assert pair.b1.replica_manager.get_partition(*KEY).high_watermark == 0
    run(tmp_path, body, **{"fastlog.debug.ack.before.replication": "true"})


def test_high_watermark_checkpoint_survives_restart(tmp_path):
    async def body(pair):
        pair.lead(pair.b1, pair.b2, 1)
        for i in range(3):
            assert (await pair.produce(pair.b1, [b"h%d" % i])).error == Errors.NONE
        assert await _until(lambda: pair.b2.replica_manager.get_partition(*KEY).high_watermark == 3)
    run(tmp_path, body)
    text = (tmp_path / "b2" / "replication-offset-checkpoint").read_text().split("\n")
    assert text[:3] == ["0", "1", f"{TOPIC} 0 3"]


def test_new_leader_answers_latest_offset_only_once_its_hw_caught_up(tmp_path):
    async def body(pair):
        pair.lead(pair.b1, pair.b2, 1)
        rm1, rm2 = pair.b1.replica_manager, pair.b2.replica_manager
        for i in range(5):
            assert (await pair.produce(pair.b1, [b"p%d" % i])).error == Errors.NONE
        p2 = rm2.get_partition(*KEY)
        assert await _until(lambda: p2.log.log_end_offset == 5)
        rm2.stop_replica(TOPIC, 0, delete=False)
        rm1.stop_replica(TOPIC, 0, delete=False)
        # the follower's HW lags the leader's by a fetch round trip: say it saw only 2
        p2 = rm2.become_leader(TOPIC, 0, 2, [2, 1], [1, 2], 1)
        p2.log.high_watermark = 2
        assert rm2.high_watermark_pending(p2)  # ListOffsets(latest): OFFSET_NOT_AVAILABLE
        rm1.become_follower(TOPIC, 0, 2, 2, [1, 2])
        assert await _until(lambda: not rm2.high_watermark_pending(p2))
        assert p2.high_watermark == 5
    run(tmp_path, body)


def test_rack_aware_consumer_is_sent_to_the_follower_in_its_rack(tmp_path):
    from fastlog.zk.paths import BrokerInfo

    async def body(pair):
        racks = {1: "r1", 2: "r2"}
        for b in (pair.b1, pair.b2):
            b.config.values["broker.rack"] = racks[b.node_id]
            b.metadata.brokers = lambda: {i: BrokerInfo(i, (), rack=r) for i, r in racks.items()}
        pair.lead(pair.b1, pair.b2, 1)
        rm1, rm2 = pair.b1.replica_manager, pair.b2.replica_manager
        for i in range(5):
            assert (await pair.produce(pair.b1, [b"r%d" % i])).error == Errors.NONE
        p1, p2 = rm1.get_partition(*KEY), rm2.get_partition(*KEY)
        res = rm1.read_partition(p1, 0, 1 << 20, min_one_batch=True, from_follower=False,
                                 api_version=11, client_rack="r2")
        assert res.preferred_read_replica == 2 and not res.regions
        res = rm1.read_partition(p1, 0, 1 << 20, min_one_batch=True, from_follower=False,
                                 api_version=11, client_rack="r1")
        assert res.preferred_read_replica == -1 and res.regions
        # the follower serves the consumer, below its own high watermark only
        assert rm2.follower_read_partition(*KEY) is p2
        assert await _until(lambda: p2.high_watermark == 5)
        res = rm2.read_partition(p2, 0, 1 << 20, min_one_batch=True, from_follower=False,
                                 api_version=11)
        assert res.error == Errors.NONE and res.size > 0 and res.high_watermark == 5
        res = rm2.read_partition(p2, 99, 1 << 20, min_one_batch=True, from_follower=False,
                                 api_version=11)
        assert res.error == Errors.OFFSET_NOT_AVAILABLE
    run(tmp_path, body, **{"replica.selector.class":
                           "org.apache.kafka.common.replica.RackAwareReplicaSelector"})


def test_isr_shrinking_under_a_parked_produce_answers_not_enough_replicas_after_append(tmp_path):
    async def body(pair):
        pair.lead(pair.b1, pair.b2, 1)
        assert (await pair.produce(pair.b1, [b"a"])).error == Errors.NONE
        pair.b2.replica_manager.stop_replica(TOPIC, 0, delete=False)
        # parked until the lagging follower is dropped (600 ms): then the HW covers the
        # batch, but only one replica has it, below min.insync.replicas=2
        r = await pair.produce(pair.b1, [b"b"], timeout_ms=5000)
        assert r.error == Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        assert pair.b1.replica_manager.get_partition(*KEY).isr == [1]
    run(tmp_path, body)


def test_truncation_below_the_high_watermark_is_counted_as_unclean_loss(tmp_path):
    async def body(pair):
        pair.lead(pair.b1, pair.b2, 1)
        rm1, rm2 = pair.b1.replica_manager, pair.b2.replica_manager
        for i in range(3):
            assert (await pair.produce(pair.b1, [b"c%d" % i])).error == Errors.NONE
        rm2.stop_replica(TOPIC, 0, delete=False)
        p1 = rm1.get_partition(*KEY)
        assert await _until(lambda: p1.isr == [1])
        for i in range(2):  # committed by an ISR of one
            assert (await pair.produce(pair.b1, [b"u%d" % i], acks=1)).error == Errors.NONE
        assert p1.high_watermark == 5
        # an out-of-sync replica is made leader (what unclean election does)
        rm2.become_leader(TOPIC, 0, 2, [2], [1, 2], 2)
        rm1.become_follower(TOPIC, 0, 2, 2, [1, 2])
        assert await _until(lambda: rm1.metrics["unclean_truncated_records"] == 2)
        assert p1.log.log_end_offset == 3
    run(tmp_path, body)


def test_batches_larger_than_replica_fetch_max_bytes_still_replicate(tmp_path):
    async def body(pair):
        pair.lead(pair.b1, pair.b2, 1)
        for i in range(3):
            r = await pair.produce(pair.b1, [bytes([65 + i]) * 700 for _ in range(4)])
            assert r.error == Errors.NONE
        assert _crcs(pair.b1, 12) == _crcs(pair.b2, 12)
    run(tmp_path, body, **{"replica.fetch.max.bytes": "1024"})


def test_stop_replica_keeps_the_log_unless_deleting(tmp_path):
    async def body(pair):
        pair.lead(pair.b1, pair.b2, 1)
        assert (await pair.produce(pair.b1, [b"k"])).error == Errors.NONE
        rm2, lm2 = pair.b2.replica_manager, pair.b2.log_manager
        rm2.stop_replica(TOPIC, 0, delete=False)
        assert rm2.get_partition(*KEY) is None and lm2.get_log(*KEY) is not None
        rm2.stop_replica(TOPIC, 0, delete=True)
        assert lm2.get_log(*KEY) is None
        assert not (tmp_path / "b2" / f"{TOPIC}-0").exists()
    run(tmp_path, body)


def test_internal_appends_wait_for_the_isr(tmp_path):
    from fastlog.server.replica_manager import ReplicationError

    async def body(pair):
        pair.lead(pair.b1, pair.b2, 1)
        rm1, rm2 = pair.b1.replica_manager, pair.b2.replica_manager
        info = await rm1.append_internal(TOPIC, 0, _batch([b"offset-commit"]))
        # returned => the follower has it (the group coordinator answers only then)
        assert rm2.get_partition(*KEY).log.log_end_offset >= info.last_offset + 1
        rm2.stop_replica(TOPIC, 0, delete=False)
        try:
            await rm1.append_internal(TOPIC, 0, _batch([b"not replicated"]))
            raise AssertionError("acknowledged without its follower")
        except ReplicationError as e:
            assert e.error_code == Errors.REQUEST_TIMED_OUT
        assert await _until(lambda: rm1.get_partition(*KEY).isr == [1])
        try:
            await rm1.append_internal(TOPIC, 0, _batch([b"refused"]))
            raise AssertionError("accepted below min.insync.replicas")
        except ReplicationError as e:
            assert e.error_code == Errors.NOT_ENOUGH_REPLICAS
        try:
            await rm2.append_internal(TOPIC, 0, _batch([b"x"]))
        except KeyError:
            pass  # stopped there: not hosted
    run(tmp_path, body, **{"offsets.commit.timeout.ms": "300"})


def test_follower_behind_the_leaders_log_start_restarts_its_log_there(tmp_path):
    async def body(pair):
        pair.lead(pair.b1, pair.b2, 1)
        rm1, rm2 = pair.b1.replica_manager, pair.b2.replica_manager
        for i in range(5):
            assert (await pair.produce(pair.b1, [b"o%d" % i])).error == Errors.NONE
        rm2.stop_replica(TOPIC, 0, delete=False)
        p1 = rm1.get_partition(*KEY)
        assert await _until(lambda: p1.isr == [1])
        for i in range(5):
            assert (await pair.produce(pair.b1, [b"n%d" % i], acks=1)).error == Errors.NONE
        assert rm1.delete_records(TOPIC, 0, 8) == (Errors.NONE, 8)
        rm2.become_follower(TOPIC, 0, 1, 1, [1, 2])
        p2 = rm2.get_partition(*KEY)
        assert await _until(lambda: p2.log.log_end_offset == 10)
        assert p2.log.log_start_offset == 8
        assert await _until(lambda: p1.isr == [1, 2])
        assert _crcs(pair.b1, 10)[-2:] == _crcs(pair.b2, 10)
    run(tmp_path, body)


def test_large_batches_written_off_the_loop_replicate_in_order(tmp_path):
    # Batches over ReplicaManager.OFF_LOOP_WRITE_BYTES are written by the pool and
    # published once written; appends sent meanwhile to the same partition queue behind
    # them, and followers only ever fetch what is published.
    from fastlog.server.replica_manager import OFF_LOOP_WRITE_BYTES

    large = [bytes([65 + i % 26]) * 4000 for i in range(160)]
    assert len(_batch(large)) >= OFF_LOOP_WRITE_BYTES

    async def body(pair):
        pair.lead(pair.b1, pair.b2, 1)
        sends = []
        for i in range(4):
            sends.append(pair.produce(pair.b1, large))
            sends.append(pair.produce(pair.b1, [b"small-%d" % i]))
        results = await asyncio.gather(*sends)
        assert all(r.error == Errors.NONE for r in results), results
        spans = sorted((r.base_offset, len(large) if i % 2 == 0 else 1)
                       for i, r in enumerate(results))
        offset = 0
        for base, n in spans:
            assert base == offset
            offset += n
        assert offset == 4 * len(large) + 4
        p2 = pair.b2.replica_manager.get_partition(*KEY)
        assert await _until(lambda: p2.high_watermark == offset)
        assert _crcs(pair.b1, offset) == _crcs(pair.b2, offset)
    run(tmp_path, body)


def test_a_broker_in_controlled_shutdown_stops_following_and_stays_out_of_the_isr(tmp_path):
    """stop_following (a broker about to ask for its controlled shutdown): its followers
    stop fetching, a follower role given later does not fetch either, so the leader takes
    it out of the ISR and never adds it back (a fetching replica caught up and rejoined
    the ISR the controller had shrunk for the shutdown)."""
    async def body(pair):
        pair.lead(pair.b1, pair.b2, 1)
        rm1, rm2 = pair.b1.replica_manager, pair.b2.replica_manager
        p1 = rm1.get_partition(*KEY)
        assert (await pair.produce(pair.b1, [b"a"])).error == Errors.NONE
        rm2.stop_following()
        assert not rm2.fetcher_manager.has(KEY)
        # leadership moved by the controller: the new role does not start a fetch
        rm2.become_follower(TOPIC, 0, 1, 2, [1, 2])
        assert not rm2.fetcher_manager.has(KEY)
        assert await _until(lambda: p1.isr == [1])   # replica.lag.time.max.ms=600
        end = rm2.get_partition(*KEY).log.log_end_offset
        assert (await pair.produce(pair.b1, [b"b"], acks=1)).error == Errors.NONE
        await asyncio.sleep(1.0)
        assert p1.isr == [1] and rm1.metrics["isr_expands"] == 0
        assert rm2.get_partition(*KEY).log.log_end_offset == end
    run(tmp_path, body)
