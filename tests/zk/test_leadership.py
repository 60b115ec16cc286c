"""LeadershipTracker: the metadata cache's changes become this broker's replica roles."""

import asyncio
import threading

import pytest

from fastlog.testing import wait_until
from fastlog.zk.client import KafkaZkClient
from fastlog.zk.controller import ZkController
from fastlog.zk.leadership import LeadershipTracker
from fastlog.zk.metadata_store import ZkMetadataStore
from fastlog.zk.paths import NO_LEADER, BrokerInfo, EndPoint, LeaderAndIsr, TopicAssignment
from tests.zk_fixture import expire_session


class Recorder:
    def __init__(self):
        self.calls = []
        self.lock = threading.Lock()

    def _add(self, *call):
        with self.lock:
            self.calls.append(call)

    def become_leader(self, topic, partition, state):
        self._add("leader", topic, partition, state.leader_epoch)

    def become_follower(self, topic, partition, state):
        self._add("follower", topic, partition, state.leader)

    def stop_replica(self, topic, partition, delete):
        self._add("stop", topic, partition, delete)

    def session_changed(self, expired):
        self._add("session", expired)

    def has(self, *call):
        with self.lock:
            return call in self.calls


@pytest.fixture
def loop():
    lp = asyncio.new_event_loop()
    t = threading.Thread(target=lp.run_forever, daemon=True)
    t.start()
    yield lp
    lp.call_soon_threadsafe(lp.stop)
    t.join(5)
    lp.close()


@pytest.fixture
def broker(zk_hosts, loop):
    made = []

    def make(broker_id):
        zk = KafkaZkClient(zk_hosts, session_timeout=4.0).start()
        store = ZkMetadataStore(zk, broker_id, wait_timeout=5.0)
        store.start_sync()
        zk.register_broker(BrokerInfo(broker_id, (EndPoint("PLAINTEXT", "127.0.0.1",
                                                           9300 + broker_id),)))
        controller = ZkController(zk, broker_id).start()
        rec = Recorder()
        LeadershipTracker(store, broker_id, rec, loop).start()
        made.append((zk, controller))
        return zk, store, controller, rec
    yield make
    for zk, controller in made:
        controller.stop(resign=False)
        try:
            zk.close()
        except Exception:
            pass


def run(loop, coro):
    return asyncio.run_coroutine_threadsafe(coro, loop).result(30)


def test_roles_follow_creation_failover_and_deletion(broker, loop, zk_hosts):
    zk1, store1, ctl1, rec1 = broker(1)
    wait_until(lambda: ctl1.is_active, what="controller")
    zk2, store2, ctl2, rec2 = broker(2)
    run(loop, store1.create_topic("t", 3, [[1, 2], [2, 1], [2]], {}))
    wait_until(lambda: rec1.has("leader", "t", 0, 0) and rec1.has("follower", "t", 1, 2),
               what="broker 1 roles")
    wait_until(lambda: rec2.has("follower", "t", 0, 1) and rec2.has("leader", "t", 1, 0)
               and rec2.has("leader", "t", 2, 0), what="broker 2 roles")
    assert not any(c[1:3] == ("t", 2) for c in rec1.calls)  # not a replica of t-2
    ctl2.stop(resign=False)
    zk2.close()  # broker 2 goes away: broker 1 leads t-1 at a new epoch
    wait_until(lambda: rec1.has("leader", "t", 1, 1), what="failover role")
    run(loop, store1.delete_topic("t"))
    wait_until(lambda: rec1.has("stop", "t", 0, True) and rec1.has("stop", "t", 1, True),
               what="stop replicas on deletion")
    expire_session(zk1.kazoo, zk_hosts)
    wait_until(lambda: rec1.has("session", True) and rec1.has("session", False),
               what="session events")
    assert store1.partition_leader("t", 0) == NO_LEADER


def test_isr_change_is_not_a_role_change_and_reassignment_away_stops_the_replica(broker, loop):
    zk1, store1, ctl1, rec1 = broker(1)
    wait_until(lambda: ctl1.is_active, what="controller")
    broker(2)
    run(loop, store1.create_topic("r", 1, [[1, 2]], {}))
    wait_until(lambda: rec1.has("leader", "r", 0, 0), what="leader role")
    st = zk1.get_partition_state("r", 0)
    zk1.conditional_update_partition_state(
        "r", 0, LeaderAndIsr(1, st.leader_epoch, (1,), st.controller_epoch, st.zk_version))
    wait_until(lambda: store1.topic("r").partitions[0].isr == [1], what="isr in cache")
    assert sum(1 for c in rec1.calls if c[0] == "leader") == 1
    assignment, version = zk1.get_topic_assignment_and_version("r")
    zk1.set_topic_assignment(TopicAssignment("r", {0: [2]}, assignment.topic_id), version)
    wait_until(lambda: rec1.has("stop", "r", 0, False), what="stop without delete")
