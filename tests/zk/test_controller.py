"""ZkController against a real ZooKeeper: election and failover, epochs, leader election on
broker loss and return, unclean election, preferred leaders, controlled shutdown, deletion."""

import json
import threading

import pytest
from kazoo.exceptions import NoNodeError

from fastlog.testing import wait_until
from fastlog.zk.client import ControllerMovedError, KafkaZkClient
from fastlog.zk.controller import (
    ControllerElected,
    ControllerResigned,
    LeadershipChanged,
    NotControllerError,
    TopicDeleted,
    ZkController,
)
from fastlog.zk.paths import NO_LEADER, BrokerInfo, EndPoint, LeaderAndIsr
from tests.zk_fixture import expire_session


class Broker:
    """The ZooKeeper side of one broker: its session, registration and controller."""

    def __init__(self, hosts, broker_id, rack=None, session_timeout=4.0, **controller_args):
        self.id = broker_id
        self.hosts = hosts
        self.zk = KafkaZkClient(hosts, session_timeout=session_timeout).start()
        self.zk.create_top_level_paths()
        self.zk.register_broker(BrokerInfo(broker_id, (EndPoint("PLAINTEXT", "127.0.0.1",
                                                                9000 + broker_id),), rack=rack))
        self.events = []
        self.lock = threading.Lock()
        self.controller = ZkController(self.zk, broker_id, **controller_args)
        self.controller.add_listener(self._record)
        self.controller.start()

    def _record(self, ev):
        with self.lock:
            self.events.append(ev)

    def seen(self, kind):
        with self.lock:
            return [e for e in self.events if isinstance(e, kind)]

    def crash(self):
        """Stop as a killed process would: no resignation, the session just ends."""
        self.controller.stop(resign=False)
        self.zk.close()


@pytest.fixture
def cluster(zk_hosts):
    brokers = {}

    def start(broker_id, **kw):
        b = Broker(zk_hosts, broker_id, **kw)
        brokers[broker_id] = b
        return b
    yield start
    for b in brokers.values():
        try:
            b.crash()
        except Exception:
            pass


def active(brokers):
    act = [b for b in brokers if b.controller.is_active]
    return act[0] if len(act) == 1 else None


def test_one_of_three_contenders_becomes_controller(cluster, kazoo):
    brokers = [cluster(i) for i in (1, 2, 3)]
    ctl = wait_until(lambda: active(brokers), what="one active controller")
    assert sum(b.controller.is_active for b in brokers) == 1
    assert json.loads(kazoo.get("/controller")[0])["brokerid"] == ctl.id
    epoch = int(kazoo.get("/controller_epoch")[0])
    assert ctl.controller.epoch.epoch == epoch >= 1
    assert ctl.seen(ControllerElected)[0].epoch == epoch
    assert json.loads(kazoo.get("/feature")[0])["status"] == 1


def test_controller_failover_on_close_raises_the_epoch(cluster, kazoo):
    brokers = [cluster(i) for i in (1, 2, 3)]
    first = wait_until(lambda: active(brokers), what="first controller")
    e1 = first.controller.epoch.epoch
    first.crash()
    rest = [b for b in brokers if b is not first]
    second = wait_until(lambda: active(rest), timeout=6, what="failover")
    assert second.controller.epoch.epoch == e1 + 1
    assert int(kazoo.get("/controller_epoch")[0]) == e1 + 1
    second.controller.stop(resign=True)  # graceful: the last one takes over at once
    third = wait_until(lambda: active([b for b in rest if b is not second]), timeout=6,
                       what="second failover")
    assert third.controller.epoch.epoch == e1 + 2


def test_controller_session_expiry_hands_over_and_old_one_resigns(cluster, kazoo, zk_hosts):
    brokers = [cluster(i) for i in (1, 2)]
    first = wait_until(lambda: active(brokers), what="controller")
    other = next(b for b in brokers if b is not first)
    e1 = first.controller.epoch.epoch
    expire_session(first.zk.kazoo, zk_hosts)
    wait_until(lambda: other.controller.is_active, timeout=6, what="takeover after expiry")
    assert other.controller.epoch.epoch == e1 + 1
    wait_until(lambda: not first.controller.is_active, what="old controller resigned")
    assert first.seen(ControllerResigned)
    # the old controller's broker re-registered on its new session
    wait_until(lambda: kazoo.exists(f"/brokers/ids/{first.id}"), what="re-registration")


def test_zombie_controller_cannot_change_partition_state(cluster, kazoo):
    b1 = cluster(1)
    wait_until(lambda: b1.controller.is_active, what="controller")
    b1.controller.create_topic("z", 1, 1)
    zombie_epoch = b1.controller.epoch
    # the controller "pauses"; meanwhile another broker becomes controller
    b1.controller.stop(resign=False)
    kazoo.delete("/controller")
    b2 = cluster(2)
    wait_until(lambda: b2.controller.is_active, what="new controller")
    before = kazoo.get("/brokers/topics/z/partitions/0/state")
    st = b1.zk.get_partition_state("z", 0)
    with pytest.raises(ControllerMovedError):
        b1.zk.update_leader_and_isr(zombie_epoch, {("z", 0): st.new_leader_and_isr(NO_LEADER, (),
                                                                                  1)})
    assert kazoo.get("/brokers/topics/z/partitions/0/state") == before


def test_create_topic_writes_assignment_and_initial_states(cluster, kazoo):
    brokers = [cluster(i) for i in (1, 2, 3)]
    wait_until(lambda: active(brokers), what="controller")
    # created through a broker that is not necessarily the controller
    states = brokers[2].controller.create_topic("six", 6, 2, {"retention.ms": "1000"})
    assignment = json.loads(kazoo.get("/brokers/topics/six")[0])["partitions"]
    assert sorted(assignment) == [str(p) for p in range(6)]
    assert len(states) == 6
    leaders = [states[p].leader for p in range(6)]
    assert sorted(leaders) == [1, 1, 2, 2, 3, 3]  # spread over the three brokers
    for p in range(6):
        replicas = assignment[str(p)]
        assert states[p].leader == replicas[0] and list(states[p].isr) == replicas
        assert states[p].leader_epoch == 0 and states[p].zk_version == 0
    assert json.loads(kazoo.get("/config/topics/six")[0])["config"] == {"retention.ms": "1000"}


def wait_state(zk, topic, p, pred, timeout=6.0):
    return wait_until(lambda: (lambda s: s if s and pred(s) else None)(
        zk.get_partition_state(topic, p)), timeout=timeout, what=f"state of {topic}-{p}")


def leader_sets_isr(zk, topic, partition, isr):
    """What a partition leader does when its ISR shrinks or grows: a conditional write of
    the state znode (same leader and epoch), then a notice for the controller."""
    st = zk.get_partition_state(topic, partition)
    new = LeaderAndIsr(st.leader, st.leader_epoch, tuple(isr), st.controller_epoch,
                       st.zk_version)
    assert zk.conditional_update_partition_state(topic, partition, new) is not None
    zk.propagate_isr_changes([(topic, partition)])


def test_broker_loss_moves_leaders_to_live_isr_or_offline_then_recovers(cluster, kazoo):
    brokers = {i: cluster(i) for i in (1, 2, 3)}
    ctl = wait_until(lambda: active(brokers.values()), what="controller")
    victim_id = next(i for i in (1, 2, 3) if i != ctl.id)
    others = [i for i in (1, 2, 3) if i != victim_id]
    # p0 replicated on victim (leader) + a survivor; p1 only on the victim
    ctl.controller.create_topic("t", 2, 2, assignment={0: [victim_id, others[0]],
                                                       1: [victim_id]})
    zk = ctl.zk
    s0 = wait_state(zk, "t", 0, lambda s: s.leader == victim_id)
    brokers[victim_id].crash()
    s0 = wait_state(zk, "t", 0, lambda s: s.leader == others[0])
    assert s0.isr == (others[0],) and s0.leader_epoch == 1
    assert s0.controller_epoch == ctl.controller.epoch.epoch
    s1 = wait_state(zk, "t", 1, lambda s: s.leader == NO_LEADER)
    assert s1.isr == (victim_id,)  # kept: only it may lead again
    assert ctl.seen(LeadershipChanged)
    # the broker comes back: the offline partition has its leader again
    cluster(victim_id)
    s1 = wait_state(zk, "t", 1, lambda s: s.leader == victim_id)
    assert s1.leader_epoch == 2
    # it is not back in p0's ISR (the leader adds it once caught up), so p0 keeps its leader
    assert zk.get_partition_state("t", 0).leader == others[0]


def test_follower_loss_shrinks_isr(cluster):
    brokers = {i: cluster(i) for i in (1, 2)}
    ctl = wait_until(lambda: active(brokers.values()), what="controller")
    other = next(i for i in brokers if i != ctl.id)
    ctl.controller.create_topic("f", 1, 2, assignment={0: [ctl.id, other]})
    brokers[other].crash()
    s = wait_state(ctl.zk, "f", 0, lambda s: s.isr == (ctl.id,))
    assert s.leader == ctl.id and s.leader_epoch == 1


def test_unclean_election_only_when_enabled(cluster):
    b1 = cluster(1, unclean_leader_election=lambda topic: topic == "dirty")
    wait_until(lambda: b1.controller.is_active, what="controller")
    b2, b3 = cluster(2), cluster(3)
    for topic in ("clean", "dirty"):
        b1.controller.create_topic(topic, 1, 2, assignment={0: [2, 3]})
        leader_sets_isr(b1.zk, topic, 0, [2])  # its follower fell behind
    b2.crash()
    wait_state(b1.zk, "clean", 0, lambda s: s.leader == NO_LEADER)
    s = wait_state(b1.zk, "dirty", 0, lambda s: s.leader == 3)
    assert s.isr == (3,)
    assert b3.controller.is_active is False


def test_preferred_leader_election_and_controlled_shutdown(cluster):
    brokers = {i: cluster(i) for i in (1, 2, 3)}
    ctl = wait_until(lambda: active(brokers.values()), what="controller")
    others = [i for i in (1, 2, 3) if i != ctl.id]
    ctl.controller.create_topic("p", 1, 3, assignment={0: [others[0], others[1], ctl.id]})
    assert ctl.controller.controlled_shutdown(others[0]) == set()
    s = ctl.zk.get_partition_state("p", 0)
    assert s.leader == others[1] and others[0] not in s.isr
    assert ctl.controller.elect_preferred_leaders() == {}  # preferred is out of the ISR
    # the broker restarts and its leader puts it back into the ISR
    brokers[others[0]].crash()
    brokers[others[0]] = cluster(others[0])
    leader_sets_isr(ctl.zk, "p", 0, ctl.zk.get_partition_state("p", 0).isr + (others[0],))
    wait_until(lambda: others[0] in ctl.controller.snapshot()[("p", 0)].isr, what="isr notice")
    moved = ctl.controller.elect_preferred_leaders()
    assert moved[("p", 0)].leader == others[0]
    non_ctl = brokers[others[1]]
    with pytest.raises(NotControllerError):
        non_ctl.controller.elect_preferred_leaders()


def test_auto_leader_rebalance(cluster):
    b1 = cluster(1, auto_leader_rebalance_interval=0.2)
    wait_until(lambda: b1.controller.is_active, what="controller")
    b2 = cluster(2)
    b1.controller.create_topic("r", 1, 2, assignment={0: [2, 1]})
    b2.crash()
    wait_state(b1.zk, "r", 0, lambda s: s.leader == 1)
    cluster(2)
    leader_sets_isr(b1.zk, "r", 0, [1, 2])
    wait_state(b1.zk, "r", 0, lambda s: s.leader == 2)


def test_topic_deletion_through_admin_delete_topics(cluster, kazoo):
    b1 = cluster(1)
    wait_until(lambda: b1.controller.is_active, what="controller")
    b1.controller.create_topic("doomed", 2, 1, {"segment.bytes": "1024"})
    b1.controller.delete_topic("doomed")
    wait_until(lambda: b1.seen(TopicDeleted), what="deletion")
    for p in ("/brokers/topics/doomed", "/config/topics/doomed", "/admin/delete_topics/doomed"):
        assert kazoo.exists(p) is None
    # a deletion flag for an unknown topic is just removed
    kazoo.create("/admin/delete_topics/never", b"")
    wait_until(lambda: kazoo.exists("/admin/delete_topics/never") is None, what="flag cleanup")


def test_new_controller_finishes_what_the_old_one_left(cluster, kazoo):
    b1 = cluster(1)
    wait_until(lambda: b1.controller.is_active, what="controller")
    b2 = cluster(2)
    b1.controller.create_topic("h", 2, 2, assignment={0: [1, 2], 1: [2, 1]})
    b1.crash()
    wait_until(lambda: b2.controller.is_active, timeout=6, what="failover")
    s0 = wait_state(b2.zk, "h", 0, lambda s: s.leader == 2)
    assert s0.isr == (2,) and s0.controller_epoch == b2.controller.epoch.epoch
    assert b2.zk.get_partition_state("h", 1).isr == (2,)


def test_partitions_wait_for_a_live_replica(cluster):
    b1 = cluster(1)
    wait_until(lambda: b1.controller.is_active, what="controller")
    states = b1.controller.create_topic("later", 1, 1, assignment={0: [7]}, wait=0.3)
    assert states == {}  # no replica alive: no state yet
    cluster(7)
    s = wait_state(b1.zk, "later", 0, lambda s: s.leader == 7)
    assert s.isr == (7,) and s.leader_epoch == 0


def test_restarted_leader_loses_leadership_even_if_nobody_saw_it_gone(cluster, zk_hosts):
    brokers = {i: cluster(i) for i in (1, 2, 3)}
    ctl = wait_until(lambda: active(brokers.values()), what="controller")
    a, b = [i for i in (1, 2, 3) if i != ctl.id]
    ctl.controller.create_topic("bounce", 2, 2, assignment={0: [a, b], 1: [a]})
    before = ctl.zk.get_broker(a).epoch
    # the leader's session ends and it re-registers at once (a fast restart)
    expire_session(brokers[a].zk.kazoo, zk_hosts)
    wait_until(lambda: (ctl.zk.get_broker(a) or before) != before and
               ctl.zk.get_broker(a).epoch > before, what="re-registration")
    s0 = wait_state(ctl.zk, "bounce", 0, lambda s: s.leader == b)
    assert s0.isr == (b,)
    # sole replica: offline for a moment, then back to the restarted broker
    s1 = wait_state(ctl.zk, "bounce", 1, lambda s: s.leader == a and s.leader_epoch >= 2)
    assert s1.isr == (a,)


def test_create_partitions_extends_the_topic(cluster, kazoo):
    brokers = {i: cluster(i) for i in (1, 2, 3)}
    ctl = wait_until(lambda: active(brokers.values()), what="controller")
    brokers[1].controller.create_topic("grow", 2, 2)
    states = brokers[2].controller.create_partitions("grow", 5)
    assert sorted(states) == [0, 1, 2, 3, 4]
    assignment = json.loads(kazoo.get("/brokers/topics/grow")[0])["partitions"]
    assert len(assignment) == 5
    for p in range(5):
        assert len(set(assignment[str(p)])) == 2
        assert states[p].leader == assignment[str(p)][0]
    with pytest.raises(ValueError):
        ctl.controller.create_partitions("grow", 5)
    states = ctl.controller.create_partitions("grow", 6, assignment={5: [3, 1]})
    assert states[5].leader == 3 and states[5].isr == (3, 1)


def test_admin_preferred_replica_election_request(cluster, kazoo):
    b1 = cluster(1)
    wait_until(lambda: b1.controller.is_active, what="controller")
    b2 = cluster(2)
    b1.controller.create_topic("pre", 1, 2, assignment={0: [2, 1]})
    b2.crash()
    wait_state(b1.zk, "pre", 0, lambda s: s.leader == 1)
    cluster(2)
    leader_sets_isr(b1.zk, "pre", 0, [1, 2])
    wait_until(lambda: 2 in b1.controller.snapshot()[("pre", 0)].isr, what="isr notice")
    b1.zk.request_preferred_replica_election([("pre", 0)])
    try:
        written = kazoo.get("/admin/preferred_replica_election")[0]
    except NoNodeError:
        written = None   # the controller has read and removed it already (as below)
    if written is not None:
        assert json.loads(written) == {
            "version": 1, "partitions": [{"topic": "pre", "partition": 0}]}
    wait_state(b1.zk, "pre", 0, lambda s: s.leader == 2)
    wait_until(lambda: kazoo.exists("/admin/preferred_replica_election") is None,
               what="request removed")
