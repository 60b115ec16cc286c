"""ISR changes against a real ZooKeeper state znode (the in-process pair of
test_replica_manager.py with the leader's metadata pointing at a KafkaZkClient): a shrink
is a conditional update of /brokers/topics/<t>/partitions/<p>/state announced under
/isr_change_notification, and a leader whose epoch ZooKeeper no longer records (a zombie
that missed an election) fails that update, is fenced and acknowledges nothing more."""

from __future__ import annotations

import asyncio
import json

from fastlog.protocol import Errors
from fastlog.zk import paths
from fastlog.zk.client import KafkaZkClient
from tests.replication.test_replica_manager import KEY, TOPIC, Pair, _until

STATE = f"/brokers/topics/{TOPIC}/partitions/0/state"


def _state(leader, epoch, isr) -> bytes:
    return paths.encode_partition_state(paths.LeaderAndIsr(leader, epoch, tuple(isr), 1))


def run_with_zk(tmp_path, zk_hosts, body):
    zk = KafkaZkClient(zk_hosts, session_timeout=10.0).start()
    zk.kazoo.create(STATE, _state(1, 1, [1, 2]), makepath=True)

    async def main():
        pair = await Pair(tmp_path).start()
        pair.b1.metadata.zk = zk
        try:
            await asyncio.wait_for(body(pair, zk), 60)
        finally:
            await pair.stop()
    try:
        asyncio.run(main())
    finally:
        zk.close()


def test_isr_shrink_is_a_conditional_znode_update_and_announced(tmp_path, zk_hosts):
    async def body(pair, zk):
        pair.lead(pair.b1, pair.b2, 1)
        assert (await pair.produce(pair.b1, [b"a"])).error == Errors.NONE
        pair.b2.replica_manager.stop_replica(TOPIC, 0, delete=False)
        p1 = pair.b1.replica_manager.get_partition(*KEY)
        assert await _until(lambda: p1.isr == [1])
        data, stat = zk.kazoo.get(STATE)
        st = json.loads(data)
        assert (st["leader"], st["leader_epoch"], st["isr"]) == (1, 1, [1])
        assert p1.partition_epoch == stat.version == 1
        assert await _until(lambda: zk.get_isr_change_notifications())
        notes = zk.get_isr_change_notifications()
        assert (TOPIC, 0) in zk.read_isr_change_notification(notes[-1])
    run_with_zk(tmp_path, zk_hosts, body)


def test_zombie_leader_fails_its_isr_update_and_stops_acknowledging(tmp_path, zk_hosts):
    async def body(pair, zk):
        pair.lead(pair.b1, pair.b2, 1)
        rm1 = pair.b1.replica_manager
        assert (await pair.produce(pair.b1, [b"a"])).error == Errors.NONE
        # the controller elected broker 2 at epoch 2 and broker 1 never heard of it
        zk.kazoo.set(STATE, _state(2, 2, [2]))
        pair.b2.replica_manager.stop_replica(TOPIC, 0, delete=False)
        # a produce parks (its follower is gone); the shrink that would complete it fails
        r = await pair.produce(pair.b1, [b"never acknowledged"], timeout_ms=5000)
        assert r.error == Errors.NOT_LEADER_OR_FOLLOWER
        p1 = rm1.get_partition(*KEY)
        assert p1.fenced and p1.isr == [1, 2] and rm1.metrics["fenced_leaderships"] == 1
        assert not rm1.is_leader(*KEY)
        assert (await pair.produce(pair.b1, [b"refused"])).error == Errors.NOT_LEADER_OR_FOLLOWER
        assert json.loads(zk.kazoo.get(STATE)[0])["leader"] == 2  # untouched
    run_with_zk(tmp_path, zk_hosts, body)
