"""ZkMetadataStore: the broker's metadata interface over ZooKeeper, with a controller
running; every broker's cache follows leadership; cluster id check; producer id blocks;
ZooKeeper restarts."""

import asyncio
import json
import time

import pytest
from kazoo.exceptions import ConnectionLoss

from fastlog.metadata import MetadataStore
from fastlog.testing import wait_until
from fastlog.zk.client import KafkaZkClient
from fastlog.zk.controller import ZkController
from fastlog.zk.meta_properties import InconsistentClusterIdError, check_cluster_id
from fastlog.zk.metadata_store import ZkMetadataStore
from fastlog.zk.paths import NO_LEADER, BrokerInfo, EndPoint
from tests.zk_fixture import expire_session


class Node:
    def __init__(self, hosts, broker_id, session_timeout=4.0):
        self.id = broker_id
        self.zk = KafkaZkClient(hosts, session_timeout=session_timeout).start()
        self.store = ZkMetadataStore(self.zk, broker_id, wait_timeout=5.0)
        self.store.start_sync()
        self.zk.register_broker(BrokerInfo(broker_id, (EndPoint("PLAINTEXT", "127.0.0.1",
                                                                9100 + broker_id),)))
        self.controller = ZkController(self.zk, broker_id).start()

    def crash(self):
        self.controller.stop(resign=False)
        self.zk.close()


@pytest.fixture
def nodes(zk_hosts):
    made = []

    def make(broker_id, hosts=None, **kw):
        n = Node(hosts or zk_hosts, broker_id, **kw)
        made.append(n)
        return n
    yield make
    for n in made:
        try:
            n.crash()
        except Exception:
            pass


def test_store_implements_the_broker_metadata_interface():
    assert issubclass(ZkMetadataStore, MetadataStore)
    assert not ZkMetadataStore.__abstractmethods__


def test_create_topic_is_seen_by_every_broker_with_leaders(nodes, kazoo):
    n1, n2, n3 = nodes(1), nodes(2), nodes(3)
    wait_until(lambda: n3.store.controller_id in (1, 2, 3), what="controller known")
    replicas = [[1, 2], [2, 3], [3, 1]]
    t = asyncio.run(n2.store.create_topic("events", 3, replicas, {"retention.ms": "5000"}))
    assert [t.partitions[p].leader for p in range(3)] == [1, 2, 3]
    assert t.configs == {"retention.ms": "5000"} and len(t.topic_id) == 22
    assert json.loads(kazoo.get("/brokers/topics/events")[0])["topic_id"] == t.topic_id
    for n in (n1, n3):
        got = wait_until(lambda n=n: n.store.topic("events"), what="topic in cache")
        wait_until(lambda n=n: all(n.store.topic("events").partitions[p].leader == p + 1
                                   for p in range(3)), what="leaders in cache")
        assert got.replication_factor == 2
    assert n1.store.topic_names() == ["events"]
    assert sorted(n1.store.brokers()) == [1, 2, 3]
    with pytest.raises(KeyError):
        asyncio.run(n1.store.create_topic("events", 1, [[1]], {}))


def test_assign_replicas_over_live_brokers(nodes):
    n1, _, _ = nodes(1), nodes(2), nodes(3)
    wait_until(lambda: sorted(n1.store.brokers()) == [1, 2, 3], what="brokers")
    replicas = n1.store.assign_replicas(6, 2)
    assert len(replicas) == 6 and all(len(set(r)) == 2 for r in replicas)
    assert sorted(r[0] for r in replicas) == [1, 1, 2, 2, 3, 3]
    t = asyncio.run(n1.store.create_topic("a", 6, replicas, {}))
    assert sorted(ps.leader for ps in t.partitions.values()) == [1, 1, 2, 2, 3, 3]


def test_caches_follow_leadership_when_a_broker_dies(nodes):
    n1 = nodes(1)
    wait_until(lambda: n1.controller.is_active, what="controller")
    n2, n3 = nodes(2), nodes(3)
    asyncio.run(n3.store.create_topic("m", 2, [[2, 3], [2]], {}))
    wait_until(lambda: n3.store.partition_leader("m", 1) == 2, what="initial leader")
    n2.crash()
    wait_until(lambda: n3.store.partition_leader("m", 0) == 3, what="new leader in cache")
    wait_until(lambda: n3.store.partition_leader("m", 1) == NO_LEADER, what="offline")
    assert n3.store.topic("m").partitions[0].isr == [3]
    wait_until(lambda: sorted(n3.store.brokers()) == [1, 3], what="broker list")


def test_delete_topic_and_config_changes(nodes):
    n1, n2 = nodes(1), nodes(2)
    asyncio.run(n1.store.create_topic("c", 1, [[1]], {"segment.bytes": "100"}))
    asyncio.run(n1.store.set_topic_configs("c", {"segment.bytes": "200"}))
    assert n1.store.topic("c").configs == {"segment.bytes": "200"}
    wait_until(lambda: n2.store.topic("c") and n2.store.topic("c").configs ==
               {"segment.bytes": "200"}, what="config change seen by the other broker")
    asyncio.run(n2.store.delete_topic("c"))
    assert n2.store.topic("c") is None
    wait_until(lambda: n1.store.topic("c") is None, what="deletion seen")
    with pytest.raises(KeyError):
        asyncio.run(n1.store.delete_topic("c"))
    with pytest.raises(KeyError):
        asyncio.run(n1.store.set_topic_configs("c", {}))


def test_producer_id_blocks_are_disjoint_across_brokers(nodes, kazoo):
    n1, n2 = nodes(1), nodes(2)
    a = asyncio.run(n1.store.allocate_producer_ids(1000))
    b = asyncio.run(n2.store.allocate_producer_ids(1000))
    c = asyncio.run(n1.store.allocate_producer_ids(10))
    assert (a, b, c) == ((0, 1000), (1000, 1000), (2000, 10))
    assert json.loads(kazoo.get("/latest_producer_id_block")[0]) == {
        "version": 1, "broker": 1, "block_start": "2000", "block_end": "2009"}


def test_cluster_id_shared_and_log_dir_of_another_cluster_refused(nodes):
    n1, n2 = nodes(1), nodes(2)
    assert n1.store.cluster_id == n2.store.cluster_id and len(n1.store.cluster_id) == 22
    assert check_cluster_id(None, n1.store.cluster_id) == n1.store.cluster_id
    assert check_cluster_id(n1.store.cluster_id, n1.store.cluster_id) == n1.store.cluster_id
    with pytest.raises(InconsistentClusterIdError, match=r"log dir /d belongs to cluster "
                       r"OTHERxxxxxxxxxxxxxxxxx .* joining the wrong cluster"):
        check_cluster_id("OTHERxxxxxxxxxxxxxxxxx", n1.store.cluster_id, "/d")


def test_zookeeper_restart_keeps_sessions_and_everything_works_after(own_zk_server, nodes):
    hosts = own_zk_server.hosts + "/c1"
    n1 = nodes(1, hosts=hosts, session_timeout=6.0)
    wait_until(lambda: n1.controller.is_active, what="controller")
    n2 = nodes(2, hosts=hosts, session_timeout=6.0)
    asyncio.run(n1.store.create_topic("before", 1, [[2, 1]], {}))
    own_zk_server.kill()  # crash, then back with its data
    own_zk_server.start()
    wait_until(lambda: n1.zk.connected and n2.zk.connected, timeout=20, what="reconnect")
    # ZooKeeper normally keeps the sessions across a restart; on a slow machine one may
    # expire, and then its broker re-registers (and re-runs the election) on a new one.
    wait_until(lambda: n1.zk.get_broker_ids() == [1, 2], timeout=20, what="registrations")
    wait_until(lambda: n1.zk.get_controller_id() in (1, 2), timeout=20, what="a controller")
    asyncio.run(n2.store.create_topic("after", 1, [[1, 2]], {}))
    wait_until(lambda: n2.store.partition_leader("after", 0) == 1, what="leader after restart")
    # The controller handles events in order, so it has seen every registration change of
    # the restart by now. If broker 1's session expired in it, broker 1 left the ISR of
    # "before", and nothing here fetches to bring it back.
    isr = n1.zk.get_partition_state("before", 0).isr
    n2.crash()
    if 1 in isr:  # the controller still works: leadership of "before" moves to 1
        wait_until(lambda: n1.store.partition_leader("before", 0) == 1,
                   what="failover after restart")
    else:  # without unclean election, its only in-sync replica is gone: offline
        wait_until(lambda: n1.store.partition_leader("before", 0) == NO_LEADER
                   and n1.zk.get_controller_id() == 1, what="offline after restart")


def test_long_outage_then_expired_session_re_registers(own_zk_server, nodes):
    hosts = own_zk_server.hosts + "/c2"
    n1 = nodes(1, hosts=hosts, session_timeout=4.0)
    wait_until(lambda: n1.controller.is_active, what="controller")
    watcher = KafkaZkClient(hosts, session_timeout=4.0).start()
    try:
        own_zk_server.stop()
        own_zk_server.start()
        wait_until(lambda: n1.zk.connected and watcher.connected, timeout=20, what="reconnect")
        # Usually the session survived the restart (epoch 1), but on a loaded machine the
        # client may reconnect too late and re-register on a new session (epoch 2): wait
        # until the controller settled and count from the epoch it settled at.
        wait_until(lambda: n1.controller.is_active and n1.controller.epoch
                   and watcher.get_controller_id() == 1
                   and (e := watcher.get_controller_epoch()) is not None
                   and e.epoch == n1.controller.epoch.epoch,
                   timeout=20, what="controller settled after the restart")
        before = n1.controller.epoch.epoch
        # now the session really expires (e.g. a long GC pause)
        expire_session(n1.zk.kazoo, hosts)
        wait_until(lambda: watcher.get_broker_ids() == [1], timeout=20, what="re-registered")
        # re-elected on its new session, with the next epoch
        wait_until(lambda: watcher.get_controller_id() == 1, timeout=20, what="controller again")
        wait_until(lambda: n1.controller.epoch and n1.controller.epoch.epoch == before + 1,
                   timeout=20, what="new epoch")
        assert watcher.get_controller_epoch().epoch == before + 1
    finally:
        watcher.close()


def test_session_expiry_is_announced_and_cache_recovers(nodes, zk_hosts):
    n1 = nodes(1)
    seen = []
    n1.store.add_listener(lambda kind, name: seen.append(name) if kind == "session" else None)
    asyncio.run(n1.store.create_topic("s", 1, [[1]], {}))
    wait_until(lambda: n1.store.partition_leader("s", 0) == 1, what="leader")
    expire_session(n1.zk.kazoo, zk_hosts)
    wait_until(lambda: seen == ["expired", "renewed"], what="session events")
    assert not n1.store.session_expired
    # the cache keeps following ZooKeeper on the new session
    created_on_new_session_gets_leader(n1)
    assert sorted(n1.store.brokers()) == [1]


def created_on_new_session_gets_leader(n1):
    """Create topic s2 and wait for node 1 to lead it. Re-election, failover and the new
    watches take a few ZooKeeper round trips each: allow a loaded machine 30 s, and say
    where things stood if even that is not enough."""
    asyncio.run(n1.store.create_topic("s2", 1, [[1]], {}))
    try:
        wait_until(lambda: n1.store.partition_leader("s2", 0) == 1, timeout=30.0,
                   what="leader on the new session")
    except TimeoutError as e:
        owner = n1.zk.kazoo.exists("/controller")
        state = n1.zk.kazoo.exists("/brokers/topics/s2/partitions/0/state")
        raise AssertionError(
            f"{e}: controller epoch {n1.controller.epoch}, /controller owner "
            f"{hex(owner.ephemeralOwner) if owner else None}, our session "
            f"{hex(n1.zk.session_id)}, store's controller {n1.store.controller_id}, "
            f"state znode {'present' if state else 'absent'}, "
            f"store's s2 {n1.store.topic('s2')}") from None


@pytest.mark.parametrize("fault", ["election answer lost", "session loss handled late"])
def test_controller_takes_up_an_office_its_own_session_holds(nodes, zk_hosts, monkeypatch,
                                                             fault):
    """After a session expiry the controller must not end up holding /controller on its
    new session while believing it is not the controller (then nobody is ever elected):
    neither when the answer to its winning election is lost, nor when the session loss
    is handled after the new session's election already won."""
    n1 = nodes(1)
    asyncio.run(n1.store.create_topic("s", 1, [[1]], {}))
    wait_until(lambda: n1.store.partition_leader("s", 0) == 1, what="leader")
    injected = []
    if fault == "election answer lost":
        register = KafkaZkClient.register_controller_and_increment_epoch

        def lossy(self, broker_id):
            won = register(self, broker_id)
            if not injected:
                injected.append(won)
                raise ConnectionLoss("the answer of a committed election (injected)")
            return won
        monkeypatch.setattr(KafkaZkClient, "register_controller_and_increment_epoch", lossy)
    else:
        handlers = n1.zk._session_lost_handlers
        controller_handler = handlers[-1]   # the controller registers after the store

        def late():
            time.sleep(1.5)   # after the new session's election
            controller_handler()
            injected.append(True)
        handlers[-1] = late
    expire_session(n1.zk.kazoo, zk_hosts)
    wait_until(lambda: injected, timeout=30.0, what="the injected fault")
    created_on_new_session_gets_leader(n1)
    assert n1.controller.epoch.epoch == n1.zk.get_controller_epoch().epoch
